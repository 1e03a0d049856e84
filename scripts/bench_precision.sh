#!/usr/bin/env bash
# bench_precision.sh - fp32 vs bf16 in traind, and PyTorch's bf16 autocast,
# on the CPU, side by side in one run (issue 15's targets).  Per model: one
# warm-up round that is not counted, then ROUNDS rounds of
#   traind fp32 (bench_train --precision fp32)
#   traind bf16 (bench_train --precision bf16)
#   torch bf16  (scripts/bench_torch_models.py --precision bf16)
#   torch fp32  (the same without autocast; TORCH_FP32=0 skips it)
# each on synthetic device-resident input (the compute ceiling), batch
# BATCH, THREADS threads.  Prints every run, then per model the medians
# (min..max) and the per-round ratios bf16/fp32 and traind bf16 / torch
# bf16 as median (min..max).  Prints figures; never fails on speed.
#
#   scripts/bench_precision.sh [ROUNDS=5] [STEPS=100]
#   env: MODELS="fmnist-cnn resnet20" BATCH=128 THREADS=2 WARMUP=10
#        PIN="taskset -c 1" (prefix for every run) BENCH_TRAIN=path
# Needs bench_train (build/tests/bench/bench_train) and python3-torch.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-5} steps=${2:-100}
models=${MODELS:-fmnist-cnn resnet20}
batch=${BATCH:-128} threads=${THREADS:-2} warmup=${WARMUP:-10}
bench=${BENCH_TRAIN:-$root/build/tests/bench/bench_train}
torch_fp32=${TORCH_FP32:-1}
pin=${PIN:-}
export TD_SOURCE_ROOT=$root
grep -m1 'model name' /proc/cpuinfo || true
grep -o -w -m1 -E 'avx512_bf16|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' '
echo
echo "batch $batch, $threads thread(s), $steps steps after $warmup warm-up" \
  "steps per run, $rounds rounds + 1 warm-up round${pin:+, runs prefixed: $pin}"

sps() { sed 's/.*"samples_per_s": *\([0-9.]*\).*/\1/' <<<"$1"; }
td() { $pin "$bench" --model "$1" --precision "$2" --steps "$steps" \
         --warmup "$warmup" --threads "$threads" --batch "$batch" --json; }
pt() { $pin /usr/bin/python3 "$root/scripts/bench_torch_models.py" \
         --model "$1" --precision "$2" --steps "$steps" --warmup "$warmup" \
         --threads "$threads" --batch "$batch"; }
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
  m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
  printf "%.2f (%.2f..%.2f)", m, v[1], v[NR] }'; }

for model in $models; do
  a=() b=() c=() d=() rba=() rbc=() rcd=()
  for ((r = 0; r <= rounds; r++)); do
    fa=$(sps "$(td "$model" fp32)")
    fb=$(sps "$(td "$model" bf16)")
    fc=$(sps "$(pt "$model" bf16)")
    fd=0
    [[ $torch_fp32 == 1 ]] && fd=$(sps "$(pt "$model" fp32)")
    tag=$r
    ((r == 0)) && tag="0 (warm-up, not counted)"
    extra=""
    [[ $torch_fp32 == 1 ]] && extra=", torch fp32 $fd"
    echo "$model round $tag: traind fp32 $fa, traind bf16 $fb," \
      "torch bf16 $fc$extra samples/s"
    ((r == 0)) && continue
    a+=("$fa") b+=("$fb") c+=("$fc") d+=("$fd")
    rba+=("$(awk -v x="$fb" -v y="$fa" 'BEGIN { print x / y }')")
    rbc+=("$(awk -v x="$fb" -v y="$fc" 'BEGIN { print x / y }')")
    [[ $torch_fp32 == 1 ]] &&
      rcd+=("$(awk -v x="$fc" -v y="$fd" 'BEGIN { print x / y }')")
  done
  echo "== $model: samples/s median (min..max) over $rounds rounds"
  echo "   traind fp32 $(stats "${a[@]}")"
  echo "   traind bf16 $(stats "${b[@]}")"
  echo "   torch  bf16 $(stats "${c[@]}")"
  if [[ $torch_fp32 == 1 ]]; then echo "   torch  fp32 $(stats "${d[@]}")"; fi
  echo "   ratio traind bf16 / traind fp32: $(stats "${rba[@]}") (target >= 1.7)"
  echo "   ratio traind bf16 / torch bf16:  $(stats "${rbc[@]}") (target >= 2)"
  if [[ $torch_fp32 == 1 ]]; then
    echo "   ratio torch bf16 / torch fp32:   $(stats "${rcd[@]}")"
  fi
done
