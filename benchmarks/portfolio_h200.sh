#!/usr/bin/env bash
# The portfolio env's GPU figures in one call: on a quiet GPU the env's throughput over K and
# GpuDQN.learn at K = 8, then the portfolio zoo (5 seeds) beside the GPU test tier.
# Results under $OUT: portfolio.json, train_portfolio.json, pzoo.tar.gz (the zoo's report
# folder), pzoo.log, gpu_tests.log and the benchmarks' logs.
# TESTS=0 leaves the test tier out, BENCH=0 the two benchmarks; PZOO_MARKETS and PZOO_SEEDS narrow
# the zoo (default: every market, seeds 0 to 4); PROFILE=1 first times the phases of two
# lead_lag_k32 runs (benchmarks/portfolio_run_profile.py, run_profile.json).
set -uo pipefail
OUT=${OUT:-portfolio-results}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
if [ "${BENCH:-1}" != 0 ]; then
  timeout --foreground "${ENV_TIMEOUT:-100}" python3 -m benchmarks.portfolio_throughput \
    --out "$OUT/portfolio.json" >"$OUT/portfolio.log" 2>&1
  tail -12 "$OUT/portfolio.log"
  timeout --foreground "${TRAIN_TIMEOUT:-110}" python3 -m benchmarks.train_throughput \
    --portfolio 8 --out "$OUT/train_portfolio.json" >"$OUT/train_portfolio.log" 2>&1
  tail -6 "$OUT/train_portfolio.log"
fi
if [ "${PROFILE:-0}" != 0 ]; then
  timeout --foreground "${PROFILE_TIMEOUT:-240}" python3 -m benchmarks.portfolio_run_profile \
    --market lead_lag_k32 --repeat 2 --out "$OUT/run_profile.json" >"$OUT/run_profile.log" 2>&1
  tail -12 "$OUT/run_profile.log"
fi
markets=()
[ -n "${PZOO_MARKETS:-}" ] && read -ra markets <<<"--markets $PZOO_MARKETS"
tests=
if [ "${TESTS:-1}" != 0 ]; then
  # SIGINT at the limit: pytest then still prints its summary of what ran.
  (timeout --foreground -s INT "${TESTS_TIMEOUT:-320}" python3 -m pytest -m gpu -v \
    -p no:cacheprovider -rfEs --tb=short --durations=15 --timeout "${TEST_TIMEOUT:-200}" tests \
    2>&1 | grep -v DEBUG >"$OUT/gpu_tests.log") &
  tests=$!
fi
timeout --foreground "${ZOO_TIMEOUT:-330}" python3 -m agents.cli zoo --portfolio --device cuda \
  "${markets[@]}" --seeds ${PZOO_SEEDS:-0 1 2 3 4} --runs-per-device "${ZOO_WORKERS:-4}" --no-progress --out /tmp/pzoo \
  >"$OUT/pzoo.log" 2>&1
echo "exit $?" >>"$OUT/pzoo.log"
tar -czf "$OUT/pzoo.tar.gz" -C /tmp pzoo 2>/dev/null
tail -20 "$OUT/pzoo.log" | cut -c1-220
[ -n "$tests" ] && wait "$tests"
grep -E "FAILED|ERROR" "$OUT/gpu_tests.log" | head -30
tail -3 "$OUT/gpu_tests.log"
