#!/usr/bin/env python3
"""Which stage bounds the corpus job: `encode_files` on the mixed JSONL corpus (cold, then
warm), its reading alone (`documents.iter_windows`: blocks read and split into documents),
and the job on windows read beforehand (no reading meanwhile), with the flat writer, the
in-memory one (`encode_files_to_arrays`'s) and a writer that drops the ids. If the job takes about reading + encoding, the two do not overlap.
(Windows read beforehand are plain: the packer copies them, where the whole job's reader joins
each block straight into the engine's buffers, `corpus.engine.JoinInto`.)
Beside each run, how late a thread that sleeps 1 ms wakes up (p50 / p99 / the sum of the
lateness): beyond the OS's own jitter that is time spent waiting for the GIL, so a stage that
holds it for long shows there; and the CPU time the process's threads took meanwhile, by
thread (Python threads by name, native ones by their OS name: the worker pool's as `python3`),
sampled every 20 ms from /proc (Linux; a thread that ended loses its last sample's time).

    python3 benchmarks/corpus_stages.py [--mb 300] [--pack-width 16384] [--reps 2] [--top 6]
        [--corpus long] [--settings 5:16,0.5:16,5:8:65536:16] [--in-memory] [--beside 4,8]

`--corpus long`: the long documents of benchmarks/corpus_job.py (120 of 0.1-5 MB) instead of
`--mb` of the mixed corpus. `--settings`: after the stages, `encode_files` warm again under each
`SWITCH_MS:THREADS[:PACK_WIDTH[:BATCH_MB[:WINDOW_MB]]]` (the interpreter's switch interval,
`sys.setswitchinterval`; the reading threads; `pack_width`; `batch_bytes` and `window_bytes` in
MiB), alternated `--reps` times: whether threads waiting to take the GIL back, the reading threads taking every
core, or the calls' shapes set the pace (`--in-memory`: those runs leave the ids in memory).
`--beside`: the job on windows read beforehand (in-memory writer) again beside a second reader
(a thread reading the file over and over), then beside N busy loops and N processes copying
256 MiB arrays (other processes: no share of this one's GIL), for each N: what the job loses
to the reader's cores (the loops) or its memory traffic (the copies).
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import blockbpe_jax as bb  # noqa: E402
from blockbpe_jax.corpus import job as corpus, documents  # noqa: E402
from blockbpe_jax.corpus.shards.flat import DEFAULT_SHARD_TOKENS, ArraysWriter, FlatWriter  # noqa: E402
from blockbpe_jax.testing import data_dir  # noqa: E402
from corpora import build_long, build_mixed, source_texts  # noqa: E402


class GilLatency(threading.Thread):
    """Wakes up every millisecond and records how late it woke (seconds). After a wake-up more
    than LATE_MS late it notes where the other threads are (their innermost frame of this
    project, or the innermost one; threads waiting on a Python lock or queue left out): the
    thread that held the GIL has only just let it go, so the places that come up most often
    point at it."""

    LATE_MS = 2.0
    WAITING = {"threading.py", "queue.py", "thread.py"}  # where a thread waits for another

    def __init__(self):
        super().__init__(daemon=True, name="sampling wake-ups")
        self.late: list[float] = []
        self.where: collections.Counter = collections.Counter()
        self.stop = threading.Event()

    def run(self) -> None:
        names = {}
        while not self.stop.is_set():
            t = time.perf_counter()
            time.sleep(0.001)
            late = time.perf_counter() - t - 0.001
            self.late.append(late)
            if late * 1e3 > self.LATE_MS:
                names.update({th.ident: th.name for th in threading.enumerate()})
                for ident, frame in sys._current_frames().items():
                    if ident == self.ident:
                        continue
                    stack = traceback.extract_stack(frame)
                    if Path(stack[-1].filename).name in self.WAITING:
                        continue  # (blocked on a Python lock or queue: the GIL let go)
                    ours = next((f for f in reversed(stack) if "blockbpe_jax" in f.filename), stack[-1])
                    self.where[
                        f"{names.get(ident, ident)}: {Path(ours.filename).name}:{ours.lineno} {ours.name}"
                    ] += 1

    def summary(self, top: int = 0) -> str:
        self.stop.set()
        self.join()
        late = sorted(self.late) or [0.0]
        pick = lambda q: late[min(len(late) - 1, int(q * len(late)))] * 1e3  # noqa: E731
        text = f"late wake-ups p50 {pick(0.5):.2f} p99 {pick(0.99):.2f} ms, sum {sum(late):.3f} s"
        for place, n in self.where.most_common(top):
            text += f"\n      {n:4d}  {place}"
        return text


class ThreadCpu(threading.Thread):
    """The CPU seconds each kind of thread of this process takes from its start to `summary`:
    every 20 ms each thread's user + system time so far (/proc/self/task/TID/stat), the last
    value kept per thread; grouped by the Python thread's name (digits dropped: a pool's
    threads together) or else the OS's name for the thread."""

    def __init__(self):
        super().__init__(daemon=True, name="sampling CPU times")
        self.stop = threading.Event()
        self.names: dict[int, str] = {}
        self.first = self.sample()
        self.last = dict(self.first)
        self.start_times = os.times()

    def sample(self) -> dict[int, int]:
        python = {t.native_id: t.name for t in threading.enumerate()}
        ticks = {}
        for tid in map(int, os.listdir("/proc/self/task")):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()  # (after the name: state first)
                if tid not in self.names:
                    with open(f"/proc/self/task/{tid}/comm") as f:
                        self.names[tid] = re.sub(r"[-_]?\d+", "", python.get(tid) or f.read().strip())
            except OSError:  # (ended meanwhile)
                continue
            ticks[tid] = int(fields[11]) + int(fields[12])  # utime + stime
        return ticks

    def run(self) -> None:
        while not self.stop.wait(0.02):
            self.last.update(self.sample())

    def summary(self, wall: float) -> str:
        self.stop.set()
        self.join()
        self.last.update(self.sample())
        end = os.times()
        total = end.user + end.system - self.start_times.user - self.start_times.system
        by = collections.Counter()
        for tid, ticks in self.last.items():
            by[self.names.get(tid, "?")] += (ticks - self.first.get(tid, 0)) / os.sysconf("SC_CLK_TCK")
        parts = ", ".join(f"{name} {s:.2f}" for name, s in by.most_common() if s >= 0.005)
        return f"cpu {total:.2f} s = {total / wall:.1f} cores: {parts}"


class DropWriter:
    def add(self, ids, counts, window) -> None:
        pass


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=float, default=300)
    ap.add_argument("--pack-width", type=int, default=corpus.DEFAULT_PACK_WIDTH)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--top", type=int, default=6, help="places noted after late wake-ups, per run")
    ap.add_argument("--corpus", choices=("mixed", "long"), default="mixed")
    ap.add_argument(
        "--settings", default="", help="SWITCH_MS:THREADS[:PACK_WIDTH[:BATCH_MB[:WINDOW_MB]]],..."
    )
    ap.add_argument("--in-memory", action="store_true", help="--settings' runs: encode_files_to_arrays")
    ap.add_argument("--beside", default="", help="N,...: the preread job beside N busy loops / N copies")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="corpus_stages_"))
    src = work / "mixed.jsonl"
    if args.corpus == "long":
        _, nbytes = build_long(src, source_texts(data_dir()), 120)
    else:
        _, nbytes = build_mixed(src, source_texts(data_dir()), int(args.mb * 1e6))
    tok = bb.Tokenizer.from_file(data_dir() / "vocab/tiktoken/cl100k_base.tiktoken")
    runs = iter(range(1 << 30))

    def report(what: str, run) -> None:
        gil, cpu = GilLatency(), ThreadCpu()
        gil.start()
        cpu.start()
        t = time.perf_counter()
        run()
        s = time.perf_counter() - t
        print(f"{what:44s} {s:6.3f} s {nbytes / s / 1e6:7.1f} MB/s  ({gil.summary(args.top)})", flush=True)
        print(f"      {cpu.summary(s)}", flush=True)

    report("idle (the wake-up jitter alone)", lambda: time.sleep(0.3))

    def files(
        pack_width: int = args.pack_width,
        batch_mb: float = 4,
        in_memory: bool = False,
        window_mb: float = documents.WINDOW_BYTES / (1 << 20),
    ) -> None:
        options = dict(
            jsonl_field="text",
            pack_width=pack_width,
            batch_bytes=int(batch_mb * (1 << 20)),
            window_bytes=int(window_mb * (1 << 20)),
        )
        if in_memory:
            tok.encode_files_to_arrays([src], **options)
        else:
            tok.encode_files([src], work / f"o{next(runs)}" / "s", **options)

    report("encode_files, cold", files)
    for _ in range(args.reps):
        report("encode_files, warm", files)
    for _ in range(args.reps):
        report("encode_files_to_arrays, warm", lambda: files(in_memory=True))
    windows = []
    for _ in range(args.reps):
        report(
            "reading alone",
            lambda: windows.__setitem__(slice(None), documents.iter_windows([src], jsonl_field="text")),
        )
    for name in ("flat", "arrays", "drop"):
        for _ in range(args.reps):
            directory = work / f"o{next(runs)}"
            directory.mkdir()
            writer = dict(
                flat=lambda: FlatWriter(directory / "s", tok.vocab.n_vocab, DEFAULT_SHARD_TOKENS, None),
                arrays=lambda: ArraysWriter(tok.vocab.n_vocab, nbytes),
                drop=DropWriter,
            )[name]()
            report(
                f"windows read beforehand, {name} writer",
                lambda: corpus.encode_documents(
                    tok, iter(windows), writer, [src], pack_width=args.pack_width
                ),
            )

    def preread_arrays() -> None:
        corpus.encode_documents(
            tok, iter(windows), ArraysWriter(tok.vocab.n_vocab, nbytes), [src], pack_width=args.pack_width
        )

    def second_reader():
        done = threading.Event()

        def read() -> None:
            while not done.is_set():
                for _ in documents.iter_windows([src], jsonl_field="text"):
                    if done.is_set():
                        return

        thread = threading.Thread(target=read, daemon=True)
        thread.start()
        return lambda: (done.set(), thread.join())

    def processes(code: str, n: int):
        procs = [subprocess.Popen([sys.executable, "-c", code]) for _ in range(n)]
        return lambda: [p.kill() or p.wait() for p in procs]

    spin = "while True: pass"
    copy = "import numpy as np\na = np.ones(256 << 20, np.uint8)\nb = np.empty_like(a)\nwhile True: np.copyto(b, a)"
    for n in [int(x) for x in args.beside.split(",") if x]:
        for _ in range(args.reps):
            report("windows read beforehand, arrays writer", preread_arrays)
            for what, load in (
                ("a second reader", second_reader),
                (f"{n} busy loops", lambda: processes(spin, n)),
                (f"{n} copying processes", lambda: processes(copy, n)),
            ):
                stop = load()  # (started before the timed run, stopped after it)
                time.sleep(0.3)
                try:
                    report(f"  ... beside {what}", preread_arrays)
                finally:
                    stop()
    settings = [x.split(":") for x in args.settings.split(",") if x]
    default = sys.getswitchinterval(), documents.READ_THREADS
    for _ in range(args.reps):
        for switch_ms, threads, *shape in settings:
            sys.setswitchinterval(float(switch_ms) / 1e3)
            documents.READ_THREADS = int(threads)
            pack_width, batch_mb, window_mb = (
                int(shape[0]) if shape else args.pack_width,
                float(shape[1]) if shape[1:] else 4,
                float(shape[2]) if shape[2:] else documents.WINDOW_BYTES / (1 << 20),
            )
            report(
                f"{'encode_files_to_arrays' if args.in_memory else 'encode_files'}, warm, switch {switch_ms} ms, "
                f"{threads} threads, pack {pack_width}, batch {batch_mb:g} MiB, window {window_mb:g} MiB",
                lambda: files(pack_width, batch_mb, args.in_memory, window_mb),
            )
            sys.setswitchinterval(default[0])
            documents.READ_THREADS = default[1]


if __name__ == "__main__":
    main()
