#!/usr/bin/env bash
# Call C: a pre-tokenizer stage skipped in a block whose bytes are all of its inert classes
# (.variants/stageskip: DeepSeek's digit and CJK splits on prose) against main (.prebuilt, which
# lacks only char_piece_kernel's change of call B): DeepSeek, cl100k and Llama 3 in turn, twice;
# every GPU test on stageskip; memcheck, racecheck and synccheck on the piece kernels (the
# driver's piece rows now with a three-stage tokenizer too).
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
fam() {  # NAME PYTHONPATH ONLY
  PYTHONPATH=$2 timeout 120 python3 benchmarks/families.py --only "$3" > "$OUT/fam_$1_${3// /_}.log" 2>&1
  echo "fam $1 $3: exit $? at $SECONDS s"; grep '^{' "$OUT/fam_$1_${3// /_}.log" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(f\"  {r['family']}: {r['device_MBps']/1e3:.2f} / {r['device_no_cache_MBps']/1e3:.2f} GB/s, equal {r['equal_to_reference']}\")"
}
SK=$PWD/.variants/stageskip:$PYTHONPATH
for round in 1 2; do
  for only in "DeepSeek" "cl100k" "llama3"; do
    fam sk$round "$SK" "$only"
    fam main$round "$PYTHONPATH" "$only"
  done
done
XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$SK timeout 220 python3 -m pytest -q -n 8 -p no:cacheprovider -rs -k gpu tests \
  > "$OUT/pytest_gpu_sk.log" 2>&1; echo "tests stageskip: exit $? at $SECONDS s"; tail -2 "$OUT/pytest_gpu_sk.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu_sk.log" | head
for tool in memcheck racecheck synccheck; do
  [ $SECONDS -gt 530 ] && break
  PYTHONPATH=$SK XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 75 compute-sanitizer --tool $tool --kernel-name kns=piece_kernel \
    --error-exitcode 3 python3 scripts/sanitize_driver.py > "$OUT/san_$tool.log" 2>&1
  echo "piece_kernel $tool: exit $? at $SECONDS s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|DIFFERENT|Warning" "$OUT/san_$tool.log" | sort | uniq -c
done
echo "all done: $SECONDS s"
