# Session 17, calls 4 and 5 (carry .carry .whl .prebuilt .devscripts): Gemma 4's part of P11
# must-show 3 on the kernels of rounds 7-9 (the family files carried in .carry/family_files):
# 450k strings a call, two seeds (SEED=11, then SEED=12), each within the call's time.
FUZZ_CAMPAIGN_ARGS="--families gemma4_gguf=450000 --time-budget 480 --seed ${SEED:-11}" FUZZ_CAMPAIGN_TIMEOUT=540 \
  bash scripts/gpu_check.sh fuzz_campaign > "$OUT/campaign.log" 2>&1
tail -n 8 "$OUT/campaign.log" | cut -c1-300
ls "$OUT"
