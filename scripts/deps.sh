#!/usr/bin/env bash
# deps.sh - install every Debian package traind's build, tests and demo need.
#
# Does nothing when they are all present.  Otherwise runs `apt-get update`
# once and installs the missing ones (as root, or through sudo).  The CUDA
# toolkit and cuDNN are not Debian packages: when /usr/local/cuda has them
# the CUDA backend is built too, otherwise it is skipped.
set -euo pipefail

packages=(
  # toolchain and build
  gcc libc6-dev pkg-config meson ninja-build cmake
  # libraries
  libuv1-dev libjansson-dev libturbojpeg0-dev libjpeg62-turbo-dev libdnnl-dev
  zlib1g-dev
  # PNG samples (lib/input/png.c)
  libpng-dev
  # trainctl plot draws and writes its PNG with cairo (client/plot.c)
  libcairo2-dev
  # the Prometheus endpoint (docs/observability.md)
  libmicrohttpd-dev
  # tests
  check libsubunit-dev systemd
  # the fuzz build (tests/fuzz, scripts/fuzz.sh): clang, its libFuzzer and
  # sanitizer runtimes, and LLVM's OpenMP runtime for clang -fopenmp
  clang libclang-rt-dev libomp-dev
  # trainctl's bash completion uses its helpers (and its test loads them)
  bash-completion
  # the checkpoint format test reads a checkpoint with numpy
  python3-numpy
  # tests/unit/test_prom_parser.c reads the Prometheus exposition with the
  # reference parser (it skips without it)
  python3-prometheus-client
  # tests/ref/check_torchvision.py: the zoo's resnets against torchvision
  # (weights both ways, logits compared)
  python3-torch python3-torchvision
  # trainctl export --format onnx: protobuf-c code generated from Debian's
  # onnx.proto; tests/ref/check_onnx.py checks the file with onnx.checker
  # and runs it in OpenCV's DNN module
  libonnx-dev libprotobuf-c-dev protobuf-c-compiler python3-onnx
  python3-opencv
  # tests/live/test_dashboard.c renders GET /dashboard in headless chromium
  # (it skips without it)
  chromium
  # the reference dataset for the demo and the accuracy benchmarks
  dataset-fashion-mnist
)

missing=()
for p in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
  [[ "$status" == "install ok installed" ]] || missing+=("$p")
done

if ((${#missing[@]} == 0)); then
  echo "deps: all ${#packages[@]} packages present"
  exit 0
fi

echo "deps: installing ${missing[*]}"
as_root=()
if ((EUID != 0)); then
  if command -v sudo >/dev/null; then
    as_root=(sudo)
  else
    echo "deps: missing packages and not root; run as root: $0" >&2
    exit 1
  fi
fi
export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -q
"${as_root[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}"
