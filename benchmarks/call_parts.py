#!/usr/bin/env python3
"""Where one end-to-end batch and one encode call spend their time on the host (the profile
behind docs/performance.md's "10x end to end" and "100 us per call" gaps).

    python3 benchmarks/call_parts.py --out DIR [--shapes 1024x4096,1024x512,64x512] [--reps 30]

cl100k, War and Peace excerpts, medians of --reps after a warm-up, microseconds:
  batch      (a CUDA GPU only) one `Tokenizer.encode_batch` taken apart: `stage` (packing into
             the pinned staging buffer, its copy started; `staging.stage_strings`), `copy_wait`
             (until the copy has landed), `dispatch` (the jitted encode returns), `gpu_sync`
             (until the ids are ready); `encode_batch` whole; `pack_numpy` (`pack_strings` into
             NumPy, for comparison)
  dispatch   host time of one call with the GPU idle before it: `ops.encode`, its jitted call
             with the operands already gathered, a trivial jitted call with the same operands,
             and with two; `ops.encode` with its sync (on the CPU backend a call runs before it
             returns: there these are the encode's whole times)
Run it twice with BLOCKBPE_WORKER_POOL=1 and =0 to see the host worker pool's share of the
packing. Writes DIR/call_parts.json and prints one line per shape and part.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import jax  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import native, ops, staging  # noqa: E402
from blockbpe_jax.cli.bench import make_excerpts  # noqa: E402
from blockbpe_jax.testing import data_dir  # noqa: E402


def median_us(samples: list[float]) -> float:
    return round(statistics.median(samples) * 1e6, 1)


def batch_parts(tok, tables, texts: list[str], width: int, reps: int) -> dict:
    """One encode_batch's steps, timed one after the other (the GPU idle at each start)."""
    device = jax.devices()[0]
    call = ops._encode_call(*ops._attributes(tables, "exact", 0, False), 256, width, False)
    operands = tables.operands()
    for _ in range(5):
        tok.encode_batch(texts, max_len=width, max_tokens=width).ids.block_until_ready()
    parts: dict[str, list[float]] = {
        k: [] for k in ("stage", "copy_wait", "dispatch", "gpu_sync", "encode_batch", "pack_numpy")
    }
    for _ in range(reps):
        t0 = time.perf_counter()
        staged = staging.stage_strings(texts, max_len=width, device=device)
        t1 = time.perf_counter()
        data, lengths = staged.data, staged.lengths
        t2 = time.perf_counter()
        ids, counts = call(data, lengths, *operands)
        staged.release(counts)
        t3 = time.perf_counter()
        ids.block_until_ready()
        t4 = time.perf_counter()
        for key, a, b in (
            ("stage", t0, t1),
            ("copy_wait", t1, t2),
            ("dispatch", t2, t3),
            ("gpu_sync", t3, t4),
        ):
            parts[key].append(b - a)
        t = time.perf_counter()
        tok.encode_batch(texts, max_len=width, max_tokens=width).ids.block_until_ready()
        parts["encode_batch"].append(time.perf_counter() - t)
        t = time.perf_counter()
        native.cpu.pack_strings(texts, width)
        parts["pack_numpy"].append(time.perf_counter() - t)
    return {k: median_us(v) for k, v in parts.items()}


def dispatch_parts(tables, data, lengths, width: int, reps: int) -> dict:
    """Host time of one call (it returns before the device has run it), the device idle first."""
    call = ops._encode_call(*ops._attributes(tables, "exact", 0, False), 256, width, False)
    operands = tables.operands()
    trivial_same = jax.jit(lambda d, n, *t: n + 1)
    trivial_two = jax.jit(lambda d, n: n + 1)
    cases = {
        "ops.encode": lambda: ops.encode(data, lengths, tables, max_tokens=width, check_lengths=False),
        "ops.encode_checked": lambda: ops.encode(data, lengths, tables, max_tokens=width),
        "jitted_call": lambda: call(data, lengths, *operands),
        "trivial_same_operands": lambda: trivial_same(data, lengths, *operands),
        "trivial_two_operands": lambda: trivial_two(data, lengths),
    }
    out = {}
    for name, fn in cases.items():
        samples = []
        for k in range(reps + 5):
            t = time.perf_counter()
            result = fn()
            if k >= 5:
                samples.append(time.perf_counter() - t)
            jax.block_until_ready(result)
        out[name] = median_us(samples)
    samples = []
    for _ in range(reps):
        t = time.perf_counter()
        jax.block_until_ready(ops.encode(data, lengths, tables, max_tokens=width, check_lengths=False))
        samples.append(time.perf_counter() - t)
    out["ops.encode_with_sync"] = median_us(samples)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--shapes", default="1024x4096,1024x512,64x512")
    ap.add_argument("--reps", type=int, default=30)
    args = ap.parse_args()
    tok = bb.Tokenizer.from_file(data_dir() / "vocab" / "tiktoken" / "cl100k_base.tiktoken")
    device = jax.devices()[0]
    tables = tok.tables("none", device)
    raw = (data_dir() / "corpus" / "war_and_peace_en.txt").read_bytes()
    staged_path = staging.available(device)
    report = {"device": str(device), "staged_path": staged_path, "reps": args.reps, "shapes": {}}
    for shape in args.shapes.split(","):
        batch, width = (int(v) for v in shape.split("x"))
        rows = make_excerpts(raw, batch, width)
        data, lengths = bb.pack_strings(rows, max_len=width)
        data, lengths = jax.device_put(data, device), jax.device_put(lengths, device)
        entry = {"dispatch": dispatch_parts(tables, data, lengths, width, args.reps)}
        if staged_path:
            entry["batch"] = batch_parts(tok, tables, [r.decode() for r in rows], width, args.reps)
        report["shapes"][shape] = entry
        for part, values in entry.items():
            print(
                f"{shape} {part}: " + ", ".join(f"{k} {v:.0f}" for k, v in values.items()) + " us", flush=True
            )
    if not staged_path:
        print("batch: skipped (no CUDA GPU with the staging module: encode_batch has no staged path here)")
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "call_parts.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
