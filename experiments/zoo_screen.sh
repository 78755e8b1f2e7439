#!/usr/bin/env bash
# Learner variants side by side on the market zoo, in one GPU call: each variant is a zoo run
# (every market, the seeds given) with extra train options; the variants run at the same time,
# WORKERS runs each on the one GPU. Results: $OUT/<variant>.tar.gz (the zoo's report folder and log).
# MARKETS narrows the markets (default: all).
# Usage: OUT=dir bash experiments/zoo_screen.sh "SEEDS" NAME='TRAIN ARGS' [NAME='TRAIN ARGS' ...]
set -uo pipefail
OUT=${OUT:-zoo-screen}
mkdir -p "$OUT"
seeds=$1
shift
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
for spec in "$@"; do
  name=${spec%%=*}
  args=${spec#*=}
  (
    timeout --foreground "${ZOO_TIMEOUT:-540}" python3 -m agents.cli zoo --device cuda \
      --seeds $seeds ${MARKETS:+--markets $MARKETS} --runs-per-device "${WORKERS:-2}" --no-progress \
      --train-args "$args" --out "/tmp/zoo-$name" >"/tmp/zoo-$name.log" 2>&1
    echo "exit $?" >>"/tmp/zoo-$name.log"
    tar -czf "$OUT/$name.tar.gz" -C /tmp "zoo-$name" "zoo-$name.log" 2>/dev/null
  ) &
done
wait
for spec in "$@"; do
  name=${spec%%=*}
  echo "== $name: ${spec#*=}"
  tail -14 "/tmp/zoo-$name.log"
done
