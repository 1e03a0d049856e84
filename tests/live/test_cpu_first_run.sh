#!/bin/bash
# test_cpu_first_run.sh - scripts/cpu_first_run.sh end to end at a tiny
# size, on the build under test (NOBUILD=1; fmnist-cnn, batch 8, 2 steps
# per arm, no accuracy job).  First as on a CPU without bf16 (oneDNN held
# to AVX2, ONEDNN_MAX_CPU_ISA, on any machine): exit status 0, version and
# peak PASS with an fp32 FMA ceiling, the bf16 steps skipped with the
# reason, the fp32 profile of oneDNN's share of a step, and with
# python3-torch traind fp32 against torch fp32 (one round).  Then without PyTorch.  Then, where oneDNN runs bf16: every step PASS
# in the summary with the figures it copies (the CPU line, the three
# ceilings or the ones this CPU has, scripts/bench_cpu_knobs.sh's seven
# plan-choice rows each with a ratio, the fp32/bf16 A/B).  --help exits 0,
# an argument 2; bash -n and shellcheck (when installed) of both scripts.
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
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# as without bf16, with PyTorch when it is installed (fp32 against fp32)
torch=0
/usr/bin/python3 -c 'import torch' 2>/dev/null && torch=1
ONEDNN_MAX_CPU_ISA=AVX2 NOBUILD=1 BUILD=$build OUT=$out/avx2 STEPS=2 \
  BATCH=8 MODELS=fmnist-cnn TORCH=$torch ROUNDS=1 ACC=0 "$script" \
  >"$out/log2" 2>&1
rc=$?
s=$out/avx2/summary.txt
cat "$s" 2>/dev/null || tail -30 "$out/log2"
[[ $rc -eq 0 ]] || fail "AVX2: exit status $rc"
for st in version peak; do
  grep -qE "^$st +PASS" "$s" || fail "AVX2: step $st did not pass"
done
grep -q '^    cpu: .*oneDNN ISA avx2 .*: bf16 no' "$s" ||
  fail "AVX2: no CPU line saying bf16 no"
grep -qE 'fp32 FMA \(vfmadd231ps (zmm|ymm)\) .*1.00x fp32 FMA' "$s" ||
  fail "AVX2: no fp32 FMA ceiling"
grep -q '^knobs, ab     SKIP  (no bf16 instructions' "$s" ||
  fail "AVX2: the bf16 steps did not skip"
grep -qE '^(knobs +(PASS|FAIL)|ab-)' "$s" && fail "AVX2: a bf16 step ran"
grep -qE '^knobs-fp32 +PASS' "$s" || fail "AVX2: step knobs-fp32 did not pass"
grep -qE '^profile-fmnist-cnn +PASS' "$s" ||
  fail "AVX2: step profile-fmnist-cnn did not pass"
grep -qE '^    oneDNN primitives: [0-9.]+ ms of a [0-9.]+ ms step' "$s" ||
  fail "AVX2: no oneDNN share of the step"
grep -qE '^ +[0-9.]+ +[0-9.]+ +[0-9.]+  convolution ' \
  "$out/avx2/profile-fmnist-cnn.log" ||
  fail "AVX2: no convolution row in the profile"
for k in "TD_CPU_WINO +0 +default" "TD_CPU_WINO_TILE +4 +default" \
  "TD_CPU_POOL +0 +1" \
  "TD_CPU_BN +onednn +default" "TD_CPU_BN8 +add +all" \
  "TD_CPU_FOLD +0 +default" "TD_CPU_NTSTORE +0 +default" \
  "TD_CPU_WSTATS +0 +default" "TD_CPU_SBW +0 +1"; do
  grep -qE "^    fmnist-cnn +$k +[0-9]+\.[0-9]+$" "$s" ||
    fail "AVX2: no fp32 row $k"
done
if [[ $torch == 1 ]]; then
  grep -qE '^precision +PASS' "$s" || fail "AVX2: step precision did not pass"
  grep -qE 'ratio traind fp32 / torch fp32: +[0-9.]+ ' "$s" ||
    fail "AVX2: no traind fp32 / torch fp32 ratio"
  grep -q 'traind bf16' "$out/avx2/precision.log" &&
    fail "AVX2: bench_precision.sh ran bf16"
fi

# oneDNN's ISA as this run has it (the CI holds it to AVX2 once)
if "$build/daemon/traind" --version | grep -q '^cpu: .*: bf16 no'; then
  echo "SKIP: no bf16 that oneDNN uses here: the no-bf16 run passed, the" \
    "bf16 one cannot run"
  exit 77
fi
NOBUILD=1 BUILD=$build OUT=$out/run STEPS=2 BATCH=8 MODELS=fmnist-cnn \
  TORCH=0 ACC=0 "$script" >"$out/log" 2>&1
rc=$?
cat "$out/run/summary.txt" 2>/dev/null || tail -30 "$out/log"
[[ $rc -eq 0 ]] || fail "exit status $rc"
s=$out/run/summary.txt
for st in version peak knobs knobs-fp32 ab-fmnist-cnn profile-fmnist-cnn; do
  grep -qE "^$st +PASS" "$s" || fail "step $st did not pass"
done
grep -q 'precision      SKIP' "$s" || fail "TORCH=0 did not skip"
grep -q '^    cpu: .*oneDNN ISA' "$s" || fail "no CPU line"
grep -q 'fp32 FMA (vfmadd231ps zmm) .*1.00x fp32 FMA' "$s" ||
  fail "no fp32 FMA ceiling"
n=$(grep -cE '^    fmnist-cnn +(TD_CPU_[A-Z0-9_]+|plan) .* [0-9]+\.[0-9]+$' "$s")
[[ $n -eq 16 ]] || fail "$n plan-choice rows, want 16 (7 bf16, 9 fp32)"
grep -qE '^    +fmnist-cnn: cpu backend: plan measured in .* layout ' "$s" ||
  fail "no line saying what the measured plan chose"
grep -qE 'fp32 [0-9.]+ ms/step, bf16 [0-9.]+ ms/step' "$s" ||
  fail "no fp32/bf16 A/B"
echo "PASS"
