#!/usr/bin/env bash
# Call G (main with spstarts landed, .prebuilt): nfc_throughput with the tokenizers timed by
# turns, the whole families table, gpu_time cl100k.
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; cat .prebuilt/STAMP; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
timeout 150 python3 benchmarks/nfc_throughput.py --out "$OUT" > "$OUT/nfc.log" 2>&1; echo "nfc: exit $? at $SECONDS s"; grep -v "^{" "$OUT/nfc.log" | tail -8
timeout 240 python3 benchmarks/families.py --out "$OUT" > "$OUT/families.log" 2>&1; echo "families: exit $? at $SECONDS s"
grep '^{' "$OUT/families.log" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(f\"  {r['family']}: {r['device_MBps']/1e3:.2f} / {r['device_no_cache_MBps']/1e3:.2f} GB/s, ref {r['reference_MBps']:.0f} MB/s, equal {r['equal_to_reference']}\")"
[ $SECONDS -lt 420 ] && { timeout 80 python3 benchmarks/gpu_time.py --out "$OUT" > "$OUT/gpu_time.log" 2>&1; echo "gpu_time: exit $? at $SECONDS s"; }
echo "all done: $SECONDS s"
