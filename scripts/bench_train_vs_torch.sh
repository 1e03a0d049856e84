#!/usr/bin/env bash
# bench_train_vs_torch.sh - traind's bench_train against PyTorch on fmnist-cnn,
# batch 128, 2 threads, synthetic device-resident input, alternating
# traind, torch, traind, torch... so both see the same machine load.
# Prints every run, then medians (min..max) and the ratio of the medians.
#
#   scripts/bench_train_vs_torch.sh [RUNS=5] [STEPS=200]
# Needs build/tests/bench/bench_train and Debian's python3-torch.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
runs=${1:-5} steps=${2:-200}
bench=${BENCH_TRAIN:-$root/build/tests/bench/bench_train}
export TD_SOURCE_ROOT=$root
td=() pt=()
for ((i = 1; i <= runs; i++)); do
  a=$("$bench" --steps "$steps" --warmup 20 --threads 2 --batch 128 --json)
  b=$(/usr/bin/python3 "$root/scripts/bench_torch_fmnist.py" --steps "$steps" \
        --warmup 20 --threads 2 --batch 128)
  echo "run $i traind: $a"
  echo "run $i torch:  $b"
  td+=("$(sed 's/.*"samples_per_s":\([0-9.]*\).*/\1/' <<<"$a")")
  pt+=("$(sed 's/.*"samples_per_s": \([0-9.]*\).*/\1/' <<<"$b")")
done
stats() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
  m = (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2
  printf "%.1f (%.1f..%.1f)", m, v[1], v[NR] }'; }
med() { printf '%s\n' "$@" | sort -g | awk '{v[NR]=$1} END {
  print (NR % 2) ? v[(NR+1)/2] : (v[NR/2] + v[NR/2+1]) / 2 }'; }
echo "traind samples/s median (min..max): $(stats "${td[@]}")"
echo "torch  samples/s median (min..max): $(stats "${pt[@]}")"
awk -v a="$(med "${td[@]}")" -v b="$(med "${pt[@]}")" \
  'BEGIN { printf "ratio traind/torch: %.2f; traind GFLOP/s (3 x 36.6 MFLOP per sample): %.1f\n", a / b, a * 3 * 0.0366 }'
