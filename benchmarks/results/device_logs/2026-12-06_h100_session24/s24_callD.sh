#!/usr/bin/env bash
# Call D: the specials table built at load (.variants/spstarts) against main (.prebuilt), the
# families with specials in turn; every GPU test on spstarts; stage clocks of Gemma 3 and
# Mistral v7 on spstarts' clocks build (.variants/spclk); then, while time is left, gpu_time
# cl100k and nfc_throughput.
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
clk() {  # BUILD VOCAB
  PYTHONPATH=$PWD/.variants/$1:$PYTHONPATH timeout 60 python3 benchmarks/stage_clocks.py --only $2 --out "$OUT/clk_$1_$2" > "$OUT/clk_$1_$2.log" 2>&1
  echo "clocks $1 $2: exit $? at $SECONDS s"; grep '^{' "$OUT/clk_$1_$2.log" | python3 -c "
import json, sys
for l in sys.stdin:
    r = json.loads(l); print(' ', r['vocab'], r['batch'], r['bytes'], 'pending', r['pending_rows'], r['total_cycles_per_block'], r['cycles_per_block'])"
}
SP=$PWD/.variants/spstarts:$PYTHONPATH
for only in "GGUF" "Mistral v"; do
  fam sp1 "$SP" "$only"
  fam main1 "$PYTHONPATH" "$only"
done
XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$SP timeout 200 python3 -m pytest -q -n 8 -p no:cacheprovider -rs -k gpu tests \
  > "$OUT/pytest_gpu_sp.log" 2>&1; echo "tests spstarts: exit $? at $SECONDS s"; tail -3 "$OUT/pytest_gpu_sp.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu_sp.log" | head
[ $SECONDS -lt 480 ] && clk spclk gemma3
[ $SECONDS -lt 500 ] && clk spclk mistral-v7
if [ $SECONDS -lt 460 ]; then
  timeout $((580 - SECONDS)) python3 benchmarks/nfc_throughput.py --out "$OUT" > "$OUT/nfc.log" 2>&1; echo "nfc: exit $? at $SECONDS s"; tail -14 "$OUT/nfc.log"
fi
echo "all done: $SECONDS s"
