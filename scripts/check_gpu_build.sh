#!/usr/bin/env bash
# Compile-check every C++ source as the GPU machine builds it (torch 2.11's
# headers, CUDA 13's, C++17, the cuda driver on) without a GPU, before spending
# device time: a 2.13-only construct here failed a lent machine's build. Then
# check that every name the Python code imports from torch exists in torch 2.11
# too (scripts/check_torch_imports.py): a 2.13-only import failed its tests.
# Downloads the torch 2.11 and CUDA runtime wheels once (~570 MB) into $CACHE.
#
#   bash scripts/check_gpu_build.sh          # exit 1 and the first errors of each file that fails
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
CACHE=${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torch_musa_gpu_headers}
TORCH_VERSION=${TORCH_VERSION:-2.11.0}
WHEEL_ARGS=(--no-deps --only-binary=:all: --python-version 3.12 --platform manylinux_2_28_x86_64
            --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64)
mkdir -p "$CACHE"
if [[ ! -d "$CACHE/torch/include" || ! -f "$CACHE/torch/__init__.py" ]]; then
  echo "fetching torch $TORCH_VERSION and CUDA 13 headers into $CACHE"
  $PY -m pip download -q "${WHEEL_ARGS[@]}" -d "$CACHE/wheels" "torch==$TORCH_VERSION" \
    "nvidia-cuda-runtime>=13.0,<13.1" "nvidia-cuda-crt>=13.0,<13.1" || exit 1
  (cd "$CACHE" && unzip -q -o wheels/torch-*.whl 'torch/include/*' 'torch/*.py' 'torch/*.pyi' \
    && for w in wheels/nvidia_cuda_*.whl; do unzip -q -o "$w" -d cuda; done) || exit 1
  rm -rf "$CACHE/wheels"
fi
T=$CACHE/torch/include
CU=$(dirname "$(find "$CACHE/cuda" -name cuda_runtime.h | head -1)")
PYI=$($PY -c "import sysconfig; print(sysconfig.get_paths()['include'])")
FLAGS=(-fsyntax-only -std=c++17 -w -DTORCH_MUSA_WITH_CUDA -DTORCH_API_INCLUDE_EXTENSION_H
       -DTORCH_EXTENSION_NAME=libtorch_musa -Itorch_musa/csrc -I"$T" -I"$T/torch/csrc/api/include"
       -I"$CU" -I"$PYI")
sources=$(find torch_musa/csrc torch_musa/distributed/csrc build/generated -name '*.cpp' 2>/dev/null | sort)
n=$(wc -l <<< "$sources")
echo "checking $n sources against torch $TORCH_VERSION and CUDA 13 headers ($(nproc) at once, ~2 min on 2 cores)"
errors=$(xargs -P "$(nproc)" -I{} sh -c 'g++ "$@" {} 2>&1 | grep -m3 "error" | sed "s|^|{}: |"' _ "${FLAGS[@]}" <<< "$sources")
if [[ -n "$errors" ]]; then
  echo "$errors"
  echo "FAILED: the GPU machine's build would fail (torch $TORCH_VERSION headers)"
  exit 1
fi
echo "ok: $n sources compile against torch $TORCH_VERSION and CUDA 13 headers"
$PY scripts/check_torch_imports.py "$CACHE" || exit 1
