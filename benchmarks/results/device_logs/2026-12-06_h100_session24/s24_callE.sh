#!/usr/bin/env bash
# Call E: memcheck, racecheck, synccheck on spstarts' kernels (char_piece_kernel, and the block
# kernels' mark_special_tokens: kns=encode_), then Gemma 3 / Mistral v7 A/B again.
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
SP=$PWD/.variants/spstarts:$PYTHONPATH
for kn in char_piece encode_; do
  for tool in memcheck racecheck synccheck; do
    log=$OUT/sanitizer_${kn}_$tool.log
    PYTHONPATH=$SP XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 80 compute-sanitizer --tool $tool --kernel-name kns=$kn \
      --error-exitcode 3 python3 scripts/sanitize_driver.py > "$log" 2>&1
    echo "$kn $tool: exit $? at $SECONDS s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|SYNCCHECK|DIFFERENT|found" "$log" | sort | uniq -c | tail -4
  done
done
fam() {  # NAME PYTHONPATH ONLY
  PYTHONPATH=$2 timeout 60 python3 benchmarks/families.py --only "$3" > "$OUT/fam_$1_${3// /_}.log" 2>&1
  echo "fam $1 $3: exit $? at $SECONDS s"; grep '^{' "$OUT/fam_$1_${3// /_}.log" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(f\"  {r['family']}: {r['device_MBps']/1e3:.2f} / {r['device_no_cache_MBps']/1e3:.2f} GB/s, equal {r['equal_to_reference']}\")"
}
for only in "Gemma 3" "Mistral v7"; do
  [ $SECONDS -lt 520 ] && fam main2 "$PYTHONPATH" "$only"
  [ $SECONDS -lt 540 ] && fam sp2 "$SP" "$only"
done
echo "all done: $SECONDS s"
