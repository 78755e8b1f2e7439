#!/usr/bin/env bash
# The real-market benchmark on one GPU (docs/REAL_MARKETS.md). Parts, any of:
#   real   both of: series  zoo --real on the real series (3 seeds)
#                   synthetic  zoo --real on the shifting and regime-family markets (5 seeds)
#   zoo    the market zoo on seeds $ZOO_SEEDS (default 20 to 24: seeds no choice looked at)
#   wf     walkforward's defaults on every real series, seeds $WF_SEEDS (default 0 1 2;
#          experiments/real_walkforward.py)
#   (wf runs first, then series, synthetic, zoo)
#   tests  the GPU test tier ($TEST_PATHS, default tests), beside the other parts
# Results under $OUT: one .tar.gz per report folder (its JSON and CSV files), and the logs.
set -uo pipefail
OUT=${OUT:-real-results}
mkdir -p "$OUT"
parts=" ${*:-real zoo} "
parts=${parts/ real / series synthetic }
want() { [[ $parts == *" $1 "* ]]; }
# A report folder's JSON and CSV files, and its PNG figures with "png" as $2 (models stay: the
# files back are limited).
pack() {
  local png=(-false)
  [ "${2:-}" = png ] && png=(-name '*.png')
  (cd /tmp && find "$1" \( -name '*.json' -o -name '*.csv' -o "${png[@]}" \) -print |
    tar -czf "$OUT/$1.tar.gz" -T -)
}
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | tee "$OUT/gpu.txt"
W=${WORKERS:-4}
tests=
if want tests; then
  (timeout --foreground "${TESTS_TIMEOUT:-400}" python3 -m pytest -m gpu -q -p no:cacheprovider \
    -rfEs --tb=short --timeout 200 ${TEST_PATHS:-tests} 2>&1 | grep -v DEBUG | tail -80 >"$OUT/gpu_tests.log") &
  tests=$!
fi
if want wf; then
  timeout --foreground "${WF_TIMEOUT:-500}" python3 -m experiments.real_walkforward --device cuda \
    --seeds ${WF_SEEDS:-0 1 2} --workers "$W" --out "$OUT/real_walkforward.json" --figure "$OUT/walkforward.png" \
    >"$OUT/real_walkforward.log" 2>&1
  echo "exit $?" >>"$OUT/real_walkforward.log"
fi
if want series; then
  series=$(python3 -c "from gpu_trading_env.data.real_series import REAL_SERIES; print(*REAL_SERIES)")
  timeout --foreground "${REAL_TIMEOUT:-300}" python3 -m agents.cli zoo --real --device cuda \
    --markets $series --seeds 0 1 2 --runs-per-device "$W" --no-progress --out /tmp/real-series \
    >"$OUT/real_series.log" 2>&1; echo "exit $?" >>"$OUT/real_series.log"
  pack real-series png
fi
if want synthetic; then
  others=$(python3 -c "from agents.pipelines.zoo import REAL_MARKETS; print(*[m.name for m in REAL_MARKETS if m.kind != 'real'])")
  timeout --foreground "${SHIFT_TIMEOUT:-300}" python3 -m agents.cli zoo --real --device cuda \
    --markets $others --seeds ${SYNTHETIC_SEEDS:-0 1 2 3 4} --runs-per-device "$W" --no-progress \
    --out /tmp/real-synthetic >"$OUT/real_synthetic.log" 2>&1; echo "exit $?" >>"$OUT/real_synthetic.log"
  pack real-synthetic png
fi
if want zoo; then
  timeout --foreground "${ZOO_TIMEOUT:-330}" python3 -m agents.cli zoo --device cuda \
    --seeds ${ZOO_SEEDS:-20 21 22 23 24} --runs-per-device "$W" --no-progress --out /tmp/zoo \
    >"$OUT/zoo.log" 2>&1; echo "exit $?" >>"$OUT/zoo.log"
  pack zoo
fi
[ -n "$tests" ] && wait "$tests"
for f in "$OUT"/*.log; do echo "== $f"; tail -25 "$f" | cut -c1-220; done
