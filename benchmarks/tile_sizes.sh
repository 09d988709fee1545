#!/usr/bin/env bash
# Long-row tile sizes (CMake BLOCKBPE_TILE_BYTES, ffi/core/span_stitch.h), each built and
# measured on one machine: one string per call (benchmarks/single_string.py, cl100k, prose and
# huge-piece cases) and the GPU tests of the tile pipeline (tests/kernels/test_huge_pieces.py,
# tests/kernels/test_long_rows.py). Run from the repo root on the GPU machine with the data under
# .carry/data (scripts/gpu_check.sh's layout):
#     OUT=dir bash benchmarks/tile_sizes.sh
# Settings (environment): TILE_SIZES ("2048 4096 1024"; the first is the pip build, the others
# cmake builds in build/t<N> whose modules replace the installed ones in turn), TILE_BENCH_SIZES
# (16K,64K,1M), TILE_CASES, TILE_TIKTOKEN_MAX (1M), TILE_TESTS (1: the tests for every size),
# TILES_DEADLINE (525 s: every step is under `timeout`). Everything goes into $OUT/all.tgz, the
# table into $OUT/summary.txt and stdout.
set -u
T0=$SECONDS
DEADLINE=${TILES_DEADLINE:-525}
W=$OUT/w; mkdir -p "$W"
[ -e .carry ] || ln -s .carryn .carry
export BLOCKBPE_DATA=$PWD/.carry/data PYTHONUNBUFFERED=1
read -r -a SIZES <<< "${TILE_SIZES:-2048 4096 1024}"
BENCH_SIZES=${TILE_BENCH_SIZES:-16K,64K,1M}
CASES=${TILE_CASES:-prose,cjk,letters_a_j,letters_runs,mixed,run_in_piece}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"
  command -v cmake ninja nvcc
} > "$W/machine.txt" 2>&1
cat "$W/machine.txt"

elapsed() { echo $(( SECONDS - T0 )); }
# budget CAP RESERVE: seconds a step may take, leaving RESERVE for what follows (at least 10).
budget() { local b=$(( DEADLINE - $(elapsed) - $2 )); (( b > $1 )) && b=$1; (( b < 10 )) && b=10; echo $b; }
note() { echo "[$(elapsed) s] $*" | tee -a "$W/steps.txt"; }

# The variants' cmake builds, in the background (the pip build of the first runs meanwhile).
NB_DIR=$(python3 -m nanobind --cmake_dir 2>/dev/null)
GEN=(); command -v ninja >/dev/null && GEN=(-G Ninja)
pids=()
for N in "${SIZES[@]:1}"; do
  if [ -n "$NB_DIR" ] && command -v cmake >/dev/null; then
    ( cmake -S . -B build/t$N "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DBLOCKBPE_CUDA=ON \
        -DBLOCKBPE_TILE_BYTES=$N -DCMAKE_CUDA_FLAGS=--resource-usage -Dnanobind_DIR="$NB_DIR" \
        -DPython_EXECUTABLE="$(command -v python3)" \
      && timeout 280 cmake --build build/t$N -j 6 ) > "$W/build_$N.log" 2>&1 &
    pids+=($!)
  fi
done
note "pip build ${SIZES[0]}"
BLOCKBPE_TILE_BYTES=${SIZES[0]} timeout 280 python3 -m pip install --no-build-isolation --no-deps -e . \
  > "$W/build_${SIZES[0]}.log" 2>&1 || { note "pip build ${SIZES[0]} failed"; tail -30 "$W/build_${SIZES[0]}.log"; }
for p in "${pids[@]}"; do wait "$p"; done
note "builds done"
SO_DIR=$(python3 -c "import os, blockbpe_jax._blockbpe_cpu as m; print(os.path.dirname(m.__file__))")
echo "installed modules: $SO_DIR" >> "$W/machine.txt"

use() {  # the modules of size $1 in place of the installed ones; fails unless they say $1
  local N=$1 f
  if [ "$N" != "${SIZES[0]}" ]; then
    if ls build/t$N/_blockbpe_cpu*.so build/t$N/_blockbpe_cuda*.so >/dev/null 2>&1; then
      for f in build/t$N/_blockbpe_*.so; do cp "$f" "$SO_DIR/.new.so" && mv "$SO_DIR/.new.so" "$SO_DIR/$(basename "$f")"; done
    else
      note "no cmake build of $N: pip build"
      BLOCKBPE_TILE_BYTES=$N timeout "$(budget 200 120)" python3 -m pip install --no-build-isolation --no-deps -e . \
        > "$W/build_${N}_pip.log" 2>&1
    fi
  fi
  md5sum "$SO_DIR"/_blockbpe_*.so >> "$W/machine.txt"
  python3 -c "
import blockbpe_jax.native as n
assert n.cuda is not None, 'no CUDA module'
assert n.cpu.tile_bytes == $N, n.cpu.tile_bytes
print('tile_bytes', n.cpu.tile_bytes)"
}

left=${#SIZES[@]}
for N in "${SIZES[@]}"; do
  left=$(( left - 1 ))  # sizes after this one: each keeps about 100 s
  if ! use "$N" > "$W/use_$N.log" 2>&1; then note "size $N: modules not usable"; cat "$W/use_$N.log"; continue; fi
  note "bench $N"
  mkdir -p "$W/t$N"
  timeout "$(budget 150 $(( left * 100 + 60 )))" python3 benchmarks/single_string.py --out "$W/t$N" \
    --sizes "$BENCH_SIZES" --cases "$CASES" --tiktoken-max "${TILE_TIKTOKEN_MAX:-1M}" --budget-s 4 \
    > "$W/t$N/run.log" 2>&1
  note "bench $N rc $?"
  if [ "${TILE_TESTS:-1}" = 1 ]; then
    timeout "$(budget 150 $(( left * 100 )))" python3 -m pytest -q -rf -p no:cacheprovider --durations=5 \
      --maxfail=10 -k gpu tests/kernels/test_huge_pieces.py tests/kernels/test_long_rows.py > "$W/pytest_$N.log" 2>&1
    note "tests $N rc $? :: $(tail -1 "$W/pytest_$N.log")"
    grep -E "^(FAILED|ERROR)" "$W/pytest_$N.log" | head -5 | tee -a "$W/steps.txt"
  fi
done

python3 - "$W" "${SIZES[@]}" > "$W/summary.txt" 2>&1 <<'PY'
import json, sys
from pathlib import Path
w = Path(sys.argv[1])
runs = {}
for n in map(int, sys.argv[2:]):
    f = w / f"t{n}" / "single_string.json"
    if f.exists():
        doc = json.loads(f.read_text())
        runs[n] = {(r["case"], r["size"]): r for r in doc["rows"]}
        if doc.get("tile_bytes") != n:
            print(f"WARNING: t{n} ran with tile_bytes {doc.get('tile_bytes')}")
keys = sorted({k for r in runs.values() for k in r}, key=lambda k: (k[0], k[1]))
def mbps(r, key):
    v = r.get(key) if r else None
    return f"{v:.1f}" if isinstance(v, float) else "-"
print("device MB/s by tile bytes (one string per call, cl100k); tiktoken MB/s; ids equal per tile")
print(f"{'case':14} {'size':>8} " + " ".join(f"{n:>8}" for n in runs) + f" {'tiktoken':>9}  equal")
for k in keys:
    rs = [runs[n].get(k) for n in runs]
    tk = next((r for r in rs if r and isinstance(r.get("tiktoken_MBps"), float)), None)
    eq = "/".join("T" if r and r.get("ids_equal") is True else ("F" if r and r.get("ids_equal") is False else "?") for r in rs)
    print(f"{k[0]:14} {k[1] >> 10:>7}K " + " ".join(f"{mbps(r, 'ours_device_MBps'):>8}" for r in rs)
          + f" {mbps(tk, 'tiktoken_MBps'):>9}  {eq}")
PY
cat "$W/steps.txt" >> "$W/summary.txt"
cd "$OUT" && tar czf all.tgz w && cp w/summary.txt summary.txt && rm -rf w
cat summary.txt
echo "total $(( SECONDS - T0 )) s"
