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
(kernels of the executable that are not the encode's: XLA's fusions); host_us (the host's time
to dispatch one encode, without the sync, timed on a burst without the profiler, which slows the
host: idle_us reads high), and from the traced burst the host's spans per encode: host_jit_us
(the jitted call's whole dispatch), host_execute_us (the executable's run) and host_handler_us
(the encode's own thunk: the FFI handler and its launches). Needs a GPU; writes
DIR/timeline.json.
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


def load_trace(trace_dir: str):
    """The profile jax.profiler.trace wrote under trace_dir (jax.profiler.ProfileData)."""
    paths = glob.glob(os.path.join(trace_dir, "**", "*.xplane.pb"), recursive=True)
    if not paths:
        raise RuntimeError(f"no profile written under {trace_dir}")
    return jax.profiler.ProfileData.from_file(paths[0])


def kernel_events(profile) -> list[tuple[int, int, str]]:
    """(start_ns, end_ns, name) of every event on the GPU's stream lines that ran our kernels."""
    events = []
    for plane in profile.planes:
        if not plane.name.startswith("/device:GPU"):
            continue
        for line in plane.lines:
            evs = [(e.start_ns, e.start_ns + e.duration_ns, e.name) for e in line.events]
            if any(any(k in name for k in OURS) for _, _, name in evs):
                events.extend(evs)
    return sorted(events)


# The host's spans per call (the /host:CPU plane): the jitted function's whole dispatch, the
# executable's run (XLA's thunks), and the encode's own thunk (the FFI handler: its launches).
HOST_SPANS = {
    "host_jit_us": lambda n: n.startswith("PjitFunction"),
    "host_execute_us": lambda n: n.endswith("ExecuteHelperOnSingleDevice"),
    "host_handler_us": lambda n: n.startswith(("ffi_call", "custom-call")),
}


def host_spans(profile) -> dict[str, list[float]]:
    """Each HOST_SPANS entry's event durations (us) on the host's plane, in order, the outermost
    only (the jitted call's dispatch shows as two nested events)."""
    out = {k: [] for k in HOST_SPANS}
    for plane in profile.planes:
        if plane.name != "/host:CPU":
            continue
        for line in plane.lines:
            ends = dict.fromkeys(HOST_SPANS, float("-inf"))
            for e in sorted(line.events, key=lambda e: e.start_ns):
                for key, match in HOST_SPANS.items():
                    if match(e.name) and e.start_ns >= ends[key]:
                        out[key].append(e.duration_ns / 1e3)
                        ends[key] = e.start_ns + e.duration_ns
    return out


def union_ns(spans: list[tuple[float, float]]) -> float:
    """The time some span covers (overlaps counted once)."""
    total, end = 0.0, float("-inf")
    for s, e in sorted(spans):
        if e > end:
            total += e - max(s, end)
            end = e
    return total


def per_call(events: list[tuple[int, int, str]], encodes_per_call: int) -> dict:
    """Medians per encode over the calls of a burst (a call starts at its first piece kernel)."""
    starts = [s for s, _, name in events if "piece_kernel" in name][::encodes_per_call]
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


def run_burst(f, args, calls: int) -> tuple[float, list, dict]:
    """`calls` calls dispatched back to back, once without the profiler (the host's dispatch time
    per call), then under it: (host_s, kernel events, host spans)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        out = f(*args)
    host = (time.perf_counter() - t0) / calls
    jax.block_until_ready(out)
    trace = tempfile.mkdtemp(prefix="bbpe_timeline_")
    with jax.profiler.trace(trace):
        for _ in range(calls):
            out = f(*args)
        jax.block_until_ready(out)
    profile = load_trace(trace)
    return host, kernel_events(profile), host_spans(profile)


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
                host, events, spans = run_burst(f, (data, lengths), args.calls)
            finally:
                os.environ.pop("BLOCKBPE_PIECE_FILL", None)
            row = {"vocabulary": args.vocab, "batch": batch, "bytes": length, "way": way}
            row.update(per_call(events, chain))
            row["host_us"] = round(host * 1e6 / chain, 2)
            for key, durations in spans.items():  # (per encode: a chain's executable runs `chain`)
                per = durations[SKIP_CALLS:] or durations
                if per:
                    row[key] = round(statistics.median(per) / (1 if key == "host_handler_us" else chain), 2)
            if row.get("period_us"):
                row["GBps"] = round(int(lengths.sum()) / (row["period_us"] * 1e-6) / 1e9, 2)
            rows.append(row)
            print(json.dumps(row), flush=True)
    if args.out:
        write_report(args.out, "timeline.json", rows, device=str(gpu[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
