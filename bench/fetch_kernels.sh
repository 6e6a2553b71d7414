#!/usr/bin/env bash
# The optional Hopper kernels (requirements-gpu.txt: QuACK on CUTLASS's Python DSL) for a GPU
# machine without network, as one unpacked site folder in parts small enough for the device
# tool's copy (64 MiB a call, with the working tree): .kernels/site.tar.xz.part-aa, -ab, ...
#
# Why not wheels: the DSL ships as three wheels that share one folder (pip --target keeps only
# the first), and its compiled part (nvidia-cutlass-dsl-libs-cu13, 88 MB) is larger than one copy
# allows. Unpacked and recompressed with xz the whole set is about 62 MB: two parts, each sent
# in its own call and joined there (bench/gpu_session.sh does, before its phases).
set -euo pipefail
cd "$(dirname "$0")/.."
dl=$(mktemp -d)
site="$dl/site"
grep -v '^\s*#' requirements-gpu.txt | grep -v '^\s*$' | while read -r spec; do
  python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform any -d "$dl" "$spec"
done
mkdir -p "$site"
for w in "$dl"/*.whl; do python3 -m zipfile -e "$w" "$site"; done  # one folder, as the DSL's .pth expects
rm -rf .kernels && mkdir -p .kernels
tar -C "$site" -cf - . | xz -T0 -9 | split -b 40M - .kernels/site.tar.xz.part-
(cd .kernels && sha256sum site.tar.xz.part-* > SHA256SUMS)  # the GPU machine unpacks once all are there
rm -rf "$dl"
ls -l .kernels
