# Session 17, call 1a (carry .carry .whl .prebuilt .variants .devscripts; .variants: longb
# (long-keys + long-keys-bytes), fill (fill-wave), rowonce (the misses' cache row read at once);
# long-keys alone can be built on the device if longb loses on prose:
#   git worktree add -f /tmp/long HEAD && git -C /tmp/long am docs/journal/pending/long-keys.patch \
#     && bash scripts/build_variant.sh long /tmp/long python3   (~100 s)
# A/B of the kernels: piece_time (cross-check against the block kernel, device time) and ncu
# (clocks locked), per build.
export VARIANT_NCU_SHAPES="1024:4096 1024:512 64:512" VARIANT_NCU_ARGS="--warm-seeds 2 --split-book" ROUNDS=1 \
  PIECE_ARGS="--parts cross,time --rounds 2 --families cl100k,llama3" PIECE_TIMEOUT=150 NCU_TIMEOUT=60
timeout 560 bash scripts/gpu_check.sh so_variants > "$OUT/so_variants.log" 2>&1
grep -E "^cl100k|^llama3|^cross:|^variant|^ncu|gpu__time|inst_executed|Traceback|Error" "$OUT/so_variants.log" | cut -c1-300
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz . 2>/dev/null; find . -type f ! -name logs.tgz -delete; ls -la
