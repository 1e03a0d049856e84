#!/bin/sh
# test_gpu_first_run.sh - scripts/gpu_first_run.sh on a machine without a
# GPU: it must say so clearly and exit 1 before building anything, whether
# nvidia-smi is missing, fails (no driver loaded) or lists no GPU.  Also
# checks the script with bash -n, and with shellcheck when it is installed.
set -eu
src=${TD_SOURCE_ROOT:-.}
script=$src/scripts/gpu_first_run.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
bash -n "$script"
if command -v shellcheck >/dev/null 2>&1; then
    shellcheck "$script"
fi
# expect_no_gpu WHAT NVIDIA_SMI: exit 1, the message, no build, no output
expect_no_gpu() {
    rc=0
    BUILD=$tmp/build OUT=$tmp/out NVIDIA_SMI=$2 \
        bash "$script" >"$tmp/stdout" 2>"$tmp/stderr" || rc=$?
    if [ "$rc" -ne 1 ]; then
        echo "FAIL ($1): exit status $rc, not 1"; cat "$tmp/stderr"; exit 1
    fi
    if ! grep -q "no usable NVIDIA GPU: .*$3" "$tmp/stderr" ||
       ! grep -q "nothing was built or run" "$tmp/stderr"; then
        echo "FAIL ($1): unclear message:"; cat "$tmp/stderr"; exit 1
    fi
    if [ -e "$tmp/build" ] || [ -e "$tmp/out" ]; then
        echo "FAIL ($1): it built or wrote something"; exit 1
    fi
    echo "ok ($1): $(head -n 1 "$tmp/stderr")"
}
expect_no_gpu "no driver" "$tmp/absent/nvidia-smi" "not found"
cat >"$tmp/smi-fails" <<'FAKE'
#!/bin/sh
echo "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver."
exit 9
FAKE
chmod +x "$tmp/smi-fails"
expect_no_gpu "driver not loaded" "$tmp/smi-fails" "failed: NVIDIA-SMI has failed"
cat >"$tmp/smi-none" <<'FAKE'
#!/bin/sh
echo "No devices were found"
FAKE
chmod +x "$tmp/smi-none"
expect_no_gpu "no device" "$tmp/smi-none" "lists no GPU: No devices were found"
echo "OK"
