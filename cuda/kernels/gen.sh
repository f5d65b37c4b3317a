#!/usr/bin/env bash
# Regenerates the checked-in PTX of the built-in kernels from src/*.cu.
# Needs nvcc (CUDA 12 or 13); run it on a GPU machine, then commit the .ptx.
#
#   cuda/kernels/gen.sh [outdir]      # default: cuda/kernels/ptx
#
# compute_80 PTX is JIT-compiled by the driver for every GPU from Ampere on
# (H100/H200 included). -fmad=false keeps a*b+c as two roundings so that the
# Go references in the tests match bit for bit.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/ptx}"
mkdir -p "$out"
for f in "$here"/src/*.cu; do
  n="$(basename "$f" .cu)"
  nvcc -ptx -arch=compute_80 -O3 -fmad=false -std=c++17 -I"$here/src" -o "$out/$n.ptx" "$f"
done
nvcc --version | tail -n 2 > "$out/NVCC_VERSION"
ls -l "$out"
