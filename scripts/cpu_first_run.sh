#!/bin/bash
# cpu_first_run.sh - what to run the first time traind's bf16 CPU path meets
# a CPU kind it was not measured on (AMD EPYC Zen 5 so far: docs/compute.md,
# "Plan choices on a new CPU").  From the repository's top folder:
#
#   ./scripts/cpu_first_run.sh               # everything, ~15-30 min
#   ACC=0 TORCH=0 ./scripts/cpu_first_run.sh # speed inside traind only
#
# It installs what is missing (scripts/deps.sh, as the Quick start does)
# and builds traind (build/, optimised, no CUDA) when it is not there, then,
# each step logged to $OUT/<step>.log and judged in $OUT/summary.txt, with
# the figures that decide issue 15's targets copied into the summary:
#   1. traind --version: the CPU, oneDNN's ISA, what precision auto picks
#      and the measured bf16 dot-product rate behind it;
#   2. bench_peak: fp32 FMA, vdpbf16ps and AMX GFLOP/s per vCPU;
#   3. scripts/bench_cpu_knobs.sh: every bf16 plan choice A/B on this CPU,
#      and (PRECISION=fp32, every CPU) the fp32 plan's Winograd
#      convolutions and max pooling against oneDNN's;
#   4. bench_cpu_ab fp32 against bf16, step by step, per model (traind's
#      own bf16 speed-up, robust to load);
#   5. scripts/bench_precision.sh: traind fp32, bf16 and PyTorch's bf16
#      autocast alternated (the targets: bf16 >= 1.7x fp32, >= 2x
#      PyTorch), when python3-torch is installed (TORCH=0 skips);
#   6. the reference job in bf16 (config/jobs/fmnist-cnn.json, 3 epochs,
#      target >= 0.907), Fashion-MNIST packed once under $DATA from
#      Debian's fashion-mnist (ACC=0 skips);
#   7. where a step's oneDNN time goes, per model in bf16 (fp32 without
#      bf16): ONEDNN_VERBOSE=1 bench_train into scripts/onednn_profile.py
#      (the largest primitives' ms per step, and oneDNN's share of the
#      step: the first places to look when a target is missed).
# A CPU without bf16 instructions oneDNN uses (AVX2 only, e.g. AMD EPYC
# Zen 3; traind --version says "bf16 no") skips step 4 and step 3's bf16
# rows, runs step 5 as traind fp32 against PyTorch fp32 (BF16=0) and step 6
# in fp32: precision auto trains fp32 there, and a bf16 job is refused at
# submit.
# Steps go on after a failure; the exit status is 1 if any failed.  Speed
# figures never fail a step.
#
# Environment: BUILD (build), OUT (cpu-first-run-<UTC time>), STEPS (40,
# per arm and row), MODELS ("resnet20 fmnist-cnn"), BATCH (128), THREADS
# (2), ROUNDS (5, bench_precision.sh), ACC (1), TORCH (1), DATA
# (/var/tmp/cpu-first-run-fmnist), NOBUILD (1: use $BUILD as it is).
# Exit status: 0 every step passed, 1 one failed, 2 bad arguments.
set -u -o pipefail

cd "$(dirname "$0")/.." || exit 1
if [[ ${1:-} == --help || $# -gt 0 ]]; then
    awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0"
    [[ ${1:-} == --help ]] && exit 0
    exit 2
fi
BUILD=${BUILD:-build}
OUT=${OUT:-cpu-first-run-$(date -u +%Y%m%dT%H%M%SZ)}
STEPS=${STEPS:-40}
MODELS=${MODELS:-resnet20 fmnist-cnn}
BATCH=${BATCH:-128}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-5}
ACC=${ACC:-1}
TORCH=${TORCH:-1}
DATA=${DATA:-/var/tmp/cpu-first-run-fmnist}
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
export TD_SOURCE_ROOT=$PWD TD_MODELS_DIR=$PWD/config/models

mkdir -p "$OUT" || exit 1
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
failed=0

# step NAME COMMAND...: runs it with its output in $OUT/NAME.log (and on
# the terminal, for progress), records PASS or FAIL in the summary.
step() {
    local name=$1
    shift
    echo "== $name: $*"
    local t0=$SECONDS
    "$@" 2>&1 | tee "$OUT/$name.log"
    local rc=${PIPESTATUS[0]}
    if [ "$rc" -eq 0 ]; then
        printf '%-14s PASS  %5ds\n' "$name" $((SECONDS - t0)) >>"$SUMMARY"
    else
        printf '%-14s FAIL  %5ds  exit %d, see %s\n' "$name" \
            $((SECONDS - t0)) "$rc" "$OUT/$name.log" >>"$SUMMARY"
        failed=1
    fi
    return "$rc"
}

# note STEP PATTERN: the step's lines matching PATTERN into the summary.
note() {
    grep -E "$2" "$OUT/$1.log" | sed 's/^/    /' >>"$SUMMARY" || true
}

# ---- build ----------------------------------------------------------------
if [ "${NOBUILD:-0}" != 1 ]; then
    step deps scripts/deps.sh ||
        { echo "cpu_first_run: installing the packages failed" >&2; exit 1; }
    if [ ! -f "$BUILD/build.ninja" ]; then
        step build-setup meson setup "$BUILD" -Dcuda=disabled ||
            { echo "cpu_first_run: meson setup failed" >&2; exit 1; }
    fi
    step build ninja -C "$BUILD" ||
        { echo "cpu_first_run: the build failed" >&2; exit 1; }
fi
BIN=$BUILD/tests/bench

# ---- 1, 2: the CPU and its ceilings ------------------------------------------
step version "$BUILD/daemon/traind" --version
note version '^cpu:'
grep -m1 'model name' /proc/cpuinfo | sed 's/^/    /' >>"$SUMMARY"
step peak "$BIN/bench_peak"
note peak 'x fp32 FMA'

# bf16 on this CPU, as traind --version judged it (1 yes, 0 no)
BF16=1
grep -q '^cpu: .*: bf16 no' "$OUT/version.log" && BF16=0
PREC=bf16
[ "$BF16" = 1 ] || PREC=fp32

# ---- 3, 4: traind's plan choices and its own bf16 speed-up --------------------
if [ "$BF16" = 1 ]; then
    step knobs env BENCH_AB="$BIN/bench_cpu_ab" MODELS="$MODELS" \
        BATCH="$BATCH" THREADS="$THREADS" scripts/bench_cpu_knobs.sh "$STEPS"
    note knobs '^[a-z0-9-]+ +(TD_CPU_|plan )|plan measured in'
    for m in $MODELS; do
        step "ab-$m" "$BIN/bench_cpu_ab" --precision-a fp32 \
            --precision-b bf16 --model "$m" --steps "$STEPS" --warmup 5 \
            --batch "$BATCH" --threads "$THREADS"
        note "ab-$m" 'per pair'
    done
else
    echo "knobs, ab     SKIP  (no bf16 instructions on this CPU: traind" \
        "trains fp32 here)" >>"$SUMMARY"
fi
# the fp32 plan's hand-written kernels against oneDNN's (on every CPU)
step knobs-fp32 env PRECISION=fp32 BENCH_AB="$BIN/bench_cpu_ab" \
    MODELS="$MODELS" BATCH="$BATCH" THREADS="$THREADS" \
    scripts/bench_cpu_knobs.sh "$STEPS"
note knobs-fp32 '^[a-z0-9-]+ +TD_CPU_'

# ---- 5: against PyTorch ---------------------------------------------------------
if [ "$TORCH" = 1 ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; then
    step precision env TORCH_FP32=0 BF16="$BF16" THREADS="$THREADS" \
        BATCH="$BATCH" WARMUP=5 MODELS="$MODELS" \
        BENCH_TRAIN="$BIN/bench_train" scripts/bench_precision.sh "$ROUNDS" 20
    note precision '^== |ratio traind'
else
    echo "precision      SKIP  (TORCH=0 or no python3-torch)" >>"$SUMMARY"
fi

# ---- 6: the reference job's accuracy in bf16 (fp32 without bf16) --------------
if [ "$ACC" = 1 ]; then
    if [ ! -f "$DATA/train/classes.txt" ]; then
        step pack "$BUILD/client/trainctl" pack \
            --idx-dir /usr/share/datasets/fashion-mnist -o "$DATA" \
            --quality 100
    fi
    step accuracy "$BUILD/daemon/traind" --run config/jobs/fmnist-cnn.json \
        --set precision="$PREC" --set data.train="$DATA/train" \
        --set data.val="$DATA/test"
    note accuracy '^done|precision:'
fi

# ---- 7: where oneDNN's share of a step goes ---------------------------------
for m in $MODELS; do
    # shellcheck disable=SC2016 # the inner shell expands them
    step "profile-$m" bash -c 'ONEDNN_VERBOSE=1 "$1" --model "$2" \
        --precision "$3" --batch "$4" --threads "$5" --steps "$6" \
        --warmup 2 | scripts/onednn_profile.py' _ "$BIN/bench_train" "$m" \
        "$PREC" "$BATCH" "$THREADS" "$STEPS"
    note "profile-$m" '^oneDNN primitives:'
done

echo
echo "cpu_first_run: summary ($SUMMARY):"
cat "$SUMMARY"
exit "$failed"
