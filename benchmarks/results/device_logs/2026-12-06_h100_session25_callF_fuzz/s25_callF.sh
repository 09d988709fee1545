#!/usr/bin/env bash
# Call E: the fuzz campaign, continued on main's kernels as of 7cd0759 (.variants/stageskip: the stage skip
# and char_piece_kernel's specials read from global memory): DeepSeek-V3, Mistral v7, Gemma 3
# and Gemma 4, each against its reference, seed 27.
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
PYTHONPATH=$PWD/.variants/stageskip:$PYTHONPATH timeout 140 python3 benchmarks/fuzz_campaign.py --out "$OUT" --seed 27 \
  --families r50k=300000,llama3=300000,qwen2=300000,tekken=300000,cl100k_hf=200000,gpt2_hf=200000 --time-budget 120 --kernel piece \
  > "$OUT/fuzz_campaign.log" 2>&1
echo "fuzz_campaign: exit $? at $SECONDS s"; grep -vE "^  [a-z0-9_]+: [0-9]+ strings, " "$OUT/fuzz_campaign.log" | tail -30 | cut -c1-400
echo "all done: $SECONDS s"
