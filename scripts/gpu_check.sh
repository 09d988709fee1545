#!/usr/bin/env bash
# One device call: build against the machine's own jax, run the GPU tests, optionally the
# benchmarks and compute-sanitizer. Logs and JSON go to $OUT (the device tool brings them back).
#   scripts/gpu_check.sh [test] [fuzz] [profile] [srcprofile] [bench] [hostpath] [sanitize]
#                        [sharded] [families] [ktime] [gputime] [timeline] [p9] [corpus] [corpus_scale] [corpus_profile] [corpus_stages] [single] [hostbatch]
#                        [variants] [clocks] [kernels] [piece] [piece_profile] [piece_test] [block_test] [ray_engine]
#                        [jsonl_device] [fuzz_campaign] [so_variants] [so_variant_tests]
# (PYTEST_K: pytest -k expression; PYTEST_PATHS: test files (default tests/); PYTEST_WORKERS: pytest-xdist
#  processes; TEST_TIMEOUT: seconds for `test`; BLOCKBPE_BENCH_ONLY: benchmark parts; PROFILE_ARGS;
#  FAMILIES_ARGS, CLOCKS_ARGS, GPUTIME_ARGS, TIMELINE_ARGS: options of benchmarks/families.py, stage_clocks.py,
#  gpu_time.py, timeline.py;
#  FUZZ_EXAMPLES: examples per GPU-vs-CPU fuzz test; VARIANTS: patch files for `variants`;
#  CORPUS_ARGS, CORPUS_SCALE_ARGS, CORPUS_PROFILE_MB, CORPUS_PROFILE_ARGS, CORPUS_WINDOWS_MB, SINGLE_ARGS: the corpus and single stages;
#  PIECE_ARGS, PIECE_TIMEOUT, PIECE_TEST_TIMEOUT, PIECE_SHAPES, NCU_TIMEOUT, VARIANT_NCU_SHAPES,
#  VARIANT_NCU_ARGS (more options of benchmarks/profile_kernel.py): the piece kernel's stages;
#  SO_VARIANTS: the builds of so_variant_tests; RAY_ENGINE_ARGS, PYARROW_TARBALL: the ray_engine stage; JSONL_DEVICE_ARGS: options of
#  benchmarks/jsonl_device.py; FUZZ_CAMPAIGN_ARGS, FUZZ_CAMPAIGN_TIMEOUT: the fuzz_campaign stage).
# `variants` and `clocks` rebuild (kernel variants, stage clocks), so they go last.
# Needs the shared data carried in .carry/data (see docs/build.md) and, for the peers,
# wheels in .whl/; with .prebuilt/ carried (scripts/prebuild_modules.sh) it builds nothing when
# those modules come from this tree's sources.
set -uo pipefail
OUT=${OUT:-/tmp/bbpe_out}
mkdir -p "$OUT"
# (the carry is 64 MiB: the shared data may travel as .carry/data.tar.xz, family files gzipped)
if [ ! -d .carry/data ] && [ -f .carry/data.tar.xz ]; then tar -xJf .carry/data.tar.xz -C .carry; fi
if [ -d .carry/family_files ]; then
  ls .carry/family_files/*.gz > /dev/null 2>&1 && gunzip -kf .carry/family_files/*.gz
  export BLOCKBPE_FAMILY_FILES=${BLOCKBPE_FAMILY_FILES:-$PWD/.carry/family_files}
fi
export PYTHONUNBUFFERED=1 BLOCKBPE_DATA=${BLOCKBPE_DATA:-$PWD/.carry/data}
stages=${*:-test}
{
  date -u; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
  python3 -c "import jax, jaxlib; print('jax', jax.__version__, 'jaxlib', jaxlib.__version__)"
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
build() {  # the editable build against the machine's jax; log to $OUT/$1
  rm -f blockbpe_jax/_blockbpe_*.so; export PYTHONPATH=${PYTHONPATH_BEFORE_PREBUILT-${PYTHONPATH:-}}
  python3 -m pip install --no-build-isolation --no-deps -e . > "$OUT/$1" 2>&1
}
prebuilt() {  # the modules scripts/prebuild_modules.sh built from this tree's sources, for this Python
  local tag; tag=$(python3 -c "import sys; print('cpython-%d%d' % sys.version_info[:2])")
  [ "$(cat .prebuilt/STAMP 2>/dev/null)" = "$(bash scripts/prebuild_modules.sh --stamp)" ] || return 1
  ls .prebuilt/_blockbpe_cuda."$tag"-*.so .prebuilt/_blockbpe_cpu."$tag"-*.so > /dev/null || return 1
  # (an earlier call's editable install would take the import: its finder comes before PYTHONPATH)
  python3 -m pip uninstall -y -q blockbpe_jax > /dev/null 2>&1
  cp .prebuilt/_blockbpe_*."$tag"-*.so blockbpe_jax/
  export PYTHONPATH_BEFORE_PREBUILT=${PYTHONPATH:-} PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}
  python3 -c "import blockbpe_jax as b; assert b.HAS_CUDA_MODULE, 'no CUDA module'" && cat .prebuilt/BUILT_WITH
}
piece_summary() {  # the device times of a piece_time.json, one line per shape
  python3 - "$1" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
for row in r.get("time", []) + r.get("families", []):
    if "new_median_us" in row:
        print(f"{row['family']} {row['batch']}x{row['bytes']}: old {row['old_median_us']:.1f} us ({row['old_GBps']:.1f} GB/s), "
              f"new {row['new_median_us']:.1f} us ({row['new_GBps']:.1f} GB/s), x{row['speedup']:.2f}; "
              f"new without the misses' cache {row.get('new_no_cache_median_us', float('nan')):.1f} us; pending rows "
              f"{row['pending_rows']}; by chunk {row.get('new_us_by_chunk')}")
    else:
        print("not timed:", row)
PY
}
variant_path() {  # PYTHONPATH with .variants/NAME's package first ("base": this tree's); fails loudly
  # when another package is the one imported. (A warm machine may keep a variant's native
  # modules and not its Python files between calls: its folder is then a namespace directory,
  # which Python passes over for this tree's package and modules.)
  [ "$1" = base ] && { echo "$PYTHONPATH"; return; }
  local path=$PWD/.variants/$1:$PYTHONPATH
  if ! PYTHONPATH=$path python3 -P -c "import blockbpe_jax as b, sys; sys.exit('/.variants/$1/' not in (b.__file__ or ''))"; then
    echo "variant $1: its package is not the one imported (files missing? an editable install's finder?)" >&2
    return 1
  fi
  echo "$path"
}
t0=$(date +%s)
# (USE_PREBUILT=0: build even when .prebuilt/ matches)
if [ "${USE_PREBUILT:-1}" = 1 ] && prebuilt > "$OUT/build.log" 2>&1; then
  echo "build: the prebuilt modules ($(( $(date +%s) - t0 )) s)"
else
  build build.log || { tail -50 "$OUT/build.log"; exit 1; }
  echo "build: $(( $(date +%s) - t0 )) s"
fi
python3 -c "import blockbpe_jax as b, jax; print('cuda module:', b.HAS_CUDA_MODULE, jax.devices())"
rebuilt=""  # set when `variants` left a patched build behind
# PYTEST_WORKERS=N: the test stages in N processes (pytest-xdist, carried in .whl/), each
# allocating GPU memory as it needs it.
xdist=""
if [ -n "${PYTEST_WORKERS:-}" ] && python3 -c "import xdist" 2>/dev/null; then
  xdist="-n $PYTEST_WORKERS"; export XLA_PYTHON_CLIENT_PREALLOCATE=false
fi
for stage in $stages; do
  if [ -n "$rebuilt" ] && [ "$stage" != clocks ]; then
    build build_restore.log; rebuilt=""
  fi
  case $stage in
    test)
      timeout "${TEST_TIMEOUT:-3000}" python3 -m pytest -v -rs --durations=10 -p no:cacheprovider $xdist -k "${PYTEST_K:-gpu}" ${PYTEST_PATHS:-tests} \
        > "$OUT/pytest_gpu.log" 2>&1; tail -25 "$OUT/pytest_gpu.log" ;;
    bench)
      python3 benchmarks/run_all.py --out "$OUT" 2>&1 | tee "$OUT/bench.log" | tail -60 ;;
    families)  # exact mode per tokenizer family vs its reference (benchmarks/families.py)
      python3 benchmarks/families.py --out "$OUT" ${FAMILIES_ARGS:-} 2>&1 | tee "$OUT/families.log" | tail -20 ;;
    ktime)     # GPU time of fixed shapes (benchmarks/kernel_time.py)
      python3 benchmarks/kernel_time.py --label head --out "$OUT" 2>&1 | tee "$OUT/ktime.log" | tail -8 ;;
    gputime)   # the GPU's time per call at its own clocks, every kernel summed (benchmarks/gpu_time.py)
      python3 benchmarks/gpu_time.py --out "$OUT" ${GPUTIME_ARGS:-} 2>&1 | tee "$OUT/gpu_time.log" | tail -4 | cut -c1-400 ;;
    timeline)  # encodes back to back on the GPU's own timeline, the host's spans (benchmarks/timeline.py)
      python3 benchmarks/timeline.py --out "$OUT" ${TIMELINE_ARGS:-} 2>&1 | tee "$OUT/timeline.log" | tail -9 | cut -c1-400 ;;
    profile)
      BLOCKBPE_KERNEL=block ncu --kernel-name regex:encode_kernel --launch-skip 2 --launch-count 1 \
        --section SpeedOfLight --section Occupancy --section LaunchStats --section WarpStateStats \
        --section SchedulerStats python3 benchmarks/profile_kernel.py ${PROFILE_ARGS:-} \
        > "$OUT/ncu.txt" 2>&1; grep -E "Duration|Throughput|Occupancy|Registers|Shared Memory|Stall|Warp Cycles|Eligible|Block Limit" "$OUT/ncu.txt" | head -40 ;;
    srcprofile)
      # Where the kernel's warps stall, per source line (the build has -lineinfo): the full
      # set with source counters on one encode; the report and its source page come back.
      # SRC_KERNEL=piece_kernel (char_piece_kernel, with PROFILE_ARGS="--family mistral-v7-spm")
      # profiles a piece kernel instead of encode_kernel (BLOCKBPE_KERNEL=block).
      src=${SRC_KERNEL:-encode_kernel}; sel=block; case $src in *piece_kernel) sel=piece ;; esac
      XLA_PYTHON_CLIENT_PREALLOCATE=false BLOCKBPE_KERNEL=$sel timeout "${NCU_TIMEOUT:-300}" \
        ncu --kernel-name regex:"$src" --launch-skip 2 --launch-count 1 --set full \
        --import-source yes -f -o "$OUT/encode_full" python3 benchmarks/profile_kernel.py ${PROFILE_ARGS:-} \
        > "$OUT/ncu_full.log" 2>&1; echo "srcprofile: exit $?"
      ncu --import "$OUT/encode_full.ncu-rep" --page source --csv --print-source cuda,sass \
        > "$OUT/ncu_source.csv" 2> "$OUT/ncu_source.err"
      ncu --import "$OUT/encode_full.ncu-rep" --page source --csv --print-source cuda \
        > "$OUT/ncu_source_cuda.csv" 2>> "$OUT/ncu_source.err"
      ncu --import "$OUT/encode_full.ncu-rep" --page details > "$OUT/ncu_details.txt" 2>&1
      python3 benchmarks/ncu_source.py "$OUT/ncu_source.csv" > "$OUT/ncu_source_report.txt" 2>&1
      python3 benchmarks/ncu_source.py "$OUT/ncu_source.csv" --by instructions >> "$OUT/ncu_source_report.txt" 2>&1
      head -20 "$OUT/ncu_source_report.txt"; ls -la "$OUT"/ncu_* "$OUT"/encode_full* ;;
    fuzz)
      BLOCKBPE_FUZZ_EXAMPLES=${FUZZ_EXAMPLES:-200} BLOCKBPE_HYPOTHESIS_RANDOM=1 python3 -m pytest -q \
        -p no:cacheprovider --hypothesis-show-statistics tests/fuzz/test_fuzz_gpu.py \
        > "$OUT/fuzz_gpu.log" 2>&1; echo "fuzz: exit $?"; grep -E "passed|failed|error" "$OUT/fuzz_gpu.log" | tail -3 ;;
    sanitize)
      # Every kernel is instrumented, XLA's too (racecheck ~4 min here); SANITIZE_ENCODE_ONLY=1
      # limits it to encode_kernel / encode_chars_kernel (kns=encode_: not the tile pipeline's
      # kernels). JAX must not grab most of the memory.
      # (initcheck with --check-api-memory-access no loses track of memcpy-written buffers and
      # reports every read of them: do not use it. See docs/journal/2026-11.md, "compute-sanitizer".)
      # SANITIZE_KERNELS=piece_kernel: only kernels whose name holds it (the piece kernel).
      filter=""; [ -n "${SANITIZE_ENCODE_ONLY:-}" ] && filter="--kernel-name kns=encode_"
      [ -n "${SANITIZE_KERNELS:-}" ] && filter="--kernel-name kns=$SANITIZE_KERNELS"
      for tool in ${SANITIZE_TOOLS:-memcheck racecheck initcheck synccheck}; do
        echo "+ compute-sanitizer --tool $tool $filter --error-exitcode 3 python3 scripts/sanitize_driver.py" \
          > "$OUT/sanitizer_$tool.log"
        XLA_PYTHON_CLIENT_PREALLOCATE=false timeout ${SANITIZE_TIMEOUT:-240} compute-sanitizer \
          --tool $tool $filter --error-exitcode 3 \
          python3 scripts/sanitize_driver.py >> "$OUT/sanitizer_$tool.log" 2>&1
        echo "$tool: exit $?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|ok|DIFFERENT" "$OUT/sanitizer_$tool.log" | sort | uniq -c | tail -6
      done ;;
    hostpath)
      python3 benchmarks/host_path.py --out "$OUT" 2>&1 | tee "$OUT/host_path.log" | tail -4 ;;
    sharded)
      python3 benchmarks/sharded.py --out "$OUT" 2>&1 | tee "$OUT/sharded.log" | tail -5 ;;
    p9)  # packing rows/s; grain --pack on the device vs grain's own host packing (same rows)
      python3 benchmarks/packing.py --out "$OUT" 2>&1 | tee "$OUT/packing.log" | tail -2
      for v in device host; do
        extra=""; [ $v = host ] && extra="--host-tokenize"
        # deterministic GPU reductions: otherwise the embedding gradient's scatter-add makes
        # two runs on the same rows differ in the last bits
        (cd examples && XLA_FLAGS="${XLA_FLAGS:-} --xla_gpu_deterministic_ops=true" \
          python3 grain_pipeline.py --pack $extra --steps 300 --workers 4 \
          --summary "$OUT/grain_pack_$v.json") > "$OUT/grain_pack_$v.log" 2>&1
        echo "grain --pack $extra: exit $?"; tail -2 "$OUT/grain_pack_$v.log"
      done
      python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
s = {v: json.loads((out / f"grain_pack_{v}.json").read_text()) for v in ("device", "host")
     if (out / f"grain_pack_{v}.json").exists()}
for v, r in s.items():
    print(f"{v}: {r['steps_per_s']:.2f} steps/s, loss {r['first_loss']:.4f} -> {r['last_loss']:.4f}, "
          f"dropped {r['packing_tokens_dropped']}, ended early {r['packing_batches_ended_early']}")
if len(s) == 2:
    d, h = s["device"]["losses"], s["host"]["losses"]
    print("losses equal:", d == h, "max |loss diff|:", max(abs(a - b) for a, b in zip(d, h)))
PY
      ;;
    variants)
      # A/B of kernel variants: benchmarks/kernel_time.py on the checked-out kernel ("base"),
      # then with each patch of $VARIANTS applied in turn (patch -p1; reverted after).
      python3 benchmarks/kernel_time.py --label base --out "$OUT" 2>&1 | tee "$OUT/variants.log"
      for v in ${VARIANTS:-}; do
        name=$(basename "$v" .patch)
        patch -p1 < "$v" > /dev/null || { echo "$name: does not apply" | tee -a "$OUT/variants.log"; continue; }
        if build "build_$name.log"; then
          python3 benchmarks/kernel_time.py --label "$name" --out "$OUT" 2>&1 | tee -a "$OUT/variants.log"
        else
          echo "$name: build failed" | tee -a "$OUT/variants.log"; tail -20 "$OUT/build_$name.log"
        fi
        patch -R -p1 < "$v" > /dev/null; rebuilt=1
      done ;;
    so_variants)
      # A/B of whole builds of the package made elsewhere (scripts/build_variant.sh): each
      # .variants/NAME/blockbpe_jax (Python and both modules) first on PYTHONPATH for
      # benchmarks/piece_time.py (PIECE_ARGS), then this tree ("base"); ROUNDS times in turn.
      for round in $(seq "${ROUNDS:-1}"); do
        for d in .variants/*/ base; do
          name=$(basename "$d"); path=$(variant_path "$name") || continue
          mkdir -p "$OUT/variant_$name/$round"
          PYTHONPATH=$path timeout "${PIECE_TIMEOUT:-300}" python3 benchmarks/piece_time.py \
            --out "$OUT/variant_$name/$round" ${PIECE_ARGS:-} > "$OUT/variant_$name/$round/piece_time.log" 2>&1
          echo "variant $name, round $round: exit $?"
          grep -E "DIFF|^cross:|Traceback|Error" "$OUT/variant_$name/$round/piece_time.log" | head -12 | cut -c1-200
          piece_summary "$OUT/variant_$name/$round/piece_time.json"
        done
      done
      # Then, per VARIANT_NCU_SHAPES (e.g. "1024:4096 1024:512"), each build's piece kernel under
      # ncu with clocks locked: steadier than device time between processes (docs/kernel_rounds.md,
      # "Piece kernel, round 4").
      M=gpu__time_duration.sum,smsp__inst_executed.sum,smsp__issue_active.avg.pct_of_peak_sustained_active
      for shape in ${VARIANT_NCU_SHAPES:-}; do
        for d in .variants/*/ base; do
          name=$(basename "$d"); path=$(variant_path "$name") || continue
          f="$OUT/variant_$name/ncu_${shape/:/x}.txt"
          XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONPATH=$path timeout "${NCU_TIMEOUT:-120}" ncu \
            --kernel-name regex:piece_kernel --launch-skip 2 --launch-count 1 --metrics "$M" --section LaunchStats \
            python3 benchmarks/profile_kernel.py --batch "${shape%:*}" --bytes "${shape#*:}" ${VARIANT_NCU_ARGS:-} > "$f" 2>&1
          echo "ncu $name $shape: exit $?"
          grep -E "gpu__time_duration|smsp__inst_executed.sum|issue_active|Registers Per" "$f" | sed 's/  */ /g'
        done
      done ;;
    so_variant_tests)
      # Every GPU test (PYTEST_K, PYTEST_PATHS) on each build of SO_VARIANTS (names under
      # .variants/, default all) with its own package: `python3 -P` (plain `-m pytest` puts the
      # working directory, this tree's package, before PYTHONPATH), its test files where it
      # carries them (.variants/NAME/tests_overlay/tests, over tests/ for the run, then restored).
      for name in ${SO_VARIANTS:-$(ls .variants)}; do
        path=$(variant_path "$name") || continue
        overlay=.variants/$name/tests_overlay/tests
        [ -d "$overlay" ] && { rm -rf /tmp/tests_kept && cp -r tests /tmp/tests_kept && cp -r "$overlay/." tests/; }
        PYTHONPATH=$path timeout "${TEST_TIMEOUT:-3000}" python3 -P -m pytest -q -rf --tb=short -p no:cacheprovider $xdist \
          -k "${PYTEST_K:-gpu}" ${PYTEST_PATHS:-tests} > "$OUT/pytest_$name.log" 2>&1
        echo "pytest ($name): exit $?"; tail -1 "$OUT/pytest_$name.log"; grep -E "^FAILED" "$OUT/pytest_$name.log" | head
        [ -d "$overlay" ] && { rm -rf tests && cp -r /tmp/tests_kept tests; }
      done ;;
    clocks)
      # A clocks build made elsewhere (STAGE_CLOCKS=ON scripts/build_variant.sh clocks TREE PYTHON,
      # then moved from .variants/clocks to .clocks) when carried; else the tree rebuilt here.
      if [ -d .clocks/blockbpe_jax ]; then
        PYTHONPATH=$PWD/.clocks:$PYTHONPATH python3 benchmarks/stage_clocks.py --out "$OUT" ${CLOCKS_ARGS:-} 2>&1 \
          | tee "$OUT/stage_clocks.log" | tail -12
      else
        BLOCKBPE_STAGE_CLOCKS=ON build build_clocks.log || { tail -30 "$OUT/build_clocks.log"; exit 1; }
        python3 benchmarks/stage_clocks.py --out "$OUT" ${CLOCKS_ARGS:-} 2>&1 | tee "$OUT/stage_clocks.log" | tail -12
      fi ;;
    corpus)    # the corpus job vs the CPU tokenizers, >= 1 GB (benchmarks/corpus_job.py)
      python3 benchmarks/corpus_job.py --out "$OUT" --threads "$(nproc)" ${CORPUS_ARGS:-} 2>&1 \
        | tee "$OUT/corpus_job.log" | tail -30 ;;
    corpus_scale)  # the command on a >= 10 GB corpus next to gigatoken's: wall, CPU-s/GB, peak memory
                   # (benchmarks/corpus_cli_scale.py; CORPUS_SCALE_ARGS, e.g. "--gb 10 --workdir /tmp")
      python3 benchmarks/corpus_cli_scale.py --out "$OUT" ${CORPUS_SCALE_ARGS:-} 2>&1 \
        | tee "$OUT/corpus_cli_scale.log" | tail -12 ;;
    corpus_profile)  # encode_files cold/warm, compiles, per-thread samples; window sizes A/B
                     # (CORPUS_PROFILE_ARGS: more options of benchmarks/profile_corpus.py)
      for w in ${CORPUS_WINDOWS_MB:-16 64}; do
        python3 benchmarks/profile_corpus.py --mb "${CORPUS_PROFILE_MB:-300}" --window-mb "$w" \
          ${CORPUS_PROFILE_ARGS:-} --out "$OUT/profile_corpus_w$w" > "$OUT/profile_corpus_w$w.txt" 2>&1
        echo "== window $w MB"; grep -E "^(cold|warm)|compiles" "$OUT/profile_corpus_w$w.txt"
      done ;;
    corpus_stages)  # reading and encoding alone and together, GIL wake-up lateness (benchmarks/corpus_stages.py)
      python3 benchmarks/corpus_stages.py --mb "${CORPUS_PROFILE_MB:-300}" > "$OUT/corpus_stages.txt" 2>&1
      cat "$OUT/corpus_stages.txt" ;;
    kernels)   # GPU time per kernel of one adversarial piece (ncu; the steady A/B of the tile
               # pipeline: single calls vary more between runs than most kernel changes)
      for c in ${KERNEL_CASES:-cjk:4096 cjk:65536 letters_a_j:8192 emoji:4096 spaces:8192 whitespace_newlines:8192}; do
        timeout 120 ncu --print-summary per-kernel --metrics gpu__time_duration.sum python3 benchmarks/profile_kernel.py \
          --batch 1 --bytes "${c#*:}" --adversarial "${c%:*}" --calls 3 > /tmp/ncu_kernels.txt 2>&1
        awk -v c="$c" '/^  void /{match($0, /::[a-z_]+<[^>]*>/); k = substr($0, RSTART + 2, RLENGTH - 2)}
          /gpu__time_duration.sum/{t[k] = $NF; s += $NF}
          END{printf "%s total %.1f us:", c, s; for (k in t) printf " %s %s", k, t[k]; print ""}' \
          /tmp/ncu_kernels.txt | tee -a "$OUT/kernels.txt"
      done ;;
    hostbatch) # a batch through tiktoken's API: host encoder, GPU, tiktoken's threads (benchmarks/host_batch.py)
      python3 benchmarks/host_batch.py --out "$OUT" 2>&1 | tee "$OUT/host_batch.log" | tail -6 ;;
    single)    # one string per call, 128 B .. 64 MiB, vs tiktoken (benchmarks/single_string.py)
      python3 benchmarks/single_string.py --out "$OUT" ${SINGLE_ARGS:-} 2>&1 \
        | tee "$OUT/single_string.log" | tail -100 ;;
    piece)     # the piece kernel (ffi/cuda/piece_kernel.cuh) against encode_kernel (BLOCKBPE_KERNEL=block)
               # in one process: cross-check on many inputs and families, then device time (benchmarks/piece_time.py)
      timeout "${PIECE_TIMEOUT:-300}" python3 benchmarks/piece_time.py --out "$OUT" ${PIECE_ARGS:-} > "$OUT/piece_time.log" 2>&1
      echo "piece_time: exit $?"; grep -E "DIFF|^cross:|Traceback|Error" "$OUT/piece_time.log" | head -20 | cut -c1-300
      piece_summary "$OUT/piece_time.json"
      ;;
    piece_profile)  # ncu on encode_kernel and on the piece kernel (with its pending-rows launch of
                    # encode_kernel), per shape of PIECE_SHAPES: the roofline's counters, one file
      M=gpu__time_duration.sum,sm__cycles_elapsed.avg,smsp__inst_executed.sum,smsp__thread_inst_executed.sum
      M=$M,smsp__thread_inst_executed_per_inst_executed.ratio,smsp__issue_active.avg.pct_of_peak_sustained_active
      M=$M,sm__warps_active.avg.pct_of_peak_sustained_active,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_bytes.sum
      for shape in ${PIECE_SHAPES:-1024:4096 64:512}; do
        for k in old piece; do
          if [ $k = old ]; then re=encode_kernel; skip=2; count=1; sel=block; else re="piece_kernel|encode_kernel"; skip=4; count=2; sel=piece; fi
          echo "=== $k ${shape%:*}x${shape#*:}" >> "$OUT/ncu_piece.txt"
          # (JAX must not preallocate: ncu's replays save and restore the memory the process holds,
          # and a killed run's process keeps it)
          XLA_PYTHON_CLIENT_PREALLOCATE=false BLOCKBPE_KERNEL=$sel timeout "${NCU_TIMEOUT:-120}" ncu --clock-control none \
            --kernel-name regex:"$re" --launch-skip $skip --launch-count $count --metrics "$M" --section LaunchStats \
            python3 benchmarks/profile_kernel.py --batch "${shape%:*}" --bytes "${shape#*:}" >> "$OUT/ncu_piece.txt" 2>&1
          echo "ncu $k $shape: exit $?"
        done
      done
      grep -E "^===|  void|gpu__time_duration|smsp__inst_executed.sum|smsp__thread_inst_executed.sum|issue_active|warps_active|dram__bytes" \
        "$OUT/ncu_piece.txt" | cut -c1-150 ;;
    piece_test|block_test)  # the GPU tests with one kernel selected for every call that allows it
                            # (BLOCKBPE_KERNEL=piece or block; PYTEST_K, PYTEST_PATHS as for `test`)
      sel=${stage%_test}
      BLOCKBPE_KERNEL=$sel timeout "${PIECE_TEST_TIMEOUT:-540}" python3 -m pytest -v -rs --durations=5 -p no:cacheprovider $xdist \
        -k "${PYTEST_K:-gpu}" ${PYTEST_PATHS:-tests} > "$OUT/pytest_$sel.log" 2>&1
      echo "pytest ($sel): exit $?"; tail -15 "$OUT/pytest_$sel.log" ;;
    ray_engine)  # the Ray stage's engine path over >= 1 GB of parquet, next to gigatoken (benchmarks/ray_engine.py);
                 # the host has no pyarrow: a trimmed cp312 tree is carried as a .tar.xz (docs/corpus.md)
      if ! python3 -c "import pyarrow" 2>/dev/null; then
        tarball=${PYARROW_TARBALL:-.carry_p15/pyarrow312.tar.xz}
        mkdir -p /tmp/pyarrow312 && tar -xJf "$tarball" -C /tmp/pyarrow312 \
          && export PYTHONPATH=/tmp/pyarrow312${PYTHONPATH:+:$PYTHONPATH}
        python3 -c "import pyarrow.parquet as pq; print('pyarrow', pq.__file__)" || echo "ray_engine: no pyarrow ($tarball)"
      fi
      python3 benchmarks/ray_engine.py --out "$OUT" ${RAY_ENGINE_ARGS:-} 2>&1 | tee "$OUT/ray_engine.log" | tail -15 ;;
    jsonl_device)  # JSONL and text split on the GPU: its GPU tests, then GB/s against the host reader
      timeout 540 python3 -m pytest -v -rs -p no:cacheprovider -k gpu tests/corpus/test_jsonl_device.py \
        tests/corpus/test_jsonl_string_end.py tests/corpus/test_jsonl_pieces.py > "$OUT/pytest_jsonl_device.log" 2>&1
      echo "pytest (jsonl_device): exit $?"; tail -12 "$OUT/pytest_jsonl_device.log"
      python3 benchmarks/jsonl_device.py --out "$OUT" ${JSONL_DEVICE_ARGS:-} 2>&1 | tee "$OUT/jsonl_device.log" | tail -25 ;;
    fuzz_campaign)  # generated strings per family (default 1M) on the GPU against each family's
                    # reference (benchmarks/fuzz_campaign.py; the references on every core but one);
                    # e.g. FUZZ_CAMPAIGN_ARGS="--families cl100k,o200k=500000 --time-budget 380
                    # --kernel piece". BLOCKBPE_FAMILY_FILES (default .carry/family_files) for the
                    # GGUF families. The JSON is written after every family, so a timeout keeps
                    # the families done; --time-budget stops cleanly before it.
      BLOCKBPE_FAMILY_FILES=${BLOCKBPE_FAMILY_FILES:-$PWD/.carry/family_files} \
        timeout "${FUZZ_CAMPAIGN_TIMEOUT:-560}" python3 benchmarks/fuzz_campaign.py --out "$OUT" ${FUZZ_CAMPAIGN_ARGS:-} \
        > "$OUT/fuzz_campaign.log" 2>&1
      echo "fuzz_campaign: exit $?"; grep -vE "^  [a-z0-9_]+: [0-9]+ strings, " "$OUT/fuzz_campaign.log" \
        | tail -30 | cut -c1-400 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
