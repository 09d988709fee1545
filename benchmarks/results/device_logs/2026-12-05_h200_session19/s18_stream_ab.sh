# Session 18, the staging's non-temporal stores A/B (carry .carry .whl .prebuilt .devscripts):
# host_path.py (staged_steps: stage / copy_wait / dispatch / gpu_sync; api and api_fresh: one
# encode_batch; stream_api) with BLOCKBPE_STAGING_STREAM=0 and =1 in alternating processes,
# twice each. The hypothesis: a DMA of rows just written with plain stores reads them out of the
# packing cores' caches (194 us for 4 MiB where memory not written since takes 86).
bash scripts/gpu_check.sh setup > "$OUT/setup.log" 2>&1; tail -n 2 "$OUT/setup.log"
export BLOCKBPE_DATA=$PWD/.carry/data PYTHONPATH=$PWD:/tmp/site
for rep in 1 2; do
  for s in 0 1; do
    mkdir -p "$OUT/stream$s.$rep"
    BLOCKBPE_STAGING_STREAM=$s timeout 130 python3 benchmarks/host_path.py --out "$OUT/stream$s.$rep" \
      --cells 1024x512,1024x4096 > "$OUT/stream$s.$rep/host_path.log" 2>&1
    echo "== stream=$s rep $rep"; tail -n 3 "$OUT/stream$s.$rep/host_path.log" | cut -c1-700
  done
done
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz . 2>/dev/null; find . -type f ! -name logs.tgz ! -name 'host_path.json' -delete; ls -laR | head -30
