#!/usr/bin/env bash
# The fill launched from the device (docs/journal/pending/tailfill.patch, built into
# .variants/tailfill by scripts/build_variant.sh) against main (.prebuilt): its own GPU test, the
# kernels of a call (gpu_time: no encode_kernel where no row is pending), every GPU test,
# sanitizers on the piece kernels (the device launch included), families A/B.
set -u
cd "$(dirname "$0")/.."
. .devscripts/setup_env.sh
{ date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; } > "$OUT/machine.txt"; cat "$OUT/machine.txt"
TF=$PWD/.variants/tailfill:$PYTHONPATH
XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$TF timeout 120 python3 -m pytest -q -p no:cacheprovider tests/kernels/test_pending_fill.py \
  > "$OUT/pytest_fill.log" 2>&1; echo "test_pending_fill: exit $? at $SECONDS s"; tail -3 "$OUT/pytest_fill.log"
for b in tf main; do
  pp=$PYTHONPATH; [ $b = tf ] && pp=$TF
  PYTHONPATH=$pp timeout 90 python3 benchmarks/gpu_time.py --out "$OUT/gt_$b" > "$OUT/gpu_time_$b.log" 2>&1
  echo "gpu_time $b: exit $? at $SECONDS s"; cut -c1-330 "$OUT/gpu_time_$b.log" | grep '^{'
done
XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$TF timeout 220 python3 -m pytest -q -n 8 -p no:cacheprovider -k gpu tests \
  > "$OUT/pytest_gpu_tf.log" 2>&1; echo "tests tailfill: exit $? at $SECONDS s"; tail -2 "$OUT/pytest_gpu_tf.log"; grep -E "^(FAILED|ERROR)" "$OUT/pytest_gpu_tf.log" | head
for tool in memcheck racecheck synccheck; do
  [ $SECONDS -gt 480 ] && break
  PYTHONPATH=$TF XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 60 compute-sanitizer --tool $tool --kernel-name kns=piece_kernel \
    --error-exitcode 3 python3 scripts/sanitize_driver.py > "$OUT/san_$tool.log" 2>&1
  echo "piece_kernel $tool: exit $? at $SECONDS s"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|DIFFERENT" "$OUT/san_$tool.log" | sort | uniq -c
done
echo "all done: $SECONDS s"
