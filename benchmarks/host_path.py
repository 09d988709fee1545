#!/usr/bin/env python3
"""Where end-to-end time goes between a Python list[str] and padded ids on the GPU.

    python3 benchmarks/host_path.py --out DIR [--cells 64x512,1024x512,1024x2048,1024x4096] [--ascii]

cl100k, exact mode, War and Peace excerpts (the issue-4 cells; --ascii: made ASCII, so that a
run with and one without shows what the 16-bit strs' transcoding costs). For each cell: the
pieces (pack_strings, device_put of one array, the encode on device-resident input) and whole paths
from list[str] to ids on the device, each checked equal to the device-resident ids:
  two_puts    pack_strings, device_put(data), device_put(lengths), jitted encode
  tuple_put   the same with one device_put((data, lengths)) call
  pinned      device_put into pinned host memory first, then to the device
  chunks_k    the batch in k chunks, each packed, put and dispatched before the next is
              packed (the host packs chunk i+1 while the GPU works on chunk i), ids joined
              on the device
  staged      the GPU path of Tokenizer.encode_batch (blockbpe_jax/staging.py): pack into
              pinned memory, one DMA, the slot's DLPack views (imported once per shape),
              jitted encode; pieces: stage_upload_s (pack + DMA until the copy ended),
              stage_import_s (two jax.dlpack.from_dlpack calls)
  staged_reimport  the same with a fresh import per batch (the first design: its import
              and the deletion of the imported arrays cost 100-300 us per batch)
  api / api_numpy  Tokenizer.encode_batch, one batch, with staging and with
              BLOCKBPE_STAGING=0 (NumPy arrays handed to the jitted call)
  pack_fresh / api_fresh  pack_strings and api on new str objects with the same texts,
              each made untimed before its call (harness.fresh_copies: strs without the UTF-8
              form CPython keeps once asked for it, as strs read from a file are)
  stream_api  an input pipeline: 8 different batches through the public
              Tokenizer.encode_batch one after another (async dispatch: the host packs and
              puts batch i+1 while the GPU encodes batch i), one block at the end; time per
              batch = total / 8
Medians of repeated runs after warm-up (harness.measure). Per cell also, in microseconds:
  staged_steps_us  (a CUDA GPU) the staged path one step after another, the device idle at
              each start: `stage` (packing into pinned memory, the copy started), `copy_wait`,
              `dispatch` (the encode call returns), `gpu_sync` (until the ids are ready)
  dispatch_us  host time of one call, the device idle before it (medians of 40): the eager
              encode (unchecked / checked), the jitted encode, a trivial jitted call with the
              same operands (data, lengths, tables) and with two (on the CPU backend a call
              runs before it returns: there these are whole times)
BLOCKBPE_WORKER_POOL=0 in a second run shows the host worker pool's share of the packing.
Writes DIR/host_path.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

from harness import excerpts, measure, measure_fresh  # noqa: E402


def median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 1)


def staged_steps(encode, texts: list[str], L: int, dev, reps: int = 30) -> dict:
    """encode_batch's staged path (`encode(data, lengths)`: its unchecked encode) step by step."""
    from blockbpe_jax import staging

    steps: dict[str, list[float]] = {k: [] for k in ("stage", "copy_wait", "dispatch", "gpu_sync")}
    for k in range(reps + 5):
        t0 = time.perf_counter()
        staged = staging.stage_strings(texts, max_len=L, device=dev)
        t1 = time.perf_counter()
        data, lengths = staged.data, staged.lengths
        t2 = time.perf_counter()
        ids, counts = encode(data, lengths)
        staged.release(counts)
        t3 = time.perf_counter()
        ids.block_until_ready()
        t4 = time.perf_counter()
        if k >= 5:
            for name, a, b in zip(steps, (t0, t1, t2, t3), (t1, t2, t3, t4)):
                steps[name].append(b - a)
    return {name: median_us(v) for name, v in steps.items()}


def host_time_us(call, reps: int = 40) -> float:
    """Host time of `call()` (it returns before the device has run it), the device idle first."""
    import jax

    samples = []
    for k in range(reps + 5):
        t = time.perf_counter()
        out = call()
        if k >= 5:
            samples.append(time.perf_counter() - t)
        jax.block_until_ready(out)
    return median_us(samples)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(HERE / "results"))
    ap.add_argument("--cells", default="64x512,1024x512,1024x2048,1024x4096")
    ap.add_argument(
        "--ascii",
        action="store_true",
        help="every character outside ASCII made '?': strs CPython stores a byte a character, "
        "whose UTF-8 needs no count or transcoding (the excerpts as they are: 16-bit strs)",
    )
    args = ap.parse_args()

    import jax
    import jax.numpy as jnp

    import blockbpe_jax as bb
    from blockbpe_jax import staging
    from blockbpe_jax._data import find_data_dir

    data_dir = find_data_dir()
    if data_dir is None:
        sys.exit("host_path: no shared data (set BLOCKBPE_DATA)")
    raw = (data_dir / "corpus" / "war_and_peace_en.txt").read_bytes()
    tok = bb.Tokenizer.from_file(data_dir / "vocab" / "tiktoken" / "cl100k_base.tiktoken")
    dev = jax.devices()[0]
    tables = tok.tables(device=dev)
    enc = jax.jit(
        lambda d, l, t, T: bb.encode(d, l, t, max_tokens=T, check_lengths=False)[:2], static_argnums=3
    )
    join = jax.jit(lambda parts: jnp.concatenate(parts, axis=0))
    results = {
        "device": str(dev.device_kind),
        "jax": jax.__version__,
        "date_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "text": "ascii" if args.ascii else "as is",
        "cells": [],
    }

    def as_text(texts: list[str]) -> list[str]:  # (--ascii: each character outside ASCII '?')
        return [t.encode("ascii", "replace").decode() for t in texts] if args.ascii else texts

    for cell in args.cells.split(","):
        B, L = map(int, cell.split("x"))
        texts = as_text(excerpts(raw, B, L))
        total = sum(len(t.encode()) for t in texts)
        d_np, l_np = bb.pack_strings(texts, max_len=L)
        d_dev, l_dev = jax.device_put(d_np, dev), jax.device_put(l_np, dev)
        ref = np.asarray(enc(d_dev, l_dev, tables, L)[0])

        def block(x):
            jax.block_until_ready(x)
            return x

        def two_puts(texts=texts):
            d, l = bb.pack_strings(texts, max_len=L)
            return block(enc(jax.device_put(d, dev), jax.device_put(l, dev), tables, L)[0])

        def tuple_put(texts=texts):
            d, l = bb.pack_strings(texts, max_len=L)
            return block(enc(*jax.device_put((d, l), dev), tables, L)[0])

        pinned = jax.sharding.SingleDeviceSharding(dev, memory_kind="pinned_host")

        on_device = jax.sharding.SingleDeviceSharding(dev, memory_kind="device")

        def pinned_put():
            d, l = bb.pack_strings(texts, max_len=L)
            staged = jax.device_put((d, l), pinned)
            return block(enc(*jax.device_put(staged, on_device), tables, L)[0])

        def numpy_args():  # the jitted call transfers its numpy arguments itself
            d, l = bb.pack_strings(texts, max_len=L)
            return block(enc(d, l, tables, L)[0])

        n_stream = 8
        stream_texts = [texts] + [as_text(excerpts(raw, B, L, seed=s)) for s in range(1, n_stream)]
        stream_refs = [ref] + [
            np.asarray(enc(*jax.device_put(bb.pack_strings(t, max_len=L), dev), tables, L)[0])
            for t in stream_texts[1:]
        ]

        def stream_api():
            outs = [tok.encode_batch(t, max_len=L, max_tokens=L, device=dev) for t in stream_texts]
            return block([o.ids for o in outs])

        def chunks(k):
            step = -(-B // k)

            def run():
                parts = []
                for lo in range(0, B, step):
                    d, l = bb.pack_strings(texts[lo : lo + step], max_len=L)
                    parts.append(enc(*jax.device_put((d, l), dev), tables, L)[0])
                return block(join(parts))

            return run

        pieces = {
            "pack_s": lambda: bb.pack_strings(texts, max_len=L),
            "put_data_s": lambda: block(jax.device_put(d_np, dev)),
            "put_lengths_s": lambda: block(jax.device_put(l_np, dev)),
            "put_tuple_s": lambda: block(jax.device_put((d_np, l_np), dev)),
            "device_resident_encode_s": lambda: block(enc(d_dev, l_dev, tables, L)[0]),
        }
        paths = {
            "two_puts": two_puts,
            "tuple_put": tuple_put,
            "pinned": pinned_put,
            "numpy_args": numpy_args,
            "chunks_2": chunks(2),
            "chunks_4": chunks(4),
        }
        if staging.available(dev):
            slot = bb.native.cuda.HostStaging(dev.local_hardware_id)

            def stage_upload():
                slot.upload(texts, L)
                slot.wait()

            def stage_import():
                return [jax.dlpack.from_dlpack(a) for a in slot.device_arrays()]

            def staged():
                st = staging.stage_strings(texts, max_len=L, device=dev)
                ids, counts = enc(st.data, st.lengths, tables, L)
                st.release(counts)
                return block(ids)

            def staged_reimport():  # a fresh import per batch (the first design)
                stage_upload()
                return block(enc(*stage_import(), tables, L)[0])

            def api(texts=texts):
                return block(tok.encode_batch(texts, max_len=L, max_tokens=L, device=dev).ids)

            def api_numpy():
                os.environ["BLOCKBPE_STAGING"] = "0"
                try:
                    return api()
                finally:
                    del os.environ["BLOCKBPE_STAGING"]

            stage_upload()
            pieces.update(stage_upload_s=stage_upload, stage_import_s=stage_import)
            paths.update(staged=staged, staged_reimport=staged_reimport, api=api, api_numpy=api_numpy)
        row = {"batch": B, "bytes": L, "total_bytes": total}
        if staging.available(dev):
            unchecked = lambda d, l: bb.encode(d, l, tables, max_tokens=L, check_lengths=False)[:2]
            row["staged_steps_us"] = staged_steps(unchecked, texts, L, dev)
        trivial_same, trivial_two = jax.jit(lambda d, l, t: l + 1), jax.jit(lambda d, l: l + 1)
        row["dispatch_us"] = {
            name: host_time_us(call)
            for name, call in {
                "encode": lambda: bb.encode(d_dev, l_dev, tables, max_tokens=L, check_lengths=False),
                "encode_checked": lambda: bb.encode(d_dev, l_dev, tables, max_tokens=L),
                "jitted_encode": lambda: enc(d_dev, l_dev, tables, L),
                "trivial_same_operands": lambda: trivial_same(d_dev, l_dev, tables),
                "trivial_two_operands": lambda: trivial_two(d_dev, l_dev),
            }.items()
        }
        for name, fn in pieces.items():
            try:
                row[name] = measure(fn, target_s=0.3, max_reps=100)["s"]
            except Exception as e:  # noqa: BLE001
                row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        # strs as they come (no UTF-8 form made yet: harness.fresh_copies), packed and whole
        row["pack_fresh_s"] = measure_fresh(lambda t: bb.pack_strings(t, max_len=L), texts)["s"]
        if staging.available(dev):
            row["api_fresh_s"] = measure_fresh(api, texts)["s"]
            row["api_fresh_MBps"] = total / row["api_fresh_s"] / 1e6
        for name, fn in paths.items():
            try:
                row[name + "_equal"] = bool(np.array_equal(np.asarray(fn()), ref))
                s = measure(fn, target_s=0.5, max_reps=100)["s"]
                row[name + "_s"], row[name + "_MBps"] = s, total / s / 1e6
            except Exception as e:  # noqa: BLE001
                row[name + "_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        try:
            got = [np.asarray(x) for x in stream_api()]
            row["stream_api_equal"] = all(np.array_equal(g, r) for g, r in zip(got, stream_refs))
            s = measure(stream_api, target_s=1.0, max_reps=30)["s"] / n_stream
            mean_bytes = sum(len(x.encode()) for t in stream_texts for x in t) / n_stream
            row["stream_api_s"], row["stream_api_MBps"] = s, mean_bytes / s / 1e6
        except Exception as e:  # noqa: BLE001
            row["stream_api_error"] = f"{type(e).__name__}: {str(e)[:200]}"
        results["cells"].append(row)
        print(
            json.dumps({k: (round(v * 1e6) if k.endswith("_s") else v) for k, v in row.items()}), flush=True
        )

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "host_path.json").write_text(json.dumps(results, indent=1))
    print(f"wrote {out / 'host_path.json'}")


if __name__ == "__main__":
    main()
