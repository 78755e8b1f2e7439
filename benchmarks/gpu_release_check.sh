#!/usr/bin/env bash
# The release check that fits a short GPU call: the GPU test tier, the env's step modes
# (env_throughput --backends modes) and the quickstart's first command on the GPU.
# Results under $OUT: gpu_tests.log, env_modes.json, env_modes.log, quickstart_cuda.json.
set -uo pipefail
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
timeout --foreground "${TESTS_TIMEOUT:-200}" python3 -m pytest -m gpu -q -p no:cacheprovider \
  -rfEs --tb=short --durations=12 --timeout 90 tests 2>&1 | grep -v "^  " | tail -80 >"$OUT/gpu_tests.log"
tail -3 "$OUT/gpu_tests.log"
timeout --foreground "${ENV_TIMEOUT:-90}" python3 benchmarks/env_throughput.py --backends modes \
  --out "$OUT/env_modes.json" >"$OUT/env_modes.log" 2>&1
tail -25 "$OUT/env_modes.log"
timeout --foreground "${QUICKSTART_TIMEOUT:-120}" python3 benchmarks/quickstart_record.py \
  --device cuda --out "$OUT/quickstart_cuda.json" >"$OUT/quickstart.log" 2>&1
tail -20 "$OUT/quickstart.log"
