#!/usr/bin/env bash
# Call E: the fuzz campaign, continued on main's kernels as of 7cd0759 (.variants/stageskip: the stage skip
# and char_piece_kernel's specials read from global memory): DeepSeek-V3, Mistral v7, Gemma 3
# and Gemma 4, each against its reference, seed 26.
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
PYTHONPATH=$PWD/.variants/stageskip:$PYTHONPATH timeout 300 python3 benchmarks/fuzz_campaign.py --out "$OUT" --seed 26 \
  --families deepseek_v3=600000,mistral_v7_spm=800000,gemma3_gguf=850000,mistral_v1_spm=300000,llama2_gguf=300000,cl100k=500000,qwen2_nfc=300000,lowercase=300000,o200k=300000 --time-budget 270 --kernel piece \
  > "$OUT/fuzz_campaign.log" 2>&1
echo "fuzz_campaign: exit $? at $SECONDS s"; grep -vE "^  [a-z0-9_]+: [0-9]+ strings, " "$OUT/fuzz_campaign.log" | tail -30 | cut -c1-400
echo "all done: $SECONDS s"
