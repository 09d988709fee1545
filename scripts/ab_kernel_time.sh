#!/usr/bin/env bash
# A/B of whole source trees on the GPU in one device call: benchmarks/kernel_time.py for each,
# in rounds (A B C A B C ...). A tree is "work" (this checkout) or a directory holding another
# revision's ffi/, blockbpe_jax/, CMakeLists.txt, pyproject.toml, README.md (made with
#   git archive REV ffi blockbpe_jax CMakeLists.txt pyproject.toml README.md | tar x -C .ab/NAME
# and carried to the device machine); each keeps its own build cache.
#   scripts/ab_kernel_time.sh ROUNDS TREE...
# Logs and kernel_time_<name>_<round>.json go to $OUT. Needs .carry/data (see docs/build.md).
set -uo pipefail
OUT=${OUT:-/tmp/bbpe_out}
mkdir -p "$OUT"
export BLOCKBPE_DATA=${BLOCKBPE_DATA:-$PWD/.carry/data}
rounds=$1; shift
here=$PWD
for r in $(seq 1 "$rounds"); do
  for tree in "$@"; do
    dir=$here; [ "$tree" = work ] || dir=$(cd "$tree" && pwd)
    name=$(basename "$tree")
    (cd "$dir" && python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_${name}_$r.log" 2>&1 \
      && cd "$here" && python3 benchmarks/kernel_time.py --label "${name}_$r" --out "$OUT" 2>&1 | tail -4) \
      || { echo "tree $tree failed (see $OUT/build_${name}_$r.log)"; tail -5 "$OUT/build_${name}_$r.log"; }
  done
done
cd "$here" && python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build_restore.log" 2>&1
