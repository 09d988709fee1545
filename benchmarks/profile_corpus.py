#!/usr/bin/env python3
"""Where the corpus job's time goes: `Tokenizer.encode_files` on a mixed JSONL corpus (the one
benchmarks/corpus_job.py builds), with every thread's stack sampled every few milliseconds
(py-spy is not on the GPU machine). Prints, per thread, the innermost frames of ours (and the
library call they wait in) that the samples landed in most.

    python3 benchmarks/profile_corpus.py [--mb 200 | --long-docs 120] [--interval-ms 2] [--out DIR]
        [--window-mb 32] [--batch-mb 4] [--pack-width 16384] [--call-times [--sync-calls]] [--xla-cache DIR]
        [--in-memory] [--timeline [python]]

--in-memory profiles `encode_files_to_arrays` (the ids left in memory, no shards written).

--xla-cache DIR turns on JAX's persistent compilation cache there, as the CLI does: run twice,
the second process's "cold" run is what a second run of the command pays in its job (executables
loaded, not compiled).

--timeline adds a third run, warm, under JAX's profiler (a perfetto trace: each host thread's
PJRT events and each GPU stream's kernels and copies; `--timeline python` also every Python
call, which slows the job): printed per thread and stream, busy time (the union of its events)
and the events with the most time, nested ones counted in their parents too. The threads whose
busy time is near the run's are the ones setting its pace.

--call-times times each window FFI call's dispatch (which returns before the device has run it)
by the calls in its plan; with --sync-calls each call also waits for its result, so
that the times are the device's (the pipeline then no longer overlaps: its MB/s means nothing).
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent))

import corpus_job  # noqa: E402
import jax  # noqa: E402

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax.testing import data_dir  # noqa: E402
from blockbpe_jax.corpus.plan import DEFAULT_PACK_WIDTH  # noqa: E402


class CompileClock:
    """JAX's compile events while a run lasts: how many executables were built and the seconds
    spent tracing, lowering and compiling them (the cold run's extra cost)."""

    EVENTS = {
        "/jax/core/compile/jaxpr_trace_duration": "trace",
        "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
        "/jax/core/compile/backend_compile_duration": "compile",
        "/jax/compilation_cache/cache_retrieval_time_sec": "cache load",
    }

    def __init__(self):
        self.active = False
        self.counts = collections.Counter()
        self.seconds = collections.Counter()
        jax.monitoring.register_event_duration_secs_listener(self._event)

    def _event(self, name, secs, **_):
        if self.active and name in self.EVENTS:
            self.counts[self.EVENTS[name]] += 1
            self.seconds[self.EVENTS[name]] += secs

    def take(self) -> dict:
        out = {
            k: {"count": self.counts[k], "seconds": round(self.seconds[k], 3)} for k in self.EVENTS.values()
        }
        self.counts.clear()
        self.seconds.clear()
        return out


class Sampler(threading.Thread):
    """Counts, per thread, the (our frame, innermost frame) pair of each sample."""

    def __init__(self, interval_s: float):
        super().__init__(daemon=True)
        self.interval_s = interval_s
        self.counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        self.samples = 0
        self.stop = threading.Event()

    def run(self) -> None:
        names = {}
        while not self.stop.wait(self.interval_s):
            names.update({t.ident: t.name for t in threading.enumerate()})
            self.samples += 1
            for ident, frame in sys._current_frames().items():
                if ident == self.ident:
                    continue
                stack = traceback.extract_stack(frame)
                inner = stack[-1]
                ours = next((f for f in reversed(stack) if "blockbpe_jax" in f.filename), None)
                key = (
                    f"{Path(ours.filename).name}:{ours.lineno} {ours.name}" if ours else "-"
                ) + f"  <- {Path(inner.filename).name}:{inner.lineno} {inner.name}"
                self.counts[names.get(ident, str(ident))][key] += 1


class CallClock:
    """Seconds in each window FFI call of the job (corpus.device.CompiledWindows.__call__), by
    (calls in its plan, "p": packed rows): the dispatch alone, or with sync the call until its
    result is ready."""

    def __init__(self, sync: bool):
        from blockbpe_jax.corpus import device as window_device

        self.sync, self.active = sync, False
        self.times: dict = collections.defaultdict(list)
        original = window_device.CompiledWindows.__call__

        def timed(windows, flat, table, raw, calls, workspace):
            t = time.perf_counter()
            out = original(windows, flat, table, raw, calls, workspace)
            if self.sync:
                out.block_until_ready()
            if self.active:
                packed = "p" if windows.sep_id >= 0 else ""
                self.times[(len(calls), f"calls{packed}")].append(time.perf_counter() - t)
            return out

        window_device.CompiledWindows.__call__ = timed

    def take(self) -> dict:
        import numpy as np

        every = np.array([x for v in self.times.values() for x in v])
        out = {
            "sync": self.sync,
            "calls": int(every.size),
            "seconds": round(float(every.sum()), 4) if every.size else 0.0,
            "median_us": round(float(np.median(every)) * 1e6, 1) if every.size else 0.0,
            "p90_us": round(float(np.percentile(every, 90)) * 1e6, 1) if every.size else 0.0,
            "by_shape": sorted(
                (
                    {
                        "rows": r,
                        "width": w,
                        "calls": len(v),
                        "seconds": round(sum(v), 4),
                        "median_us": round(float(np.median(v)) * 1e6, 1),
                    }
                    for (r, w), v in self.times.items()
                ),
                key=lambda d: -d["seconds"],
            ),
        }
        self.times.clear()
        return out


def timeline(run, top: int, python: bool) -> None:
    """Runs `run()` under JAX's profiler, writing a perfetto trace, and prints each thread's and
    GPU stream's busy time and heaviest events."""
    with tempfile.TemporaryDirectory() as directory:
        options = jax.profiler.ProfileOptions()
        options.python_tracer_level = int(python)
        jax.profiler.start_trace(directory, create_perfetto_trace=True, profiler_options=options)
        t = time.perf_counter()
        run()
        seconds = time.perf_counter() - t
        jax.profiler.stop_trace()
        (path,) = glob.glob(f"{directory}/**/perfetto_trace.json.gz", recursive=True)
        trace = json.load(gzip.open(path))
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    process = {e["pid"]: e["args"]["name"] for e in events if e.get("name") == "process_name"}
    by_thread = collections.defaultdict(list)
    for e in events:
        if e.get("ph") == "X":
            by_thread[(e["pid"], e.get("tid"))].append((e["ts"], e["ts"] + e.get("dur", 0), e["name"][:90]))
    print(f"timeline: {seconds:.3f} s")
    rows = []
    for key, spans in by_thread.items():
        busy, end = 0.0, float("-inf")
        for a, b, _ in sorted(spans):
            busy += max(0.0, b - max(a, end))
            end = max(end, b)
        rows.append((busy, key, spans))
    for busy, key, spans in sorted(rows, key=lambda r: -r[0])[:16]:
        heaviest = collections.Counter()
        for a, b, name in spans:
            heaviest[name] += b - a
        print(f"  [{process.get(key[0], key[0])} / {names.get(key, key[1])}] busy {busy / 1e3:.1f} ms")
        for name, us in heaviest.most_common(top):
            print(f"    {us / 1e3:9.1f} ms  {name}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=200)
    ap.add_argument(
        "--long-docs",
        type=int,
        default=0,
        help="N long documents (corpora.build_long) instead of --mb of mixed",
    )
    ap.add_argument("--interval-ms", type=float, default=2)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--window-mb", type=float, default=32, help="encode_files' window_bytes, in MiB")
    ap.add_argument("--batch-mb", type=float, default=4, help="encode_files' batch_bytes, in MiB")
    ap.add_argument(
        "--pack-width", type=int, default=DEFAULT_PACK_WIDTH, help="encode_files' pack_width (0: no packing)"
    )
    ap.add_argument("--in-memory", action="store_true", help="encode_files_to_arrays: no shards written")
    ap.add_argument("--call-times", action="store_true", help="time each encode call, by shape")
    ap.add_argument("--xla-cache", type=Path, help="JAX's persistent compilation cache in this directory")
    ap.add_argument("--sync-calls", action="store_true", help="with --call-times: wait for each call")
    ap.add_argument(
        "--timeline", nargs="?", const="host", choices=("host", "python"), help="a third run, traced"
    )
    args = ap.parse_args()
    if args.xla_cache:
        jax.config.update("jax_compilation_cache_dir", str(args.xla_cache))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    calls = CallClock(args.sync_calls) if args.call_times else None
    work = Path(tempfile.mkdtemp(prefix="profile_corpus_"))
    corpus = work / "corpus.jsonl"
    src = corpus_job.source_texts(data_dir())
    if args.long_docs:
        _, nbytes = corpus_job.build_long(corpus, src, args.long_docs)
    else:
        _, nbytes = corpus_job.build_mixed(corpus, src, int(args.mb * 1e6))
    tok = bb.Tokenizer.from_file(data_dir() / "vocab" / "tiktoken" / "cl100k_base.tiktoken")
    report = {
        "corpus": f"{args.long_docs} long documents" if args.long_docs else "mixed",
        "bytes": nbytes,
        "window_mb": args.window_mb,
        "batch_mb": args.batch_mb,
        "pack_width": args.pack_width,
        "in_memory": args.in_memory,
        "device": str(jax.devices()[0]),
        "runs": [],
    }
    clock = CompileClock()
    for run in ("cold", "warm"):
        sampler = Sampler(args.interval_ms / 1e3)
        sampler.start()
        clock.active = True
        if calls:
            calls.active = True
        t = time.perf_counter()
        options = dict(
            jsonl_field="text",
            window_bytes=int(args.window_mb * (1 << 20)),
            batch_bytes=int(args.batch_mb * (1 << 20)),
            pack_width=args.pack_width,
        )
        if args.in_memory:
            tok.encode_files_to_arrays([corpus], **options)
        else:
            tok.encode_files([corpus], work / f"out_{run}", **options)
        seconds = time.perf_counter() - t
        clock.active = False
        compiles = clock.take()
        call_times = calls.take() if calls else None
        sampler.stop.set()
        sampler.join()
        threads = {name: c.most_common(args.top) for name, c in sampler.counts.items()}
        report["runs"].append(
            {
                "run": run,
                "seconds": seconds,
                "MBps": nbytes / seconds / 1e6,
                "samples": sampler.samples,
                "compiles": compiles,
                "call_times": call_times,
                "threads": threads,
            }
        )
        print(f"{run}: {seconds:.2f} s, {nbytes / seconds / 1e6:.1f} MB/s, {sampler.samples} samples")
        print(
            "  compiles: "
            + ", ".join(f"{k} {v['count']} in {v['seconds']:.2f} s" for k, v in compiles.items())
        )
        if call_times:
            print(
                f"  encode calls{' (each waited for)' if call_times['sync'] else ''}: "
                f"{call_times['calls']} in {call_times['seconds']:.3f} s, median "
                f"{call_times['median_us']} us, p90 {call_times['p90_us']} us"
            )
            for d in call_times["by_shape"][: args.top]:
                print(
                    f"    {d['rows']:6d} x {d['width']:>6}: {d['calls']:4d} calls, {d['seconds']:.4f} s, "
                    f"median {d['median_us']} us"
                )
        for name, top in threads.items():
            print(f"  [{name}]")
            for key, n in top:
                print(f"    {n:6d}  {key}")
    if args.timeline:
        timeline(
            lambda: (
                tok.encode_files_to_arrays([corpus], **options)
                if args.in_memory
                else tok.encode_files([corpus], work / "out_traced", **options)
            ),
            args.top,
            args.timeline == "python",
        )
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "profile_corpus.json").write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
