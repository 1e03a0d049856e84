#!/bin/bash
# gpu_first_run.sh - what to run the first time traind meets a GPU.
#
# The CUDA backend has been built and run on the simulated device only
# (docs/cuda.md).  On the first machine with an NVIDIA GPU, from the
# repository's top folder:
#
#   ./scripts/gpu_first_run.sh            # everything, ~30-60 min
#   STEPS=50 ./scripts/gpu_first_run.sh   # shorter resnet50 runs
#
# It builds traind with CUDA (warnings as errors, -lineinfo for the
# sanitizers), then, each step logged to $OUT/<step>.log and judged in
# $OUT/summary.txt:
#   1. traind --version: the GPU as the runtime sees it;
#   2. the gpu suite (meson test --suite gpu), plain;
#   3. the same under compute-sanitizer memcheck, racecheck, synccheck and
#      initcheck;
#   4. resnet20 on the GPU against the CPU: the same synthetic job, seed and
#      steps on cuda:0 and on cpu, window losses compared;
#   5. resnet50 on synthetic input, $STEPS steps (default 200) at batch 128
#      and 256: cudaMemGetInfo after the warm-up step (the backend logs it at
#      create), the convolution algorithms cuDNN chose (debug log), images/s
#      per window, and the GPU's memory in use sampled by nvidia-smi;
#   6. one Nsight Systems trace of 60 resnet50 steps (when nsys exists).
# The checklist of what to look at in the results is in docs/cuda.md
# ("The first run on a GPU").  Steps go on after a failure; the exit status
# is 1 if any failed.  Without a GPU it says so and exits 1 at once,
# building nothing.
#
# Environment: BUILD (build-gpu), OUT (gpu-first-run-<UTC time>), STEPS
# (200), GPU_ARCH (sm_XY from nvidia-smi's compute capability),
# NVIDIA_SMI (nvidia-smi), COMPUTE_SANITIZER, NSYS (found on PATH or under
# /usr/local/cuda/bin).
set -u -o pipefail

cd "$(dirname "$0")/.." || exit 1
BUILD=${BUILD:-build-gpu}
OUT=${OUT:-gpu-first-run-$(date -u +%Y%m%dT%H%M%SZ)}
STEPS=${STEPS:-200}
CUDA_BIN=/usr/local/cuda/bin
export PATH="$PATH:$CUDA_BIN"
NVIDIA_SMI=${NVIDIA_SMI:-nvidia-smi}

die_no_gpu() {
    echo "gpu_first_run: no usable NVIDIA GPU: $1" >&2
    echo "gpu_first_run: this script is for the first machine with a GPU" \
         "and its driver; nothing was built or run." >&2
    echo "gpu_first_run: without a GPU, run the simulated device instead:" \
         "meson setup build-sim -Dcuda=disabled -Dgpu_sim=enabled &&" \
         "meson test -C build-sim --suite sim" >&2
    exit 1
}

# ---- is there a GPU? (before anything is built) ----------------------------
command -v "$NVIDIA_SMI" >/dev/null 2>&1 ||
    die_no_gpu "'$NVIDIA_SMI' not found (no NVIDIA driver installed)"
if ! gpus=$("$NVIDIA_SMI" -L 2>&1); then
    die_no_gpu "'$NVIDIA_SMI -L' failed: $(echo "$gpus" | head -n 1)"
fi
grep -q '^GPU [0-9]' <<<"$gpus" ||
    die_no_gpu "'$NVIDIA_SMI -L' lists no GPU: $(echo "$gpus" | head -n 1)"
command -v nvcc >/dev/null 2>&1 ||
    die_no_gpu "a GPU is there, but nvcc is not (install the CUDA toolkit" \
               "under /usr/local/cuda)"

mkdir -p "$OUT" || exit 1
SUMMARY=$OUT/summary.txt
: >"$SUMMARY"
failed=0
echo "$gpus" | tee "$OUT/gpus.txt"

# step NAME COMMAND...: runs it with its output in $OUT/NAME.log, records
# PASS or FAIL (with the exit status) in the summary.
step() {
    local name=$1
    shift
    echo "== $name: $*"
    local t0=$SECONDS
    "$@" >"$OUT/$name.log" 2>&1
    local rc=$?
    if [ "$rc" -eq 0 ]; then
        printf '%-28s PASS  %5ds\n' "$name" $((SECONDS - t0)) | tee -a "$SUMMARY"
    else
        printf '%-28s FAIL  %5ds  exit %d, see %s\n' "$name" \
            $((SECONDS - t0)) "$rc" "$OUT/$name.log" | tee -a "$SUMMARY"
        failed=1
    fi
    return "$rc"
}

# ---- build ---------------------------------------------------------------------
if [ -z "${GPU_ARCH:-}" ]; then
    cc=$("$NVIDIA_SMI" --query-gpu=compute_cap --format=csv,noheader 2>/dev/null |
         head -n 1 | tr -d ' .')
    GPU_ARCH=sm_${cc:-80}
fi
setup_args=(-Dcuda=enabled -Dwerror=true -Dgpu_arch="$GPU_ARCH"
            -Dcuda_args=-lineinfo)
if [ -d "$BUILD" ]; then
    step build-setup meson setup --reconfigure "$BUILD" "${setup_args[@]}"
else
    step build-setup meson setup "$BUILD" "${setup_args[@]}"
fi || { echo "gpu_first_run: meson setup failed" >&2; exit 1; }
step build ninja -C "$BUILD" ||
    { echo "gpu_first_run: the build failed" >&2; exit 1; }
TRAIND=$BUILD/daemon/traind
export TD_MODELS_DIR=$PWD/config/models

# ---- 1, 2: the device, the gpu suite -------------------------------------------
step version "$TRAIND" --version
step gpu-suite meson test -C "$BUILD" --suite gpu --print-errorlogs

# ---- 3: the gpu suite under compute-sanitizer ------------------------------------
SANITIZER=${COMPUTE_SANITIZER:-$(command -v compute-sanitizer || true)}
if [ -n "$SANITIZER" ]; then
    for tool in memcheck racecheck synccheck initcheck; do
        extra=""
        [ "$tool" = memcheck ] && extra="--leak-check full"
        step "sanitizer-$tool" meson test -C "$BUILD" --suite gpu \
            --print-errorlogs --timeout-multiplier 20 \
            --wrapper "$SANITIZER --tool $tool $extra --error-exitcode 99"
    done
else
    echo "compute-sanitizer not found: sanitizer steps skipped" |
        tee -a "$SUMMARY"
    failed=1
fi

# ---- 4: resnet20, GPU against CPU ---------------------------------------------------
cat >"$OUT/resnet20-synthetic.json" <<'EOF'
{
  "name": "resnet20-first-gpu", "data": {"classes": 10},
  "input": {"source": "synthetic", "size": [32, 32], "channels": 3,
            "normalize": {"mean": [0.49, 0.48, 0.45], "std": [0.25, 0.24, 0.26]}},
  "model": "resnet20",
  "optimizer": {"type": "sgd", "lr": 0.01, "momentum": 0.9},
  "batch_size": 128, "epochs": 1, "seed": 1,
  "metrics": {"warmup_steps": 0, "window_steps": 10}
}
EOF
for dev in cpu cuda:0; do
    step "resnet20-${dev/:/}" "$TRAIND" --run "$OUT/resnet20-synthetic.json" \
        --steps 100 --json --set device="$dev"
done
# shellcheck disable=SC2317  # called through step
compare_losses() {
    python3 - "$OUT/resnet20-cpu.log" "$OUT/resnet20-cuda0.log" <<'EOF'
import json, sys
def losses(path):
    out = []
    for line in open(path):
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("event") == "window":
            out.append(ev["data"]["loss"])
    return out
cpu, gpu = losses(sys.argv[1]), losses(sys.argv[2])
if not cpu or len(cpu) != len(gpu):
    sys.exit(f"window counts differ: cpu {len(cpu)}, gpu {len(gpu)}")
worst = 0.0
for i, (a, b) in enumerate(zip(cpu, gpu)):
    rel = abs(a - b) / max(abs(a), 1e-6)
    worst = max(worst, rel)
    print(f"window {i}: cpu {a:.6f}  gpu {b:.6f}  rel {rel:.2e}")
print(f"largest relative difference {worst:.2e} (limit 2e-2: fp32 on both,"
      " summation order differs)")
sys.exit(0 if worst <= 2e-2 else 1)
EOF
}
step resnet20-gpu-vs-cpu compare_losses

# ---- 5: resnet50 speed and memory -----------------------------------------------
cat >"$OUT/resnet50-synthetic.json" <<'EOF'
{
  "name": "resnet50-first-gpu", "data": {"classes": 1000},
  "input": {"source": "synthetic", "size": [224, 224], "channels": 3,
            "normalize": {"mean": [0.485, 0.456, 0.406], "std": [0.229, 0.224, 0.225]}},
  "model": "resnet50",
  "optimizer": {"type": "sgd", "lr": 0.1, "momentum": 0.9, "weight_decay": 1e-4},
  "batch_size": 128, "epochs": 1, "seed": 1, "device": "cuda:0",
  "metrics": {"warmup_steps": 20, "window_steps": 20}
}
EOF
# resnet50_run BATCH: the run's raw output in $OUT/resnet50-bBATCH.out,
# then the figures (into the step's log, and on the terminal after it).
# shellcheck disable=SC2317  # called through step
resnet50_run() {
    local batch=$1 raw=$OUT/resnet50-b$1.out smi_pid rc
    "$NVIDIA_SMI" --query-gpu=timestamp,memory.used,memory.total,utilization.gpu \
        --format=csv -lms 500 >"$OUT/resnet50-b$batch-nvidia-smi.csv" 2>&1 &
    smi_pid=$!
    "$TRAIND" --run "$OUT/resnet50-synthetic.json" --steps "$STEPS" --json \
        --log-level debug --set batch_size="$batch" >"$raw" 2>&1
    rc=$?
    kill "$smi_pid" 2>/dev/null
    wait "$smi_pid" 2>/dev/null
    echo "resnet50, batch $batch, $STEPS steps: exit $rc"
    echo "--- device memory at create (cudaMemGetInfo after the warm-up step):"
    grep -h 'device arena\|after the warm-up step\|headroom' "$raw"
    echo "--- convolution algorithms chosen (count of layers):"
    grep -h 'algorithms' "$raw" | sed 's/.*cuda backend: //' | sort | uniq -c
    echo "--- dense layers on cuBLASLt (and any GEMM it had no algorithm for):"
    grep -h 'on cuBLASLt\|cuBLASLt has no algorithm' "$raw"
    echo "--- images/s per window (step, images/s, verdict):"
    grep -h '"event":"window"' "$raw" | python3 -c 'import json, sys
for line in sys.stdin:
    d = json.loads(line)["data"]
    print(d["step"], round(d["samples_per_s"], 1), d.get("verdict"))'
    echo "--- peak memory.used sampled by nvidia-smi (MiB):"
    awk -F', ' 'NR > 1 { v = $2; sub(/ MiB/, "", v); if (v + 0 > m) m = v + 0 }
                END { print m + 0 }' "$OUT/resnet50-b$batch-nvidia-smi.csv"
    return "$rc"
}
for batch in 128 256; do
    step "resnet50-b$batch" resnet50_run "$batch"
    cat "$OUT/resnet50-b$batch.log"
done

# ---- 6: one Nsight Systems trace ------------------------------------------------
NSYS_BIN=${NSYS:-$(command -v nsys || true)}
if [ -n "$NSYS_BIN" ]; then
    step nsys-trace "$NSYS_BIN" profile --trace=cuda,nvtx,osrt \
        --output "$OUT/resnet50-b128" --force-overwrite true \
        "$TRAIND" --run "$OUT/resnet50-synthetic.json" --steps 60 \
        --set batch_size=128
else
    echo "nsys not found: no trace (install Nsight Systems)" | tee -a "$SUMMARY"
fi

echo
echo "== summary ($OUT/summary.txt); the checklist: docs/cuda.md, \"The first run on a GPU\""
cat "$SUMMARY"
exit "$failed"
