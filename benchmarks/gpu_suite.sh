#!/usr/bin/env bash
# Everything that needs the GPU, in one call: GPU tests, compute-sanitizer, benchmarks.
# Results go under $OUT (default ./gpu-results). Usage: bash benchmarks/gpu_suite.sh [tests|bench|all]
set -uo pipefail
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
part=${1:-all}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
if [[ $part == tests || $part == all ]]; then
  timeout 480 python3 -m pytest -m gpu -q -p no:cacheprovider -rA --durations=15 tests 2>&1 | tail -60 | tee "$OUT/gpu_tests.log"
  for tool in memcheck racecheck; do
    timeout 120 compute-sanitizer --tool $tool --error-exitcode 3 python3 benchmarks/sanitize_step.py 2>&1 | tail -4 | tee "$OUT/sanitizer_$tool.log"
  done
fi
if [[ $part == bench || $part == all ]]; then
  timeout 150 python3 benchmarks/env_throughput.py --out "$OUT/env.json" 2>&1 | tee "$OUT/env.log"
  timeout 200 python3 benchmarks/per_throughput.py --reps 50 --out "$OUT/per.json" 2>&1 | tail -40 | tee "$OUT/per.log"
  timeout 240 python3 benchmarks/train_throughput.py --out "$OUT/train.json" 2>&1 | tee "$OUT/train.log"
fi
