#!/usr/bin/env bash
# The 2-GPU check (one device call on a machine with 2 GPUs): build, then
#   1. the multi-host path: 2 processes on JAX's distributed runtime (localhost), one GPU each,
#      each encoding its own shard into the global batch (encode_process_local), every row
#      checked against tiktoken, timed -> $OUT/sharded_multiprocess.json
#   2. one process, 2 devices: encode_sharded over 1 and 2 GPUs -> $OUT/sharded.json
#   3. the 2-process CPU test of the multi-host path (tests/ops/test_multihost.py), as in CI.
# Needs the shared data in .carry/data (BLOCKBPE_DATA).
set -uo pipefail
OUT=${OUT:-/tmp/bbpe_out}
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 BLOCKBPE_DATA=${BLOCKBPE_DATA:-$PWD/.carry/data}
nvidia-smi --query-gpu=index,name,memory.total --format=csv | tee "$OUT/machine.txt"
python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/build.log" 2>&1 \
  || { tail -50 "$OUT/build.log"; exit 1; }
rc=0
python3 benchmarks/sharded.py --processes 2 --out "$OUT" ${MP_ARGS:-} 2>&1 \
  | tee "$OUT/sharded_multiprocess.log" | tail -4 || rc=1
[ -s "$OUT/sharded_multiprocess.json" ] || rc=1
python3 benchmarks/sharded.py --out "$OUT" 2>&1 | tee "$OUT/sharded.log" | tail -3
python3 -m pytest -q -p no:cacheprovider tests/ops/test_multihost.py > "$OUT/pytest_multihost.log" 2>&1 \
  || rc=1
tail -2 "$OUT/pytest_multihost.log"
exit $rc
