#!/usr/bin/env bash
# Everything that needs the GPU, in one call: GPU tests, compute-sanitizer, benchmarks.
# Results go under $OUT (default ./gpu-results).
# Usage: bash benchmarks/gpu_suite.sh [all | any of: tests sanitize env per train soak scaling
#                                      tests1 quickstart sweep profile]
# Exits 1 when the sanitizer gate (or the soak) fails.
set -uo pipefail
# Every inner `timeout` runs in the foreground: in its own process group (timeout's default) a
# command outlived an outer timeout that stopped this script, and a test run left behind that
# way shared the GPU with the benchmarks that followed.
OUT=${OUT:-gpu-results}
mkdir -p "$OUT"
parts=" ${*:-all} "
status=0
want() { [[ $parts == *" all "* || $parts == *" $1 "* ]]; }
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader | tee "$OUT/gpu.txt"
git rev-parse --short HEAD 2>/dev/null | tee -a "$OUT/gpu.txt"
if want tests; then
  timeout --foreground 400 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs --tb=short --durations=10 tests 2>&1 | grep -v "^  " | tail -70 | tee "$OUT/gpu_tests.log"
fi
if want sanitize; then
  # The gate: four tools x every kernel (env step/reset/observe with a NumPy parity check; the
  # tree's update, check, levels, fill, sample and weights kernels against the NumPy tree; the
  # fused rollout with its CUDA graph and the monolithic kernel). A run fails on a sanitizer
  # error or hazard, on a wrong result (the scripts raise), or when the script did not finish.
  # The twelve runs go side by side (each is one CPU-bound process on a lightly used GPU, and one
  # after another they outlast a 10-minute device call); SANITIZE_TIMEOUT caps each run.
  sanitize_failed=0
  runs=()
  # SANITIZE_TOOLS / SANITIZE_SCRIPTS narrow the gate to a rerun of some of its runs.
  for tool in ${SANITIZE_TOOLS:-memcheck racecheck synccheck initcheck}; do
    for script in ${SANITIZE_SCRIPTS:-sanitize_step sanitize_tree sanitize_rollout}; do
      log="$OUT/sanitizer_${tool}_${script}.log"
      args=()
      # initcheck flags torch's own bf16 products (an elementwise kernel reading what cuBLASLt
      # wrote; benchmarks/initcheck_bf16_gemm.py shows it without our code): the rollout script
      # runs its products in tf32 there. Our kernels run the same in either precision.
      [[ $tool == initcheck && $script == sanitize_rollout ]] && args=(--train-precision tf32)
      (
        timeout --foreground "${SANITIZE_TIMEOUT:-540}" compute-sanitizer --tool "$tool" \
          --error-exitcode 3 python3 -m "benchmarks.$script" "${args[@]}" >"$log" 2>&1
        echo "exit $?" >>"$log"
      ) &
      runs+=("$tool $script")
    done
  done
  if [[ " ${SANITIZE_TOOLS:-initcheck} " == *" initcheck "* ]]; then  # the record of why
    compute-sanitizer --tool initcheck python3 -m benchmarks.initcheck_bf16_gemm \
      >"$OUT/sanitizer_initcheck_bf16_gemm.log" 2>&1
    echo "initcheck on plain torch bf16 products: $(grep -c "Uninitialized" \
      "$OUT/sanitizer_initcheck_bf16_gemm.log") reports" | tee -a "$OUT/sanitize_summary.txt"
  fi
  wait
  for run in "${runs[@]}"; do
    read -r tool script <<<"$run"
    log="$OUT/sanitizer_${tool}_${script}.log"
    rc=$(tail -1 "$log" | sed -n 's/^exit //p')
    verdict=PASS
    if [[ $rc != 0 ]] || ! grep -q "^${script}: done" "$log" \
      || grep -qE "ERROR SUMMARY: [1-9]|RACECHECK SUMMARY: [1-9]|[1-9][0-9]* hazards? displayed" "$log"; then
      verdict="FAIL (exit $rc)"
      sanitize_failed=1
    fi
    echo "sanitize $tool $script: $verdict" | tee -a "$OUT/sanitize_summary.txt"
  done
  if [[ $sanitize_failed -ne 0 ]]; then
    echo "sanitize: FAILED (logs in $OUT/sanitizer_*.log)" | tee -a "$OUT/sanitize_summary.txt"
    status=1
  else
    echo "sanitize: all clean" | tee -a "$OUT/sanitize_summary.txt"
  fi
fi
if want env; then
  timeout --foreground 150 python3 -m benchmarks.env_throughput --out "$OUT/env.json" 2>&1 | tee "$OUT/env.log"
fi
if want per; then
  timeout --foreground 300 python3 -m benchmarks.per_throughput --reps 200 --out "$OUT/per.json" 2>&1 | tail -40 | tee "$OUT/per.log"
fi
if want train; then
  timeout --foreground 300 python3 -m benchmarks.train_throughput --out "$OUT/train.json" 2>&1 | grep -v Warn | tee "$OUT/train.log"
fi
if [[ $parts == *" scaling "* ]]; then  # not part of "all": needs 2 or more GPUs
  # GpuDQN.learn on 1 GPU and on every GPU of the host (NCCL), same per-GPU settings.
  timeout --foreground 900 python3 -m benchmarks.scaling ${SCALING_ARGS:-} --out "$OUT/scaling.json" 2>&1 | grep -v Warn | tee "$OUT/scaling.log"
fi
if [[ $parts == *" tests1 "* ]]; then  # not part of "all": the GPU tier on cuda:1 (2-GPU host)
  GTE_TEST_DEVICE=1 timeout --foreground 600 python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs --tb=short tests 2>&1 | grep -v "^  " | tail -40 | tee "$OUT/gpu_tests_cuda1.log"
fi
if [[ $parts == *" quickstart "* ]]; then  # not part of "all": the README's command, 3 seeds
  # One process per seed, as a user runs it: wall time of the whole command, the agent's
  # out-of-sample return as a fraction of the known rule's (metrics.json).
  for seed in 0 1 2; do
    start=$(date +%s.%N)
    timeout --foreground 300 python3 -m agents.cli train --device cuda --seed "$seed" --no-progress ${QUICKSTART_ARGS:-} \
      --out "$OUT/quickstart_seed$seed" >"$OUT/quickstart_seed$seed.log" 2>&1
    rc=$?
    wall=$(python3 -c "print(round($(date +%s.%N) - $start, 1))")
    echo "seed $seed rc=$rc wall ${wall} s vs_rule $(python3 -c "import json; print(json.load(open('$OUT/quickstart_seed$seed/metrics.json'))['agent_return_vs_known_rule'])" 2>/dev/null)" | tee -a "$OUT/quickstart.txt"
  done
fi
if [[ $parts == *" sweep "* ]]; then  # not part of "all": the quickstart's settings over seeds
  # `gpu-trading-env sweep` on every GPU of the host, SWEEP_ARGS passed through (e.g.
  # "--runs-per-device 2" or "--grid gamma=0.5,0.9"); the report's table goes to sweep.txt.
  start=$(date +%s)
  timeout --foreground 540 python3 -m agents.cli sweep --seeds 0 1 2 3 --no-progress \
    --out "$OUT/sweep" ${SWEEP_ARGS:-} >"$OUT/sweep.txt" 2>&1
  echo "sweep exit $? wall $(( $(date +%s) - start )) s" >>"$OUT/sweep.txt"
  tail -8 "$OUT/sweep.txt"
fi
if [[ $parts == *" profile "* ]]; then  # not part of "all": host profile of GpuDQN.learn
  timeout --foreground 300 python3 -m benchmarks.learn_profile --iterations 1500 >"$OUT/learn_profile.txt" 2>&1
  head -3 "$OUT/learn_profile.txt"
fi
if [[ $parts == *" soak "* ]]; then  # not part of "all": only when asked for
  # Defaults: 1e11 env-steps at 2^20 envs (three autoreset modes, curiosity on), then 1e9
  # tree priority updates. SOAK_ARGS passes flags through (e.g. --device cuda:1).
  python3 -m benchmarks.soak --device cuda ${SOAK_ARGS:-} --out "$OUT/soak.json" 2>&1 | tee "$OUT/soak.log"
  [[ ${PIPESTATUS[0]} -eq 0 ]] || status=1
fi
exit $status
