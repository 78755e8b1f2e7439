#!/usr/bin/env bash
# The real-market benchmark on one GPU (docs/REAL_MARKETS.md). Parts, any of:
#   real   zoo --real: the real series (3 seeds) and the shifting and regime-family markets (5)
#   zoo    the market zoo on seeds 20 to 24 (seeds no choice of the learner looked at)
#   wf     walkforward's defaults on every real series, 3 seeds (experiments/real_walkforward.py)
#   tests  the GPU test tier, beside the first part
# Results under $OUT: one .tar.gz per report folder, and the logs.
set -uo pipefail
OUT=${OUT:-real-results}
mkdir -p "$OUT"
parts=" ${*:-real zoo} "
want() { [[ $parts == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
W=${WORKERS:-4}
tests=
if want tests; then
  (timeout --foreground "${TESTS_TIMEOUT:-400}" python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfEs --tb=short --timeout 200 tests 2>&1 | grep -v DEBUG | tail -80 >"$OUT/gpu_tests.log") &
  tests=$!
fi
if want real; then
  series=$(python3 -c "from gpu_trading_env.data.real_series import REAL_SERIES; print(*REAL_SERIES)")
  others=$(python3 -c "from agents.pipelines.zoo import REAL_MARKETS; print(*[m.name for m in REAL_MARKETS if m.kind != 'real'])")
  timeout --foreground "${REAL_TIMEOUT:-300}" python3 -m agents.cli zoo --real --device cuda \
    --markets $series --seeds 0 1 2 --runs-per-device "$W" --no-progress --out /tmp/real-series \
    >"$OUT/real_series.log" 2>&1; echo "exit $?" >>"$OUT/real_series.log"
  tar -czf "$OUT/real_series.tar.gz" -C /tmp real-series 2>/dev/null
  timeout --foreground "${SHIFT_TIMEOUT:-300}" python3 -m agents.cli zoo --real --device cuda \
    --markets $others --seeds 0 1 2 3 4 --runs-per-device "$W" --no-progress --out /tmp/real-synthetic \
    >"$OUT/real_synthetic.log" 2>&1; echo "exit $?" >>"$OUT/real_synthetic.log"
  tar -czf "$OUT/real_synthetic.tar.gz" -C /tmp real-synthetic 2>/dev/null
fi
if want zoo; then
  timeout --foreground "${ZOO_TIMEOUT:-330}" python3 -m agents.cli zoo --device cuda \
    --seeds 20 21 22 23 24 --runs-per-device "$W" --no-progress --out /tmp/zoo-20-24 \
    >"$OUT/zoo.log" 2>&1; echo "exit $?" >>"$OUT/zoo.log"
  tar -czf "$OUT/zoo.tar.gz" -C /tmp zoo-20-24 2>/dev/null
fi
if want wf; then
  timeout --foreground "${WF_TIMEOUT:-500}" python3 -m experiments.real_walkforward --device cuda \
    --seeds 0 1 2 --workers "$W" --out "$OUT/real_walkforward.json" >"$OUT/real_walkforward.log" 2>&1
  echo "exit $?" >>"$OUT/real_walkforward.log"
fi
[ -n "$tests" ] && wait "$tests"
for f in "$OUT"/*.log; do echo "== $f"; tail -25 "$f" | cut -c1-220; done
