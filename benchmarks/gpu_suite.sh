#!/usr/bin/env bash
# Everything that needs the GPU, in one call: GPU tests, compute-sanitizer, benchmarks.
# Results go under $OUT (default ./gpu-results).
# Usage: bash benchmarks/gpu_suite.sh [all | any of: tests sanitize env per train]
set -uo pipefail
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
parts=" ${*:-all} "
want() { [[ $parts == *" all "* || $parts == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
if want tests; then
  timeout 400 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs --tb=short --durations=10 tests 2>&1 | grep -v "^  " | tail -70 | tee "$OUT/gpu_tests.log"
fi
if want sanitize; then
  for tool in memcheck racecheck synccheck; do
    for script in sanitize_step sanitize_tree; do
      timeout 150 compute-sanitizer --tool $tool --error-exitcode 3 python3 benchmarks/$script.py 2>&1 | tail -3 | tee "$OUT/sanitizer_${tool}_${script}.log"
    done
  done
fi
if want env; then
  timeout 150 python3 benchmarks/env_throughput.py --out "$OUT/env.json" 2>&1 | tee "$OUT/env.log"
fi
if want per; then
  timeout 300 python3 benchmarks/per_throughput.py --reps 200 --out "$OUT/per.json" 2>&1 | tail -40 | tee "$OUT/per.log"
fi
if want train; then
  timeout 300 python3 benchmarks/train_throughput.py --out "$OUT/train.json" 2>&1 | grep -v Warn | tee "$OUT/train.log"
fi
