#!/usr/bin/env python3
"""One string per call on the device, A/B of the CUDA handler's hook BLOCKBPE_WARP_SPANS in one
process, calls interleaved (so that the machine's drift hits both sides alike).

    python3 benchmarks/single_string_ab.py --out FILE [--hooks 1,0] [--sizes 256,1K,2K]
        [--cases cjk,prose] [--reps 15]

Hook 1 is the build's default; hook 0 merges no piece in warp sub-spans (ffi/cuda/sub_spans.cuh):
spans of huge pieces by their whole block, and the long pieces of a call of few rows by the
block passes at the call's block size. cl100k, exact mode, the cases of single_string.py. Per
case and size: the median of --reps calls of each hook (the jitted `encode` of one row already on
the device, as single_string.py's ours_device), tiktoken's `encode_ordinary`, and whether every
hook's ids equal tiktoken's. Each hook gets its own executable (max_tokens differs by one), so a
launch captured once keeps its hook.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

from single_string import CASES, cl100k_setup, make_case, parse_sizes  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, help="the table (text) goes here")
    ap.add_argument("--hooks", default="1,0")
    ap.add_argument("--sizes", default="100,256,512,1K,2K,4K")
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--reps", type=int, default=15)
    args = ap.parse_args()

    import jax

    import blockbpe_jax as bb
    from blockbpe_jax.ops import primitive as ops

    hooks = args.hooks.split(",")
    tok, enc, prose, dev, tables = cl100k_setup()
    fns: dict = {}

    def fn(width: int, k: int):
        if (width, k) not in fns:
            fns[width, k] = jax.jit(
                lambda d, n, t: ops.encode(d, n, t, max_tokens=width + k, check_lengths=False)
            )
        return fns[width, k]

    lines = [
        f"device: {dev.device_kind}; medians of {args.reps} interleaved calls in us (MB/s)",
        "case | size | "
        + " | ".join(f"hook {h}" for h in hooks)
        + " | tiktoken | "
        + " | ".join(f"hook {h} / tiktoken" for h in hooks)
        + " | ids equal",
    ]
    for case in args.cases.split(","):
        for n in parse_sizes(args.sizes):
            text = make_case(case, n, prose)
            nbytes = len(text.encode())
            data, lengths = bb.pack_strings([text])
            d, ln = jax.device_put(data, dev), jax.device_put(lengths, dev)
            ref = enc.encode_ordinary(text)
            times: dict = {h: [] for h in hooks}
            equal = True
            for rep in range(args.reps + 1):  # the first round compiles and checks
                for k, h in enumerate(hooks):
                    os.environ["BLOCKBPE_WARP_SPANS"] = h
                    f = fn(data.shape[1], k)
                    t0 = time.perf_counter()
                    ids, counts = jax.block_until_ready(f(d, ln, tables))
                    dt = time.perf_counter() - t0
                    if rep == 0:
                        got = np.asarray(ids)[0, : int(np.asarray(counts)[0])]
                        equal &= len(got) == len(ref) and bool(np.array_equal(got, ref))
                    else:
                        times[h].append(dt)
            tk = []
            for _ in range(args.reps):
                t0 = time.perf_counter()
                enc.encode_ordinary(text)
                tk.append(time.perf_counter() - t0)
            med = {h: statistics.median(v) for h, v in times.items()}
            t_tk = statistics.median(tk)
            cell = lambda s: f"{s * 1e6:.0f} ({nbytes / s / 1e6:.1f})"  # noqa: E731
            lines.append(
                f"{case} | {n} | "
                + " | ".join(cell(med[h]) for h in hooks)
                + f" | {cell(t_tk)} | "
                + " | ".join(f"{t_tk / med[h]:.2f}" for h in hooks)
                + f" | {equal}"
            )
            print(lines[-1], flush=True)
    os.environ.pop("BLOCKBPE_WARP_SPANS", None)
    Path(args.out).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
