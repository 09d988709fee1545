#!/usr/bin/env bash
# Call B: char_piece_kernel reading the specials' table from global memory and skipping the
# matching in blocks with no byte that can start a special (.variants/spglobal) against main
# (.prebuilt): the SentencePiece-style families in turn, twice; the GPU tests on spglobal;
# memcheck, racecheck and synccheck on char_piece_kernel.
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
SG=$PWD/.variants/spglobal:$PYTHONPATH
fam main0 "$PYTHONPATH" "cl100k"
fam main0 "$PYTHONPATH" "DeepSeek"
for round in 1 2; do
  for only in "GGUF" "Mistral v"; do
    fam sg$round "$SG" "$only"
    fam main$round "$PYTHONPATH" "$only"
  done
done
XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$SG timeout 220 python3 -m pytest -q -n 8 -p no:cacheprovider -rs -k gpu tests \
  > "$OUT/pytest_gpu_sg.log" 2>&1; echo "tests spglobal: exit $? at $SECONDS s"; tail -2 "$OUT/pytest_gpu_sg.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu_sg.log" | head
for tool in memcheck racecheck synccheck; do
  [ $SECONDS -gt 530 ] && break
  PYTHONPATH=$SG XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 60 compute-sanitizer --tool $tool --kernel-name kns=char_piece_kernel \
    --error-exitcode 3 python3 scripts/sanitize_driver.py > "$OUT/san_$tool.log" 2>&1
  echo "char_piece_kernel $tool: exit $? at $SECONDS s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|DIFFERENT|Warning" "$OUT/san_$tool.log" | sort | uniq -c
done
echo "all done: $SECONDS s"
