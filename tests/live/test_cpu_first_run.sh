#!/bin/bash
# test_cpu_first_run.sh - scripts/cpu_first_run.sh end to end at a tiny
# size, on the build under test (NOBUILD=1; fmnist-cnn, batch 8, 2 steps
# per arm, no PyTorch, no accuracy job): exit status 0, every step PASS in
# the summary with the figures it copies (the CPU line, the three ceilings
# or the ones this CPU has, scripts/bench_cpu_knobs.sh's seven plan-choice
# rows each with a ratio, the fp32/bf16 A/B); --help exits 0, an argument
# 2; bash -n and shellcheck (when installed) of both scripts.
# Skipped (77) without native bf16 (the plan-choice rows train bf16).
set -u
root=${TD_SOURCE_ROOT:?TD_SOURCE_ROOT unset}
build=${TD_BUILD_ROOT:?TD_BUILD_ROOT unset}
script=$root/scripts/cpu_first_run.sh
fail() { echo "FAIL: $*"; exit 1; }
for f in "$script" "$root/scripts/bench_cpu_knobs.sh"; do
  bash -n "$f" || fail "bash -n $f"
  if command -v shellcheck >/dev/null; then
    shellcheck "$f" || fail "shellcheck $f"
  fi
done
"$script" --help | grep -q 'cpu_first_run.sh - ' || fail "--help"
"$script" bogus >/dev/null 2>&1
[[ $? -eq 2 ]] || fail "an argument: exit status not 2"
if ! grep -qw -E 'avx512_bf16|amx_bf16' /proc/cpuinfo; then
  echo "SKIP: this CPU has no native bf16 (avx512_bf16, amx_bf16)"
  exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
NOBUILD=1 BUILD=$build OUT=$out/run STEPS=2 BATCH=8 MODELS=fmnist-cnn \
  TORCH=0 ACC=0 "$script" >"$out/log" 2>&1
rc=$?
cat "$out/run/summary.txt" 2>/dev/null || tail -30 "$out/log"
[[ $rc -eq 0 ]] || fail "exit status $rc"
s=$out/run/summary.txt
for st in version peak knobs ab-fmnist-cnn; do
  grep -qE "^$st +PASS" "$s" || fail "step $st did not pass"
done
grep -q 'precision      SKIP' "$s" || fail "TORCH=0 did not skip"
grep -q '^    cpu: .*oneDNN ISA' "$s" || fail "no CPU line"
grep -q 'fp32 FMA (vfmadd231ps zmm) .*1.00x fp32 FMA' "$s" ||
  fail "no fp32 FMA ceiling"
n=$(grep -cE '^    fmnist-cnn +(TD_CPU_[A-Z0-9]+|plan) .* [0-9]+\.[0-9]+$' "$s")
[[ $n -eq 7 ]] || fail "$n plan-choice rows, want 7"
grep -qE '^    +fmnist-cnn: cpu backend: plan measured in .* layout ' "$s" ||
  fail "no line saying what the measured plan chose"
grep -qE 'fp32 [0-9.]+ ms/step, bf16 [0-9.]+ ms/step' "$s" ||
  fail "no fp32/bf16 A/B"
echo "PASS"
