#!/usr/bin/env bash
# Call D: the fuzz campaign on main's kernels as of 7cd0759 (.variants/stageskip: the stage skip
# and char_piece_kernel's specials read from global memory): DeepSeek-V3, Mistral v7, Gemma 3
# and Gemma 4, each against its reference, seed 25.
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
PYTHONPATH=$PWD/.variants/stageskip:$PYTHONPATH timeout 470 python3 benchmarks/fuzz_campaign.py --out "$OUT" --seed 25 \
  --families deepseek_v3=400000,mistral_v7_spm=200000,gemma3_gguf=150000,gemma4_gguf=100000 --time-budget 430 --kernel piece \
  > "$OUT/fuzz_campaign.log" 2>&1
echo "fuzz_campaign: exit $? at $SECONDS s"; grep -vE "^  [a-z0-9_]+: [0-9]+ strings, " "$OUT/fuzz_campaign.log" | tail -30 | cut -c1-400
echo "all done: $SECONDS s"
