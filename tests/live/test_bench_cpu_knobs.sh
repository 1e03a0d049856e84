#!/bin/bash
# test_bench_cpu_knobs.sh - scripts/bench_cpu_knobs.sh end to end at a tiny
# size (fmnist-cnn, batch 8, 2 steps per arm): every row runs, the table
# has a numeric A/B ratio for each of the six rows, exit status 0; and the
# script passes bash -n (and shellcheck when installed).  Skipped (77)
# without native bf16 (every row trains bf16).
set -u
root=${TD_SOURCE_ROOT:?TD_SOURCE_ROOT unset}
build=${TD_BUILD_ROOT:?TD_BUILD_ROOT unset}
script=$root/scripts/bench_cpu_knobs.sh
bash -n "$script" || { echo "FAIL: bash -n $script"; exit 1; }
if command -v shellcheck >/dev/null; then
  shellcheck "$script" || { echo "FAIL: shellcheck $script"; exit 1; }
fi
if ! grep -qw -E 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  echo "SKIP: this CPU has no native bf16 (avx512_bf16, amx_bf16)"
  exit 77
fi
out=$(MODELS=fmnist-cnn WARMUP=0 BATCH=8 THREADS=1 \
      BENCH_AB="$build/tests/bench/bench_cpu_ab" "$script" 2 2>&1)
rc=$?
echo "$out"
[[ $rc -eq 0 ]] || { echo "FAIL: exit status $rc"; exit 1; }
n=$(grep -cE '^fmnist-cnn +TD_CPU_[A-Z0-9]+ +[a-z0-9]+ +[a-z0-9]+ +[0-9]+\.[0-9]+$' \
    <<<"$out")
[[ $n -eq 6 ]] || { echo "FAIL: $n table rows with a ratio, want 6"; exit 1; }
echo "PASS: 6 rows"
