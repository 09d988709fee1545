"""Where a device-resident encode's time goes when calls run back to back, from the GPU's own
timeline (jax.profiler's trace, CUPTI: kernels as they ran, overlaps included) rather than from
ncu, which runs every kernel alone (gpu_time.py).

    python3 benchmarks/timeline.py [--out DIR] [--shapes 1024:4096,1024:512,64:512] [--vocab cl100k]
        [--calls 32]

For each shape (War and Peace excerpts, cl100k), three ways of calling, each warmed first, then
`--calls` calls dispatched back to back under the profiler and one sync:
  single   one encode an executable (jit), as a training step calls it;
  chain    the executable of families.py's and run_all.py's "device" column (harness.Ours.fn,
           CHAIN encodes, each call's lengths depending on the previous call's counts);
  nofill   single, with the fill launch off (BLOCKBPE_PIECE_FILL=0: the handler's test hook;
           rows left pending keep count -3, so its ids are not checked: timing only).
Per encode, medians over the calls after the first few: period_us (from one call's first kernel
to the next call's), busy_us (the part of it some kernel ran: the GPU's own time), idle_us (the
rest: the GPU waiting for the host), piece_us and fill_us (the two launches of an encode; the
fill launch starts early and waits for the piece kernel, so its span overlaps), other_us
(kernels of the executable that are not the encode's: XLA's fusions), and host_us (the host's
time to dispatch one encode, without the sync). The profiler slows the host's dispatch, so
host_us and idle_us read high; the kernels' times hold. Needs a GPU; writes DIR/timeline.json.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import statistics
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import jax  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax import testing  # noqa: E402
from harness import Ours, excerpts, write_report  # noqa: E402

OURS = ("piece_kernel", "encode_kernel", "encode_chars_kernel")
SKIP_CALLS = 4  # the first calls of a burst wait on the host's first dispatches


def kernel_events(trace_dir: str) -> list[tuple[int, int, str]]:
    """(start_ns, end_ns, name) of every event on the GPU's stream lines that ran our kernels."""
    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"no profile written under {trace_dir}")
    events = []
    for plane in jax.profiler.ProfileData.from_file(paths[0]).planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            evs = [(e.start_ns, e.start_ns + e.duration_ns, e.name) for e in line.events]
            if any(any(k in name for k in OURS) for _, _, name in evs):
                events.extend(evs)
    return sorted(events)


def union_ns(spans: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def per_call(events: list[tuple[int, int, str]], encodes_per_call: int) -> dict:
    """Medians per encode over the calls of a burst (a call starts at its first piece kernel)."""
    starts = [s for s, _, name in events if "piece_kernel" in name]
    starts = starts[:: max(1, encodes_per_call)] if encodes_per_call > 1 else starts
    rows = []
    for a, b in zip(starts[SKIP_CALLS:], starts[SKIP_CALLS + 1 :]):
        inside = [(s, min(e, b), name) for s, e, name in events if a <= s < b]
        busy = union_ns([(s, e) for s, e, _ in inside])
        ours = [(e - s, name) for s, e, name in inside if any(k in name for k in OURS)]
        rows.append(
            {
                "period_us": (b - a) / 1e3,
                "busy_us": busy / 1e3,
                "piece_us": sum(d for d, n in ours if "piece_kernel" in n) / 1e3,
                "fill_us": sum(d for d, n in ours if "piece_kernel" not in n) / 1e3,
                "other_us": sum(e - s for s, e, n in inside if not any(k in n for k in OURS)) / 1e3,
            }
        )
    if not rows:
        return {"calls_seen": len(starts)}
    out = {k: round(statistics.median(r[k] for r in rows) / encodes_per_call, 2) for k in rows[0]}
    out["idle_us"] = round(out["period_us"] - out["busy_us"], 2)
    out["calls_seen"] = len(starts)
    return out


def run_burst(f, args, calls: int) -> tuple[float, list]:
    """`calls` calls dispatched back to back under the profiler; the host's dispatch time per call."""
    trace = tempfile.mkdtemp(prefix="bbpe_timeline_")
    with jax.profiler.trace(trace):
        t0 = time.perf_counter()
        for _ in range(calls):
            out = f(*args)
        host = (time.perf_counter() - t0) / calls
        jax.block_until_ready(out)
    return host, kernel_events(trace)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--shapes", default="1024:4096,1024:512,64:512")
    ap.add_argument("--vocab", default="cl100k")
    ap.add_argument("--calls", type=int, default=32)
    args = ap.parse_args(argv)
    gpu = [d for d in jax.devices() if d.platform == "gpu"]
    if not gpu:
        print("timeline.py: no GPU (the timeline is the GPU's)", file=sys.stderr)
        return 2
    root = testing.data_dir()
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[args.vocab][0])
    raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()
    ours = Ours(bb, tok, gpu[0], args.vocab)
    rows = []
    for shape in args.shapes.split(","):
        batch, length = (int(x) for x in shape.split(":"))
        data, lengths = ours.put(*bb.pack_strings(excerpts(raw, batch, length), max_len=length))
        for way in ("single", "chain", "nofill"):
            chain = Ours.CHAIN if way == "chain" else 1
            f = ours.fn("exact", 256, length, chain=chain)
            if way == "nofill":
                os.environ["BLOCKBPE_PIECE_FILL"] = "0"
            try:
                for _ in range(3):
                    jax.block_until_ready(f(data, lengths))
                host, events = run_burst(f, (data, lengths), args.calls)
            finally:
                os.environ.pop("BLOCKBPE_PIECE_FILL", None)
            row = {"vocabulary": args.vocab, "batch": batch, "bytes": length, "way": way}
            row.update(per_call(events, chain))
            row["host_us"] = round(host * 1e6 / chain, 2)
            if row.get("period_us"):
                row["GBps"] = round(int(lengths.sum()) / (row["period_us"] * 1e-6) / 1e9, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        write_report(args.out, "timeline.json", rows, device=str(gpu[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
