#!/usr/bin/env bash
# One GPU call for a release: the market zoo with train's defaults (5 seeds) beside the GPU test
# tier, then, on a quiet GPU, the env's step modes, the learner's throughput and the quickstart.
# Results under $OUT: zoo.tar.gz (the zoo's report folder), zoo.log, gpu_tests.log,
# env_modes.json, train.json, train_portfolio.json (GpuDQN.learn on the portfolio env, K = 8),
# quickstart_cuda.json, and logs.tar.gz (the last four's logs).
# ZOO=0 leaves the zoo out (the tests then start at once): a release check for a short call.
set -uo pipefail
OUT=${OUT:-release-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
LOGS=/tmp/release-logs
mkdir -p "$LOGS"
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$LOGS/gpu.txt"

# The zoo and the tests share the GPU; the zoo runs first in each worker, so its compile times
# are those of a busy GPU, as in any run beside other work.
zoo=
if [ "${ZOO:-1}" != 0 ]; then
  (
    timeout --foreground "${ZOO_TIMEOUT:-300}" python3 -m agents.cli zoo --device cuda \
      --seeds 0 1 2 3 4 --runs-per-device "${ZOO_WORKERS:-4}" --no-progress --out /tmp/zoo-release \
      >"$OUT/zoo.log" 2>&1
    echo "exit $?" >>"$OUT/zoo.log"
    tar -czf "$OUT/zoo.tar.gz" -C /tmp zoo-release 2>/dev/null
  ) &
  zoo=$!
  sleep "${TESTS_DELAY:-60}"  # the zoo's workers compile first
fi
timeout --foreground "${TESTS_TIMEOUT:-300}" python3 -m pytest -m gpu -q -p no:cacheprovider \
  -rfEs --tb=short --durations=10 --timeout 150 tests 2>&1 | grep -v "DEBUG" | tail -120 \
  >"$OUT/gpu_tests.log"
tail -3 "$OUT/gpu_tests.log"
if [ -n "$zoo" ]; then
  wait "$zoo"
  tail -14 "$OUT/zoo.log" | cut -c1-200
fi

timeout --foreground "${ENV_TIMEOUT:-90}" python3 -m benchmarks.env_throughput --backends modes \
  --out "$OUT/env_modes.json" >"$LOGS/env_modes.log" 2>&1
tail -16 "$LOGS/env_modes.log"
timeout --foreground "${TRAIN_TIMEOUT:-150}" python3 -m benchmarks.train_throughput \
  --learner-only --defaults-only --out "$OUT/train.json" >"$LOGS/train.log" 2>&1
tail -16 "$LOGS/train.log"
timeout --foreground "${TRAIN_TIMEOUT:-150}" python3 -m benchmarks.train_throughput \
  --portfolio 8 --out "$OUT/train_portfolio.json" >"$LOGS/train_portfolio.log" 2>&1
tail -4 "$LOGS/train_portfolio.log"
timeout --foreground "${QUICKSTART_TIMEOUT:-90}" python3 -m benchmarks.quickstart_record \
  --device cuda --out "$OUT/quickstart_cuda.json" >"$LOGS/quickstart.log" 2>&1
tail -8 "$LOGS/quickstart.log"
tar -czf "$OUT/logs.tar.gz" -C /tmp release-logs
