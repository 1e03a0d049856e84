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
# BF16=0 runs the fp32 arms only (traind fp32 against torch fp32), for a
# CPU without bf16 instructions (AVX2 only, e.g. AMD EPYC Zen 3).
#
#   scripts/bench_precision.sh [ROUNDS=5] [STEPS=100]
#   env: MODELS="fmnist-cnn resnet20" (or resnet18: 224x224, torchvision's
#        in PyTorch) BATCH=128 THREADS=2 WARMUP=10
#        PIN="taskset -c 1" (prefix for every run) BENCH_TRAIN=path
#        TORCH_FP32=1 BF16=1
# Needs bench_train (build/tests/bench/bench_train) and python3-torch.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
rounds=${1:-5} steps=${2:-100}
models=${MODELS:-fmnist-cnn resnet20}
batch=${BATCH:-128} threads=${THREADS:-2} warmup=${WARMUP:-10}
bench=${BENCH_TRAIN:-$root/build/tests/bench/bench_train}
torch_fp32=${TORCH_FP32:-1}
bf16=${BF16:-1}
[[ $bf16 == 1 ]] || torch_fp32=1
pin=${PIN:-}
export TD_SOURCE_ROOT=$root
grep -m1 'model name' /proc/cpuinfo || true
{ grep -o -w -E 'avx512_bf16|amx_bf16' /proc/cpuinfo || echo 'no avx512_bf16, no amx_bf16'; } | sort -u | tr '\n' ' '
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

# ratio X Y: X / Y
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { print x / y }'; }

for model in $models; do
  a=() b=() c=() d=() rba=() rbc=() rcd=() rad=()
  for ((r = 0; r <= rounds; r++)); do
    fa=$(sps "$(td "$model" fp32)")
    fb=0 fc=0 fd=0
    if [[ $bf16 == 1 ]]; then
      fb=$(sps "$(td "$model" bf16)")
      fc=$(sps "$(pt "$model" bf16)")
    fi
    [[ $torch_fp32 == 1 ]] && fd=$(sps "$(pt "$model" fp32)")
    tag=$r
    ((r == 0)) && tag="0 (warm-up, not counted)"
    line="traind fp32 $fa"
    [[ $bf16 == 1 ]] && line+=", traind bf16 $fb, torch bf16 $fc"
    [[ $torch_fp32 == 1 ]] && line+=", torch fp32 $fd"
    echo "$model round $tag: $line samples/s"
    ((r == 0)) && continue
    a+=("$fa") b+=("$fb") c+=("$fc") d+=("$fd")
    if [[ $bf16 == 1 ]]; then
      rba+=("$(ratio "$fb" "$fa")")
      rbc+=("$(ratio "$fb" "$fc")")
      [[ $torch_fp32 == 1 ]] && rcd+=("$(ratio "$fc" "$fd")")
    fi
    [[ $torch_fp32 == 1 ]] && rad+=("$(ratio "$fa" "$fd")")
  done
  echo "== $model: samples/s median (min..max) over $rounds rounds"
  echo "   traind fp32 $(stats "${a[@]}")"
  if [[ $bf16 == 1 ]]; then
    echo "   traind bf16 $(stats "${b[@]}")"
    echo "   torch  bf16 $(stats "${c[@]}")"
  fi
  if [[ $torch_fp32 == 1 ]]; then echo "   torch  fp32 $(stats "${d[@]}")"; fi
  if [[ $bf16 == 1 ]]; then
    echo "   ratio traind bf16 / traind fp32: $(stats "${rba[@]}") (target >= 1.7)"
    echo "   ratio traind bf16 / torch bf16:  $(stats "${rbc[@]}") (target >= 2)"
    if [[ $torch_fp32 == 1 ]]; then
      echo "   ratio torch bf16 / torch fp32:   $(stats "${rcd[@]}")"
    fi
  fi
  if [[ $torch_fp32 == 1 ]]; then
    echo "   ratio traind fp32 / torch fp32:  $(stats "${rad[@]}")"
  fi
done
