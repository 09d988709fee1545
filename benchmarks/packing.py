"""Throughput of on-device packing (`blockbpe_jax.pack`), rows/s on the default device.

    python3 benchmarks/packing.py [--docs 1024] [--width 4096] [--seq-len 2048] [--rows 1024] [--out DIR]

Input: `--docs` documents as `encode` would return them (ids int32[docs, width], counts drawn
log-uniform in [1, 2 * width], so some rows count as cut by encode), already on the device.
Timed: one jitted `pack` call until its outputs are ready, median of `--reps` after warm-up,
for each method. Each run's output is checked against `pack_reference` once (`--no-check` skips
it: the reference is plain Python loops, slow for big batches). Prints one JSON line per method;
--out DIR also writes them to DIR/packing.json.
"""

import argparse
import json
import pathlib
import statistics
import time

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax.ops.packing import pack_reference


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", type=int, default=1024)
    parser.add_argument("--width", type=int, default=4096, help="T: ids per encoded row")
    parser.add_argument("--seq-len", type=int, default=2048)
    parser.add_argument("--rows", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--methods", default="first_fit,sequential")
    parser.add_argument("--no-check", action="store_true")
    parser.add_argument("--out", type=pathlib.Path)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 100_000, (args.docs, args.width), dtype=np.int32)
    counts = np.exp(rng.uniform(0, np.log(2 * args.width), args.docs)).astype(np.int32)
    device = jax.devices()[0]
    results = []
    d_ids, d_counts = jax.device_put(ids, device), jax.device_put(counts, device)
    for method in args.methods.split(","):
        opts = dict(seq_len=args.seq_len, rows=args.rows, bos_id=1, eos_id=2, method=method)
        fn = jax.jit(lambda i, c: bb.pack(i, c, **opts))
        out = jax.block_until_ready(fn(d_ids, d_counts))
        if not args.no_check:
            ref = pack_reference(ids, counts, **opts)
            for got, want in zip(out[:3], ref[:3]):
                np.testing.assert_array_equal(np.asarray(got), want)
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            jax.block_until_ready(fn(d_ids, d_counts))
            times.append(time.perf_counter() - t0)
        t = statistics.median(times)
        rep = out.report
        results.append(
            dict(
                device=str(device),
                device_kind=device.device_kind,
                method=method,
                docs=args.docs,
                width=args.width,
                seq_len=args.seq_len,
                rows=args.rows,
                median_s=t,
                rows_per_s=args.rows / t,
                docs_per_s=args.docs / t,
                tokens_per_s=int(rep.tokens_packed) / t,
                tokens_packed=int(rep.tokens_packed),
                tokens_dropped=int(rep.tokens_dropped),
                rows_used=int(rep.rows_used),
                checked=not args.no_check,
            )
        )
        print(json.dumps(results[-1]), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "packing.json").write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
