#!/bin/sh
# test_trainctl_no_cuda.sh TRAINCTL TRAIND - trainctl runs on a machine
# with no CUDA libraries at all: it must not link libcudart, libcublas or
# libcudnn (it learns about GPUs from the daemon's version reply).  In a
# CUDA build, traind itself must link them, which shows the check can see
# a CUDA dependency when there is one.
set -eu
trainctl=$1 traind=$2
needed() { readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
if needed "$trainctl" | grep -E 'libcuda|libcublas|libcudnn'; then
    echo "FAIL: trainctl links the CUDA runtime (above)"
    exit 1
fi
echo "trainctl needs: $(needed "$trainctl" | tr '\n' ' ')"
if grep -q 'define TD_HAVE_CUDA 1' "$TD_BUILD_ROOT/td_config.h"; then
    if ! needed "$traind" | grep -q libcudart; then
        echo "FAIL: a CUDA build's traind does not link libcudart"
        exit 1
    fi
    echo "traind links the CUDA runtime, as it should in a CUDA build"
fi
# trainctl must also start and answer --help with no CUDA library
# reachable at all.
LD_LIBRARY_PATH= "$trainctl" --help >/dev/null
echo "OK"
