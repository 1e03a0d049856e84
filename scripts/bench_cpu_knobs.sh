#!/usr/bin/env bash
# bench_cpu_knobs.sh - every plan choice of the CPU backend's bf16 path
# that was set from measurements on another CPU, A/B on this one, in one
# run: what a session on a new CPU kind (AMD Zen 5 so far) runs first to
# decide its defaults (docs/compute.md, "Plan choices on a new CPU").
#
# For each model and each row below, tests/bench/bench_cpu_ab trains two
# backends alternately, step by step, in one process (robust to a shared
# machine's load drifting), arm A with NAME=A, arm B with NAME=B
# ("default": the plan's own choice).  Prints bench_cpu_ab's line per row,
# then a table: the median of the per-step ratios A/B (> 1: B faster).
#
#   TD_CPU_BN    onednn  default   oneDNN's batch norm, eltwise, binary
#                                  against cpu_bn.c's fused one
#   TD_CPU_BWDW  0       default   oneDNN's backward weights everywhere
#                                  against the plan's cpu_bwdw choice
#   TD_CPU_BWDW  default 1         the plan's choice against cpu_bwdw on
#                                  every convolution it takes
#   TD_CPU_BWDD  0       1         backward data: the primitive against
#                                  a forward convolution (stride 1)
#   TD_CPU_BWDD2 0       1         stride-2 backward data: the primitive
#                                  against four stride-1 phases
#   TD_CPU_NHWC  0       1         blocked (or oneDNN's) layout against
#                                  channels-last
#   plan         fixed   measure   the fixed rules against the plan's
#                                  choices (layout, batch norms, kernels)
#                                  timed at create (cpu_tune.c); its
#                                  "plan measured" line follows, saying
#                                  what this CPU chose
#
# PRECISION=fp32 runs the fp32 plan's hand-written kernels instead, both
# arms in fp32 (on any CPU, bf16 or not):
#   TD_CPU_WINO  0       default   oneDNN's 3x3 convolutions against
#                                  cpu_wino.c's (AVX2 nChw8c plans only:
#                                  elsewhere both arms are the same)
#   TD_CPU_WINO_TILE 4   default   cpu_wino.c's 4x4 tiles alone against
#                                  the plan's tiles of 4 and 2 (the same
#                                  on resnet20; fmnist-cnn's 14x14 layers
#                                  take 4x2, 2x4 and 2x2 edge tiles)
#   TD_CPU_POOL  0       1         oneDNN's max pooling against cpu_pool.c
#                                  (fmnist-cnn; resnet20 has none; 1
#                                  takes it in nChw16c too, which the
#                                  default does not)
#   TD_CPU_BN    onednn  default   oneDNN's batch norms, adds and relus
#                                  against cpu_bn8.c fused into residual
#                                  adds and folded into their readers
#                                  (AVX2 nChw8c plans only)
#   TD_CPU_BN8   add     all       cpu_bn8.c where an add fuses or a fold
#                                  applies (the rule) against every batch
#                                  norm on it
#   TD_CPU_FOLD  0       default   batch norm + relu written out (oneDNN's)
#                                  against folded into the Winograd
#                                  convolutions and max poolings reading
#                                  them (cpu_fold.h)
#   TD_CPU_NTSTORE 0     default   the Winograd outputs by plain stores
#                                  against non-temporal ones where they
#                                  exceed the threads' L2
#   TD_CPU_WSTATS 0      default   a fold's statistics by its own pass
#                                  against the moments the Winograd
#                                  forward writing its input keeps
#   TD_CPU_SBW   0       1         the channels-last retry of a reference
#                                  backward weights against cpu_sbw.c
#                                  (fmnist-cnn's conv1 on AVX2)
#
#   scripts/bench_cpu_knobs.sh [STEPS=40]
#   env: MODELS="resnet20 fmnist-cnn" WARMUP=5 BATCH=128 THREADS=2
#        BENCH_AB=path (default build/tests/bench/bench_cpu_ab)
#        PRECISION=bf16 (or fp32: the fp32 rows above)
# Exit status: 0 all rows ran, 1 a row failed (its line says why).
# Prints figures; never fails on speed.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
steps=${1:-40}
models=${MODELS:-resnet20 fmnist-cnn}
warmup=${WARMUP:-5} batch=${BATCH:-128} threads=${THREADS:-2}
ab=${BENCH_AB:-$root/build/tests/bench/bench_cpu_ab}
export TD_SOURCE_ROOT=$root
prec=${PRECISION:-bf16}
case $prec in
  bf16) rows=("TD_CPU_BN onednn default" "TD_CPU_BWDW 0 default"
              "TD_CPU_BWDW default 1" "TD_CPU_BWDD 0 1" "TD_CPU_BWDD2 0 1"
              "TD_CPU_NHWC 0 1" "plan fixed measure") ;;
  fp32) rows=("TD_CPU_WINO 0 default" "TD_CPU_WINO_TILE 4 default"
              "TD_CPU_POOL 0 1"
              "TD_CPU_BN onednn default" "TD_CPU_BN8 add all"
              "TD_CPU_FOLD 0 default" "TD_CPU_NTSTORE 0 default"
              "TD_CPU_WSTATS 0 default" "TD_CPU_SBW 0 1") ;;
  *) echo "bench_cpu_knobs.sh: PRECISION must be bf16 or fp32" >&2; exit 1 ;;
esac
grep -m1 'model name' /proc/cpuinfo || true
{ grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo ||
  echo 'no avx512_bf16, no amx_bf16'; } | sort -u | tr '\n' ' '
echo
echo "$prec, batch $batch, $threads thread(s), $steps steps after $warmup" \
  "warm-up per row${ONEDNN_MAX_CPU_ISA:+, ONEDNN_MAX_CPU_ISA=$ONEDNN_MAX_CPU_ISA}"
status=0
table=""
for m in $models; do
  for r in "${rows[@]}"; do
    read -r name a b <<<"$r"
    if [[ $name == plan ]]; then
      arms=(--plan-a "$a" --plan-b "$b")
    else
      arms=(--env "$name" --a "$a" --b "$b")
    fi
    arms+=(--precision-a "$prec" --precision-b "$prec")
    if out=$("$ab" "${arms[@]}" --model "$m" \
               --steps "$steps" --warmup "$warmup" --batch "$batch" \
               --threads "$threads" 2>&1) && line=$(tail -1 <<<"$out") &&
       [[ $line == *"per pair"* ]]; then
      echo "$line"
      if [[ $name == plan ]]; then
        grep -o 'cpu backend: plan measured in .*' <<<"$out" |
          sed "s/^/  $m: /" || true
      fi
      ratio=${line##*per pair }
      ratio=${ratio%% *}
    else
      echo "$m $name $a/$b: failed: $(tail -1 <<<"$out")"
      ratio=failed
      status=1
    fi
    table+=$(printf '%-11s %-16s %-8s %-8s %s' "$m" "$name" "$a" "$b" \
             "$ratio")$'\n'
  done
done
echo
echo "model       knob             A        B        A/B per step (median; > 1: B faster)"
printf '%s' "$table"
exit $status
