#!/usr/bin/env bash
# The native modules built here for the GPU machine's Python, so that a device call need not
# compile them (about 85 s of every call there): .prebuilt/ gets the two modules, the hash of
# the sources they were built from and what built them. scripts/gpu_check.sh uses them when
# that hash is its tree's and the Python matches, and builds as before otherwise.
#   scripts/prebuild_modules.sh PYTHON   # PYTHON: that Python (3.12 there) with nanobind installed
#   scripts/prebuild_modules.sh --stamp  # the hash of the sources the modules are built from
# The XLA FFI headers come from this machine's jaxlib (the FFI's C API is versioned, so headers
# of an older jaxlib serve a newer one); the CUDA runtime is linked statically.
set -euo pipefail
cd "$(dirname "$0")/.."
stamp() {
  find ffi CMakeLists.txt pyproject.toml -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum | sha256sum | cut -c1-64
}
if [ "${1:-}" = --stamp ]; then stamp; exit 0; fi
py=${1:?usage: scripts/prebuild_modules.sh PYTHON (with nanobind) | --stamp}
ffi_include=$(python3 -c "import jax.ffi; print(jax.ffi.include_dir())")
dir=build/prebuilt
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$py" \
  -DXLA_FFI_INCLUDE_DIR="$ffi_include" -DBLOCKBPE_CUDA=ON -DBLOCKBPE_CUDA_ARCH=90 \
  -DBLOCKBPE_TILE_BYTES=2048 -DBLOCKBPE_STAGE_CLOCKS=OFF > /dev/null
cmake --build "$dir"
rm -rf .prebuilt && mkdir .prebuilt
cp "$dir"/_blockbpe_*.so .prebuilt/
stamp > .prebuilt/STAMP
{
  "$py" -c "import sys, nanobind; print('python', sys.version.split()[0], 'nanobind', nanobind.__version__)"
  python3 -c "import jaxlib; print('XLA FFI headers of jaxlib', jaxlib.__version__)"
  nvcc --version | tail -1
} > .prebuilt/BUILT_WITH
ls .prebuilt
