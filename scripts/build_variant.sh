#!/usr/bin/env bash
# A whole build of the package from another work tree (a kernel or table variant), for the
# device's `so_variants` stage (scripts/gpu_check.sh): TREE's Python package and its two native
# modules, built for PYTHON (3.12 on the GPU machine, with nanobind), into .variants/NAME/.
#   [STAGE_CLOCKS=ON] scripts/build_variant.sh NAME TREE PYTHON   (ON: with the stage clocks)
# (.variants/ travels in the device call's carry; .git/info/exclude ignores it.) A variant's tests:
# scripts/gpu_check.sh so_variant_tests, which runs `python3 -P -m pytest` with the variant first
# on PYTHONPATH (plain `python3 -m` puts the working directory, this tree's package, first).
set -euo pipefail
name=${1:?usage: scripts/build_variant.sh NAME TREE PYTHON}; tree=$(cd "${2:?}" && pwd); py=${3:?}
here=$(cd "$(dirname "$0")/.." && pwd)
ffi_include=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
cmake -S "$tree" -B "$tree/build/variant" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" \
  -DXLA_FFI_INCLUDE_DIR="$ffi_include" -DBLOCKBPE_CUDA=ON -DBLOCKBPE_CUDA_ARCH=90 \
  -DBLOCKBPE_TILE_BYTES=2048 -DBLOCKBPE_STAGE_CLOCKS="${STAGE_CLOCKS:-OFF}" > /dev/null
cmake --build "$tree/build/variant"
out=$here/.variants/$name
rm -rf "$out" && mkdir -p "$out"
(cd "$tree" && tar --exclude=__pycache__ --exclude='*.so' -cf - blockbpe_jax) | tar -xf - -C "$out"
cp "$tree"/build/variant/_blockbpe_*.so "$out/blockbpe_jax/"
du -sh "$out"
