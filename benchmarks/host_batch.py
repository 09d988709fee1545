#!/usr/bin/env python3
"""A batch of strings through tiktoken's API, lists of ids back: ours on the host, ours on the
GPU, tiktoken with its threads (one long text: ours splits its segments over the cores).

    python3 benchmarks/host_batch.py --out DIR [--shapes 1x1048576,1024x512,1024x4096,16384x512] [--reps 5]

cl100k, War and Peace excerpts (whole characters, cut at or below the byte size). Per shape,
medians of --reps calls after a warm-up call:
  ours_host    `tok.as_tiktoken().encode_ordinary_batch(texts)`: the native host encoder
               (`ops.host_encoder`), its strings split over the host's cores, the GIL released
  ours_gpu     `tok.as_tiktoken(device=jax.devices()[0]).encode_ordinary_batch(texts)`:
               encode_batch on the default device, ids copied back and cut into lists
               (skipped when that device is the CPU)
  tiktoken     `Encoding.encode_ordinary_batch(texts, num_threads=os.cpu_count())`
and, on a GPU, the ids as arrays on the host (no lists), two ways:
  gpu_padded   `tok.encode_batch(texts).numpy()`: the padded [B, T] ids and the counts copied back
  gpu_flat     `tok.encode_batch(texts).flat_numpy()`: the rows compacted on the device, only
               their ids copied back (flat, with the counts)
Each path also on strs as they come (`*_fresh_*`: new str objects with the same texts before
every call, harness.fresh_copies: no UTF-8 form made yet, which every other timing finds made
after its first call). Every path's ids are checked equal to tiktoken's. Writes
DIR/host_batch.json and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

from single_string import cl100k_setup  # noqa: E402
from harness import measure_fresh, median_s, spread_excerpts  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--shapes", default="1x1048576,1024x512,1024x4096,16384x512")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    import jax

    tok, enc, prose, dev, _ = cl100k_setup()
    host = tok.as_tiktoken()
    gpu = tok.as_tiktoken(device=dev) if dev.platform != "cpu" else None
    threads = os.cpu_count() or 1
    rows_out = []
    for shape in args.shapes.split(","):
        rows, size = (int(x) for x in shape.split("x"))
        texts = spread_excerpts(prose, rows, size)
        nbytes = sum(len(t.encode()) for t in texts)
        row = dict(rows=rows, bytes_per_row=size, bytes=nbytes)
        ref_s, ref = median_s(lambda: enc.encode_ordinary_batch(texts, num_threads=threads), args.reps)
        row["tiktoken_MBps"] = nbytes / ref_s / 1e6
        fresh_s = measure_fresh(
            lambda t: enc.encode_ordinary_batch(t, num_threads=threads), texts, reps=args.reps
        )
        row["tiktoken_fresh_MBps"] = nbytes / fresh_s["s"] / 1e6
        paths = [("ours_host", host)] + ([("ours_gpu", gpu)] if gpu is not None else [])
        for name, api in paths:
            secs, got = median_s(lambda api=api: api.encode_ordinary_batch(texts), args.reps)
            row[f"{name}_MBps"] = nbytes / secs / 1e6
            row[f"{name}_over_tiktoken"] = ref_s / secs
            row[f"{name}_ids_equal"] = got == ref
            fresh = measure_fresh(api.encode_ordinary_batch, texts, reps=args.reps)["s"]
            row[f"{name}_fresh_MBps"] = nbytes / fresh / 1e6
            row[f"{name}_fresh_over_tiktoken"] = fresh_s["s"] / fresh
        if gpu is not None:
            import numpy as np

            from blockbpe_jax.ops.flat_ids import flat_rows

            want = np.concatenate([np.asarray(r, np.int64) for r in ref])
            width = max(16, 1 << (max(len(t.encode()) for t in texts) - 1).bit_length())
            for name, read in (("gpu_padded", "numpy"), ("gpu_flat", "flat_numpy")):
                secs, (ids, counts) = median_s(
                    lambda read=read: getattr(tok.encode_batch(texts, max_len=width, device=dev), read)(),
                    args.reps,
                )
                if ids.ndim == 2:  # (the padded rows cut at their counts)
                    ids = flat_rows(ids, counts)
                row[f"{name}_MBps"] = nbytes / secs / 1e6
                row[f"{name}_ids_equal"] = bool(np.array_equal(ids, want))
        rows_out.append(row)
        print(json.dumps(row), flush=True)
    doc = dict(
        benchmark="host_batch",
        vocab="cl100k",
        device=str(dev),
        host_cores=threads,
        jax=jax.__version__,
        rows=rows_out,
    )
    (out_dir / "host_batch.json").write_text(json.dumps(doc, indent=2) + "\n")
    print(
        "shape | ours host MB/s | ours GPU MB/s | tiktoken MB/s (threads) | host / tiktoken | GPU / tiktoken"
        " | GPU arrays, padded / flat MB/s | fresh strs: host / GPU / tiktoken MB/s"
    )
    nan = float("nan")
    for r in rows_out:
        print(
            f"{r['rows']}x{r['bytes_per_row']} | {r['ours_host_MBps']:.0f} | {r.get('ours_gpu_MBps', nan):.0f}"
            f" | {r['tiktoken_MBps']:.0f} ({threads}) | {r['ours_host_over_tiktoken']:.2f} | "
            f"{r.get('ours_gpu_over_tiktoken', nan):.2f} | {r.get('gpu_padded_MBps', nan):.0f} / "
            f"{r.get('gpu_flat_MBps', nan):.0f} | {r['ours_host_fresh_MBps']:.0f} / "
            f"{r.get('ours_gpu_fresh_MBps', nan):.0f} / {r['tiktoken_fresh_MBps']:.0f}"
        )


if __name__ == "__main__":
    main()
