# Session 17, call 3 (carry .carry .whl .prebuilt .devscripts; the peers' wheels moved from
# .whl_peers/ into .whl/ first): P12's measurements on this session's main.
#  1. host_batch: tiktoken's API on the GPU with flat ids vs padded, strs fresh and reused
#  2. the corpus job in process, 1 GB, device split off / on (now one DMA from page-locked read
#     buffers), window 32 and 128 MiB; CPU-s/GB
#  3. the command on a 10 GB corpus next to gigatoken's command (corpus_cli_scale: wall,
#     CPU-s/GB, peak memory, ids compared)
# (run_all peers, the README's table with fresh strs: s17_call3b.sh, a call of its own)
bash scripts/gpu_check.sh setup > "$OUT/setup.log" 2>&1; tail -n 2 "$OUT/setup.log"
export BLOCKBPE_DATA=$PWD/.carry/data PYTHONPATH=$PWD:/tmp/site
timeout 120 python3 benchmarks/host_batch.py --out "$OUT" --shapes 1024x512,1024x4096 > "$OUT/host_batch.log" 2>&1; tail -n 3 "$OUT/host_batch.log" | cut -c1-300
for w in 32 128; do
  timeout 150 python3 benchmarks/corpus_job.py --out "$OUT/split_w$w" --gb 1 --device-split both --corpora mixed \
    --reps 2 --window-mb $w --nfc-corpora none --threads "$(nproc)" > "$OUT/split_w$w.log" 2>&1
  echo "== window $w MiB"; grep -E "^mixed \|" "$OUT/split_w$w.log" | cut -c1-200
done
# the worker pool's spin before it sleeps (BLOCKBPE_WORKER_SPIN_US, default 50) costs CPU-s/GB
# in a job of many short parallel steps: the same A/B at the default window without it
BLOCKBPE_WORKER_SPIN_US=0 timeout 150 python3 benchmarks/corpus_job.py --out "$OUT/split_spin0" --gb 1 --device-split both \
  --corpora mixed --reps 2 --nfc-corpora none --threads "$(nproc)" > "$OUT/split_spin0.log" 2>&1
echo "== window 32 MiB, no spin"; grep -E "^mixed \|" "$OUT/split_spin0.log" | cut -c1-200
CORPUS_SCALE_ARGS="--gb 10 --workdir /tmp --timeout-s 120" timeout 280 bash scripts/gpu_check.sh corpus_scale > "$OUT/scale.log" 2>&1
tail -n 6 "$OUT/scale.log" | cut -c1-400
cd "$OUT" && tar czf logs.tgz --exclude=logs.tgz . 2>/dev/null; find . -type f ! -name logs.tgz ! -name 'results_*.json' ! -name 'host_batch.json' ! -name 'corpus_cli_scale.json' -delete; ls -la
