"""The benchmarks' shared parts: timing (Budget, measure), inputs (War and Peace excerpts),
and our encode as the benchmarks drive it (Ours: a jitted encode per mode / block size / T,
checked against a reference before it is timed)."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import json
import os
import pathlib
import resource
import statistics
import sys
import time

import numpy as np


def log(*a):
    print(*a, flush=True)


def write_report(out: pathlib.Path, name: str, rows: list, **fields) -> None:
    """DIR/name, a benchmark's JSON report: the date (UTC), `fields`, then the rows."""
    out.mkdir(parents=True, exist_ok=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), **fields, "rows": rows}
    (out / name).write_text(json.dumps(report, indent=1))


# --------------------------------------------------------------------------------------------
# timing
class Budget:
    """Wall-clock budget of the whole run; parts and cells ask it before starting."""

    def __init__(self, seconds: float):
        self.t0 = time.perf_counter()
        self.seconds = seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.seconds - self.elapsed()


class Clock:
    """Wall and host CPU seconds of a `with` block: the CPU of every thread of this process
    (time.process_time) plus that of the child processes that ended inside the block
    (getrusage RUSAGE_CHILDREN), so a command run with subprocess counts too. Host CPU per
    GB is half of what tokenizing on the GPU is for: the training host's CPUs stay free."""

    wall = cpu = 0.0

    @staticmethod
    def _children() -> float:
        ru = resource.getrusage(resource.RUSAGE_CHILDREN)
        return ru.ru_utime + ru.ru_stime

    def __enter__(self) -> "Clock":
        self._t, self._cpu, self._kids = time.perf_counter(), time.process_time(), self._children()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self._t
        self.cpu = time.process_time() - self._cpu + self._children() - self._kids


def family_files():
    """tests/families.py (where each family file is and how to load it: `tokenizer(key)`), for
    the benchmarks that time a family outside pytest. Loaded from its path as the module
    `family_files`: on sys.path its name would meet benchmarks/families.py (the table's
    benchmark), whichever folder came first."""
    if "family_files" not in sys.modules:
        path = pathlib.Path(__file__).resolve().parents[1] / "tests" / "families.py"
        spec = importlib.util.spec_from_file_location("family_files", path)
        module = importlib.util.module_from_spec(spec)
        sys.modules["family_files"] = module  # (before it runs: its dataclasses look it up)
        spec.loader.exec_module(module)
    return sys.modules["family_files"]


# A row's count inside a call when a piece kernel left it to the block kernel and no second
# launch ran (BLOCKBPE_PIECE_FILL=0): binding/encode_params.h kCountPending.
COUNT_PENDING = -3


@contextlib.contextmanager
def miss_cache_off():
    """The misses' cache (ffi/cuda/miss_cache.cuh) neither read nor written by the calls inside
    (BLOCKBPE_MISS_CACHE=0: the handler reads it at every call, so jitted functions need no
    recompiling)."""
    before = os.environ.get("BLOCKBPE_MISS_CACHE")
    os.environ["BLOCKBPE_MISS_CACHE"] = "0"
    try:
        yield
    finally:
        if before is None:
            del os.environ["BLOCKBPE_MISS_CACHE"]
        else:
            os.environ["BLOCKBPE_MISS_CACHE"] = before


def run_command(cmd: list[str], timeout: float) -> dict:
    """`cmd` as a child process, measured: returncode, wall_s, cpu_s (the child's user and
    system CPU over all its threads) and peak_rss_bytes (its resident high-water mark), both
    from wait4 for that child alone, and its stdout / stderr (text); timed_out where it ran
    past `timeout` seconds (then it was killed). Output goes through files, so a chatty
    child never blocks on a full pipe."""
    import subprocess
    import tempfile
    import threading

    killed = threading.Event()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t = time.perf_counter()
        p = subprocess.Popen(cmd, stdout=out, stderr=err)

        def kill():
            killed.set()
            p.kill()

        timer = threading.Timer(timeout, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t
        p.returncode = os.waitstatus_to_exitcode(status)  # (reaped here: Popen must not wait)
        out.seek(0), err.seek(0)
        return dict(
            returncode=p.returncode,
            timed_out=killed.is_set(),
            wall_s=wall,
            cpu_s=ru.ru_utime + ru.ru_stime,
            peak_rss_bytes=ru.ru_maxrss * 1024,  # (Linux reports KiB)
            stdout=out.read().decode(errors="replace"),
            stderr=err.read().decode(errors="replace"),
        )


def cpu_per_gb(cpu_s: float, nbytes: int) -> float:
    """Host CPU seconds per GB (1e9 bytes) of input text."""
    return cpu_s / (nbytes / 1e9)


def measure(fn, *, min_reps=5, max_reps=200, target_s=0.3, warmup=1, warmup_s=0.05, slow_s=0.5, slow_reps=3):
    """Median wall time of `fn()` (which must block until its result exists).

    Untimed warm-up calls (at least `warmup`, and more until `warmup_s` has passed, at most
    20: clocks and caches settle), then as many timed calls as fit in about `target_s`, at
    least `min_reps` (at least `slow_reps` when one call takes more than `slow_s`). Python's
    cyclic garbage collector is run first and paused while timing, as `timeit` does, for
    ours and the peers alike (the harness holds millions of reference ids by then)."""
    with gc_paused():
        return _measure(fn, min_reps, max_reps, target_s, warmup, warmup_s, slow_s, slow_reps)


@contextlib.contextmanager
def gc_paused():
    """Python's cyclic garbage collector run once, then paused inside the block (as `timeit`
    does): a collection walking the harness's millions of reference ids must not land in a
    timed call."""
    gc.collect()
    paused = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if paused:
            gc.enable()


def _measure(fn, min_reps, max_reps, target_s, warmup, warmup_s, slow_s, slow_reps):
    t = time.perf_counter()
    for i in range(20):
        if i >= warmup and time.perf_counter() - t >= warmup_s:
            break
        fn()
    t = time.perf_counter()
    fn()
    first = time.perf_counter() - t
    floor = slow_reps if first > slow_s else min_reps
    reps = int(min(max_reps, max(floor, target_s / max(first, 1e-9))))
    ts = [first]
    for _ in range(reps - 1):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return {"s": statistics.median(ts), "min_s": min(ts), "reps": len(ts)}


def fresh_copies(texts: list) -> list:
    """New str objects with the same texts: without the UTF-8 form CPython keeps beside a str
    once something asked for it (a str read from a file, a JSON record or a dataset has none;
    a batch timed again and again would have it from the first call on: every str-taking
    tokenizer, ours and the peers, then skips its encoding). bytes items stay as they are."""
    return [(t + "\0")[:-1] if isinstance(t, str) and t else t for t in texts]


def measure_fresh(fn, texts: list, *, reps: int = 7) -> dict:
    """Median wall time of fn(fresh) over `reps` calls, each on its own fresh_copies(texts)
    made untimed before it (after one untimed warm-up call; the cyclic GC paused as in
    `measure`)."""
    with gc_paused():
        fn(fresh_copies(texts))
        ts = []
        for _ in range(reps):
            batch = fresh_copies(texts)
            t = time.perf_counter()
            fn(batch)
            ts.append(time.perf_counter() - t)
            del batch
    return {"s": statistics.median(ts), "min_s": min(ts), "reps": len(ts)}


def device_time(g, *args, chain: int, executions: int = 8, target_s: float = 0.3) -> dict:
    """Per-encode device time of `g(*args)`, an executable of `chain` encodes (Ours.fn(chain=)):
    `executions` of it dispatched back to back and one sync at the end, medians of such bursts
    (measure). The host dispatches the next execution while the GPU runs this one, so what is
    timed is the GPU's work, as in a training loop that does not wait for its batches; where
    the host's dispatch is the slower (small calls), the host's pace. (Timing one execution
    and its sync instead adds a share of the dispatch and the sync to every encode:
    docs/kernel_rounds.md, "Piece kernel, round 9".)"""

    def burst():
        for _ in range(executions):
            out = g(*args)
        out[0].block_until_ready()

    m = measure(burst, target_s=target_s)
    k = executions * chain
    return {"s": m["s"] / k, "min_s": m["min_s"] / k, "reps": m["reps"]}


# --------------------------------------------------------------------------------------------
# inputs
def excerpts(raw: bytes, batch: int, length: int, seed: int = 0) -> list[str]:
    """`batch` excerpts of at most `length` bytes from random places of `raw`, cut on UTF-8
    character boundaries (the paper's War and Peace workload; the same cut as peer_bench)."""
    rng = np.random.default_rng(seed)
    n = len(raw)
    out = []
    if length >= n:
        raise ValueError(f"excerpt length {length} >= corpus size {n}")
    for s in rng.integers(0, n - length, size=batch):
        s = int(s)
        while s < n and (raw[s] & 0xC0) == 0x80:
            s += 1
        e = min(n, s + length)
        while e > s and e < n and (raw[e] & 0xC0) == 0x80:
            e -= 1
        out.append(raw[s:e].decode("utf-8"))
    return out


def book_rows(raw: bytes, length: int) -> list[str]:
    """All of `raw` in consecutive rows of at most `length` bytes, cut on UTF-8 character
    boundaries (every byte in exactly one row)."""
    out, s, n = [], 0, len(raw)
    while s < n:
        e = min(n, s + length)
        while e > s + 1 and e < n and (raw[e] & 0xC0) == 0x80:
            e -= 1
        out.append(raw[s:e].decode("utf-8"))
        s = e
    return out


def spread_excerpts(prose: str, rows: int, size: int) -> list[str]:
    """`rows` excerpts of at most `size` UTF-8 bytes each, starting at evenly spread places
    (deterministic; a cut character at either end is dropped)."""
    raw = prose.encode()
    step = max(1, (len(raw) - size) // rows)
    return [raw[(k * step) % (len(raw) - size) :][:size].decode("utf-8", "ignore") for k in range(rows)]


def median_s(fn, reps: int) -> tuple[float, object]:
    """(median seconds of `reps` calls of fn() after one untimed call, the last result)."""
    out = fn()
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), out


def interleaved_medians(fns: dict, reps: int) -> dict:
    """{name: (median seconds, the last result)} of `reps` rounds, each calling every fn() once,
    in an order that rotates from round to round, after one untimed call of each. Where the
    calls compare (A against B), timed by turns: one after another, whichever came first or
    second ran on a machine in another state (clocks, caches, the host's pools)."""
    names = list(fns)
    out = {n: fns[n]() for n in names}
    times: dict = {n: [] for n in names}
    for r in range(reps):
        for n in names[r % len(names) :] + names[: r % len(names)]:
            t = time.perf_counter()
            out[n] = fns[n]()
            times[n].append(time.perf_counter() - t)
    return {n: (statistics.median(times[n]), out[n]) for n in names}


def pack_ljust(texts, max_len: int):
    """A padding packer in two C loops (str.encode, bytes.ljust + join): the reference for
    what `bb.pack_strings` could cost. Same output as pack_strings (the array is read-only)."""
    blobs = [t.encode("utf-8") for t in texts]
    lengths = np.fromiter(map(len, blobs), dtype=np.int32, count=len(blobs))
    data = np.frombuffer(b"".join([b.ljust(max_len, b"\0") for b in blobs]), dtype=np.uint8)
    return data.reshape(len(blobs), max_len), lengths


def nbytes_of(texts) -> int:
    return sum(len(t.encode("utf-8")) for t in texts)


# --------------------------------------------------------------------------------------------
# our encode
class Ours:
    """Jitted blockbpe_jax.encode calls for one tokenizer on one device, cached by shape."""

    CHAIN = 8  # calls per executable for the device-time measurement (device_time)

    def __init__(self, bb, tok, device, vocab_name: str):
        import jax

        self._jitted: dict = {}
        self.bb, self.jax, self.tok, self.dev, self.vocab_name = bb, jax, tok, device, vocab_name
        # Tables are passed to the jitted function as an argument (an EncodeTables pytree),
        # as a model step would, so they are not embedded in the program as constants.
        self.tables = tok.tables(device=device)
        self.unavailable: dict[str, str] = {}  # mode -> "exact mode unavailable: ..."
        self.notes: list[str] = []
        self._fns: dict = {}

    def put(self, data, lengths):
        return (self.jax.device_put(data, self.dev), self.jax.device_put(lengths, self.dev))

    def _one(self, mode, bs, T, checked=False):
        # check_lengths=False: a fixed launch with no host read-back (device-resident timing);
        # checked: the default call, which copies the lengths back to validate them.
        bb = self.bb
        return lambda d, l, tabs: bb.encode(
            d, l, tabs, max_tokens=T, mode=mode, block_size=bs, check_lengths=checked
        )

    def fn(self, mode: str, bs: int, T: int, chain: int = 1, checked: bool = False):
        """(data, lengths) -> (ids, counts[, acc]) on the device, jitted; `chain` > 1 runs the
        encode `chain` times in one executable, each call's lengths depending on the previous
        call's counts (so XLA can neither merge nor hoist them): no host in between."""
        key = (mode, bs, T, chain, checked)
        f = self._fns.get(key)
        if f is None:
            jax, jnp = self.jax, self.jax.numpy
            one = self._one(mode, bs, T, checked)
            if chain == 1:
                body = lambda d, l, tabs: tuple(one(d, l, tabs))  # noqa: E731
            else:

                def body(d, l, tabs):
                    acc = jnp.zeros((), jnp.int32)
                    for _ in range(chain):
                        e = one(d, jnp.where(acc == -123456789, 0, l), tabs)
                        acc = acc + e.counts[0]
                    return e.ids, e.counts, acc

            jf = self._jitted[key] = jax.jit(body)
            tabs = self.tables
            f = self._fns[key] = lambda d, l: jf(d, l, tabs)
        return f

    def memory_analysis(self, mode: str, bs: int, B: int, L: int, T: int) -> dict:
        """XLA's own account of one call's device memory (compile only, nothing runs)."""
        jax = self.jax
        self.fn(mode, bs, T)
        jf = self._jitted[(mode, bs, T, 1, False)]
        args = (jax.ShapeDtypeStruct((B, L), np.uint8), jax.ShapeDtypeStruct((B,), np.int32))
        compiled = jf.lower(*args, self.tables).compile()
        ma = compiled.memory_analysis()
        out = {}
        for k in (
            "argument_size_in_bytes",
            "output_size_in_bytes",
            "temp_size_in_bytes",
            "alias_size_in_bytes",
            "generated_code_size_in_bytes",
        ):
            v = getattr(ma, k, None)
            if v is not None:
                out[k] = int(v)
        return out

    def available(self, mode: str) -> bool:
        return mode not in self.unavailable

    def run_checked(self, mode, bs, T, data_dev, lengths_dev):
        """First call of a shape: returns (ids, counts) on the host, or None when the mode is
        unavailable (recorded once, as 'exact mode unavailable: <error>')."""
        if not self.available(mode):
            return None
        try:
            ids, counts = self.fn(mode, bs, T)(data_dev, lengths_dev)[:2]
            return np.asarray(ids), np.asarray(counts)
        except Exception as e:  # noqa: BLE001
            msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else repr(e)
            if mode == "exact":
                self.unavailable[mode] = f"exact mode unavailable: {msg}"
                log(f"  {self.unavailable[mode]}")
                return None
            raise


def compare_rows(ids: np.ndarray, counts: np.ndarray, ref: list, T: int) -> tuple[bool, str]:
    trunc = int((counts > T).sum())
    bad = int((counts < 0).sum())
    if bad:
        return False, f"{bad} rows flagged -1 (bad length)"
    for i, r in enumerate(ref):
        got = ids[i, : min(int(counts[i]), T)].tolist()
        if int(counts[i]) != len(r) or got != r[:T]:
            j = next((k for k, (a, b) in enumerate(zip(got, r)) if a != b), min(len(got), len(r)))
            return False, (
                f"row {i}: {int(counts[i])} tokens vs {len(r)}; first difference at "
                f"{j}: {got[j : j + 4]} vs {r[j : j + 4]}"
            )
    return True, "equal" + (f" ({trunc} rows truncated)" if trunc else "")


def time_ours(
    ours: Ours,
    mode,
    bs,
    T,
    data_dev,
    lengths_dev,
    total_bytes,
    *,
    chain=True,
    target_s=0.3,
    max_device_chain_s=0.005,
):
    """Device-resident numbers for one shape: latency (one call + sync, dispatch included)
    and device time (device_time: chains of CHAIN calls dispatched back to back). Big calls
    skip the chain."""
    f = ours.fn(mode, bs, T)
    lat = measure(lambda: f(data_dev, lengths_dev)[0].block_until_ready(), target_s=target_s)
    row = {
        "latency_s": lat["s"],
        "latency_min_s": lat["min_s"],
        "reps": lat["reps"],
        "MBps": total_bytes / lat["s"] / 1e6,
    }
    if lat["s"] < 0.001:  # the default call (lengths copied back and checked): its latency
        fc = ours.fn(mode, bs, T, checked=True)
        checked = measure(lambda: fc(data_dev, lengths_dev)[0].block_until_ready(), target_s=target_s)
        row.update(latency_checked_s=checked["s"], latency_checked_min_s=checked["min_s"])
        # The floor under any call: a jitted call on the same arrays that does next to nothing
        # (one tiny kernel) and its sync, timed the same way in the same run.
        trivial = ours.jax.jit(lambda d, l: l + d[:, 0].astype(l.dtype))
        floor = measure(lambda: trivial(data_dev, lengths_dev).block_until_ready(), target_s=target_s)
        row.update(dispatch_floor_s=floor["s"])
    if lat["s"] < 0.05:
        # CHAIN single calls dispatched back to back, one sync at the end: what a training loop sees
        p = device_time(f, data_dev, lengths_dev, chain=1, executions=Ours.CHAIN, target_s=target_s)
        row.update(pipelined_s=p["s"], pipelined_MBps=total_bytes / p["s"] / 1e6)
    if chain and lat["s"] < max_device_chain_s:
        k = Ours.CHAIN
        g = ours.fn(mode, bs, T, chain=k)
        dev = device_time(g, data_dev, lengths_dev, chain=k, target_s=target_s)
        row.update(
            device_s=dev["s"], device_reps=dev["reps"], device_from=f"chains of {k}, dispatched back to back"
        )
        # Every call of the chain after the first finds this batch's misses in the misses'
        # cache (ffi/cuda/miss_cache.cuh): device_s is its best case; the same chain with the
        # cache off is the other bound.
        with miss_cache_off():
            off = device_time(g, data_dev, lengths_dev, chain=k, target_s=target_s)
        row.update(device_no_cache_s=off["s"], device_no_cache_MBps=total_bytes / off["s"] / 1e6)
    else:
        row.update(device_s=lat["s"], device_from="latency (call too long for dispatch to matter)")
    row["device_MBps"] = total_bytes / row["device_s"] / 1e6
    return row
