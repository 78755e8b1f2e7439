#!/usr/bin/env bash
# The GPU quickstart as a new machine's first run, with and without pyplot loading in the
# background (gpu_trading_env.reports.report.start_loading_pyplot), alternated on one host:
# every run gets new, empty CuPy, Inductor, Triton and matplotlib cache folders.
#   bash benchmarks/cold_quickstart_ab.sh      (on a CUDA host; about a minute a run)
set -u
run() { # $1 label, $2 preload (1 or 0)
  d=$(mktemp -d); export MPLCONFIGDIR=$d/mpl CUPY_CACHE_DIR=$d/cupy TORCHINDUCTOR_CACHE_DIR=$d/ind TRITON_CACHE_DIR=$d/tri
  s=$(date +%s.%N)
  if [ "$2" = 1 ]; then python3 -m agents.cli train --device cuda --out $d/run >$d/log 2>&1
  else python3 -c "import sys, gpu_trading_env.reports.report as r; r.start_loading_pyplot=lambda: None; from agents.cli import main; sys.exit(main(sys.argv[1:]))" train --device cuda --out $d/run >$d/log 2>&1; fi
  e=$(date +%s.%N)
  python3 -c "import json,sys; m=json.load(open('$d/run/metrics.json')); print('$1', 'wall %.1f' % ($e-$s), 'train %.1f' % m['train_seconds'], 'sharpe %.3f' % m['strategy']['sharpe'])"
  unset MPLCONFIGDIR CUPY_CACHE_DIR TORCHINDUCTOR_CACHE_DIR TRITON_CACHE_DIR
}
run preload 1; run no-preload 0; run preload 1; run no-preload 0
