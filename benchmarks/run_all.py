#!/usr/bin/env python3
"""blockbpe_jax benchmarks: the BlockBPE paper's experiments, the CPU peers, scaling, memory.

    python3 benchmarks/run_all.py --out DIR [--only peers,paper,scaling,memory] [--quick]

Writes DIR/results_<parts>.json (rewritten after every part, so a run cut short still leaves
what it measured) and, when matplotlib imports, the PNGs of benchmarks/plot.py. Without
--only, the parts come from $BLOCKBPE_BENCH_ONLY, else all of them. See benchmarks/README.md
for what each number means.

Parts (every id we time is first checked against tiktoken in the same run):
  memory   device table bytes per vocabulary, workspace bytes per batch shape
  peers    cl100k, War and Peace excerpts: our encode (exact and bytes; device-resident and
           end to end from list[str]) and every CPU peer that imports, on a batch x bytes grid
  paper    r50k (GPT-2), bytes mode: block size 256/512/1024 x batch 64..1024 x excerpt
           128..4096 bytes; tiktoken and HF tokenizers on the same inputs
  scaling  r50k, bytes and exact: cost vs string length (128 B .. 1 MiB) and vs batch (1..4096)
"""

from __future__ import annotations

import argparse
import datetime as _dt
import gc
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import time
import traceback
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

import numpy as np  # noqa: E402

import peers as peers_mod  # noqa: E402
import plot  # noqa: E402  (matplotlib only when a PNG is drawn)

PARTS = ("memory", "peers", "paper", "scaling")

# Grids. The three issue-4 target cells come first in PEER_GRID.
PEER_GRID = [(64, 512), (1024, 512), (1024, 4096), (256, 512), (1024, 128), (1024, 2048), (64, 4096)]
PAPER_BLOCKS = (256, 512, 1024)
PAPER_BATCHES = (64, 128, 256, 512, 1024)
PAPER_LENGTHS = (128, 256, 512, 1024, 2048, 4096)
SCALE_LENGTHS = (128, 512, 2048, 8192, 16384, 65536, 262144, 1 << 20)
SCALE_LENGTH_BATCHES = (1, 64)
SCALE_BATCHES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SCALE_BATCH_LEN = 512
SCALE_MAX_TOTAL_BYTES = 16 << 20   # cap on batch x length for one call in the scaling sweeps
SLOW_CALL_S = 2.0                  # a series stops growing past a call this slow
STREAM = 8                         # batches in the end-to-end stream measurement
BYTES_CHECK_BYTES = 2 << 20        # tiktoken with one piece per string is superlinear: check
                                   # only the first rows of long bytes-mode strings (>= 1 row)

QUICK = dict(
    peer_grid=[(8, 128), (16, 512)],
    paper_blocks=(256, 1024), paper_batches=(4, 8), paper_lengths=(128, 256),
    scale_lengths=(128, 1024, 9000), scale_length_batches=(1, 2),
    scale_batches=(1, 4, 16), scale_batch_len=128,
)


def log(*a):
    print(*a, flush=True)


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


def measure(fn, *, min_reps=5, max_reps=200, target_s=0.3, warmup=1, warmup_s=0.05,
            slow_s=0.5, slow_reps=3):
    """Median wall time of `fn()` (which must block until its result exists).

    Untimed warm-up calls (at least `warmup`, and more until `warmup_s` has passed, at most
    20: clocks and caches settle), then as many timed calls as fit in about `target_s`, at
    least `min_reps` (at least `slow_reps` when one call takes more than `slow_s`). Python's
    cyclic garbage collector is run first and paused while timing, as `timeit` does, for
    ours and the peers alike (the harness holds millions of reference ids by then)."""
    gc.collect()
    paused = gc.isenabled()
    gc.disable()
    try:
        return _measure(fn, min_reps, max_reps, target_s, warmup, warmup_s, slow_s, slow_reps)
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

    CHAIN = 8  # calls per executable for the device-time measurement

    def __init__(self, bb, tok, device, vocab_name: str):
        import jax
        self._jitted: dict = {}
        self.bb, self.jax, self.tok, self.dev, self.vocab_name = bb, jax, tok, device, vocab_name
        # Tables are passed to the jitted function as an argument (an EncodeTables pytree),
        # as a model step would, so they are not embedded in the program as constants.
        self.tables = tok.tables(device=device)
        self.unavailable: dict[str, str] = {}   # mode -> "exact mode unavailable: ..."
        self.notes: list[str] = []
        self._fns: dict = {}

    def put(self, data, lengths):
        return (self.jax.device_put(data, self.dev), self.jax.device_put(lengths, self.dev))

    def _one(self, mode, bs, T):
        # check_lengths=False: a fixed launch with no host read-back (device-resident timing).
        bb = self.bb
        return lambda d, l, tabs: bb.encode(d, l, tabs, max_tokens=T, mode=mode, block_size=bs,
                                            check_lengths=False)

    def fn(self, mode: str, bs: int, T: int, chain: int = 1):
        """(data, lengths) -> (ids, counts[, acc]) on the device, jitted; `chain` > 1 runs the
        encode `chain` times in one executable, each call's lengths depending on the previous
        call's counts (so XLA can neither merge nor hoist them): no host in between."""
        key = (mode, bs, T, chain)
        f = self._fns.get(key)
        if f is None:
            jax, jnp = self.jax, self.jax.numpy
            one = self._one(mode, bs, T)
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
        jf = self._jitted[(mode, bs, T, 1)]
        args = (jax.ShapeDtypeStruct((B, L), np.uint8), jax.ShapeDtypeStruct((B,), np.int32))
        compiled = jf.lower(*args, self.tables).compile()
        ma = compiled.memory_analysis()
        out = {}
        for k in ("argument_size_in_bytes", "output_size_in_bytes", "temp_size_in_bytes",
                  "alias_size_in_bytes", "generated_code_size_in_bytes"):
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
            return False, (f"row {i}: {int(counts[i])} tokens vs {len(r)}; first difference at "
                           f"{j}: {got[j:j + 4]} vs {r[j:j + 4]}")
    return True, "equal" + (f" ({trunc} rows truncated)" if trunc else "")


def time_ours(ours: Ours, mode, bs, T, data_dev, lengths_dev, total_bytes, *, chain=True,
              target_s=0.3, max_device_chain_s=0.005):
    """Device-resident numbers for one shape: latency (one call + sync, dispatch included)
    and device time (CHAIN calls in one executable / CHAIN). Big calls skip the chain."""
    f = ours.fn(mode, bs, T)
    lat = measure(lambda: f(data_dev, lengths_dev)[0].block_until_ready(), target_s=target_s)
    row = {"latency_s": lat["s"], "latency_min_s": lat["min_s"], "reps": lat["reps"],
           "MBps": total_bytes / lat["s"] / 1e6}
    if lat["s"] < 0.05:
        # k calls dispatched back to back, one sync at the end: what a training loop sees
        k = Ours.CHAIN

        def burst():
            outs = [f(data_dev, lengths_dev) for _ in range(k)]
            outs[-1][0].block_until_ready()
        p = measure(burst, target_s=target_s)
        row.update(pipelined_s=p["s"] / k, pipelined_MBps=total_bytes * k / p["s"] / 1e6)
    if chain and lat["s"] < max_device_chain_s:
        k = Ours.CHAIN
        g = ours.fn(mode, bs, T, chain=k)
        dev = measure(lambda: g(data_dev, lengths_dev)[0].block_until_ready(), target_s=target_s)
        row.update(device_s=dev["s"] / k, device_reps=dev["reps"], device_from=f"chain of {k}")
    else:
        row.update(device_s=lat["s"], device_from="latency (call too long for dispatch to matter)")
    row["device_MBps"] = total_bytes / row["device_s"] / 1e6
    return row


# --------------------------------------------------------------------------------------------
# parts
def part_memory(ctx, res):
    bb, testing = ctx["bb"], ctx["testing"]
    smem_max = int(bb.native.cpu.smem_max_len)
    modes = {"exact": 2, "bytes": 0}  # the workspace depends only on whether mode is bytes
    names = ["pair_table", "byte_ids", "piece_table", "token_offsets", "token_data",
             "special_offsets", "special_data", "special_ids"]
    vocabs = {}
    for name, (rel, _) in testing.VOCAB_FILES.items():
        if ctx["quick"] and name not in ("r50k", "cl100k"):
            continue
        t = time.perf_counter()
        try:
            tok = ctx["tokenizer"](name)
        except Exception as e:  # noqa: BLE001
            vocabs[name] = {"error": repr(e)[:300]}
            continue
        load_s = time.perf_counter() - t
        tabs = tok.host_tables()
        v = {"file": rel, "n_vocab": int(tok.vocab.n_vocab), "pattern": tok.vocab.pattern_name,
             "table_nbytes": int(tok.table_nbytes()),
             "table_nbytes_all_specials": int(tok.table_nbytes("all")),
             "tables": {(names[i] if i < len(names) else f"t{i}"): int(a.nbytes) for i, a in enumerate(tabs)},
             "load_s": load_s}
        vocabs[name] = v
        log(f"  {name:7s} n_vocab={v['n_vocab']:7d} tables={v['table_nbytes'] / 2**20:7.2f} MiB "
            f"(load {load_s:.1f} s)")

    def workspace(batch, length, mode="exact"):
        size = bb.native.workspace_bytes(batch, length, modes[mode], 0)  # the kernel's own rule (byte-level)
        return 0 if size <= 1 else size

    shapes = sorted({*PEER_GRID, *[(b, l) for b in PAPER_BATCHES for l in PAPER_LENGTHS],
                     *[(b, l) for b in SCALE_LENGTH_BATCHES for l in SCALE_LENGTHS],
                     (4096, 512), (1024, 16384), (1024, 65536)})
    ws = [{"batch": b, "bytes": l, "workspace_bytes_exact": workspace(b, l, "exact"),
           "workspace_bytes_bytes_mode": workspace(b, l, "bytes"),
           "ids_bytes": b * l * 4 + b * 4, "input_bytes": b * l + b * 4} for b, l in shapes]
    # XLA's accounting of whole calls (cl100k, T = L): arguments (input + tables), outputs
    # (ids, counts, and the workspace, which is an output), temporaries.
    measured = []
    try:
        ours = ctx["ours"]("cl100k")
        mshapes = [(8, 128), (16, 9000)] if ctx["quick"] else \
            [(64, 512), (1024, 512), (1024, 4096), (4096, 512), (1024, 16384), (64, 1 << 20), (1, 1 << 20)]
        for mode in ("exact", "bytes"):
            for b, l in mshapes:
                try:
                    ma = ours.memory_analysis(mode, 256, b, l, l)
                except Exception as e:  # noqa: BLE001
                    ma = {"error": f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"}
                measured.append({"mode": mode, "batch": b, "bytes": l, "max_tokens": l,
                                 "workspace_bytes_rule": workspace(b, l, mode), **ma})
    except Exception as e:  # noqa: BLE001
        measured.append({"error": f"{type(e).__name__}: {e}"[:300]})
    res["memory"] = {
        "vocabs": vocabs,
        "xla_memory_analysis_cl100k": measured,
        "smem_max_len": smem_max,
        "workspace_rule": (f"exact mode, L <= {smem_max}: B * ceil16(L) * 12 bytes (the merge-pass "
                           f"buffers; the rest is in shared memory); bytes mode, L <= {smem_max}: 0; "
                           f"L > {smem_max}: B * ceil16(L) * 23 bytes; allocated by XLA as a "
                           "discarded output (ffi/encode_params.h)"),
        "ids_rule": "ids int32[B, T] + counts int32[B]; the benchmark uses T = L (never truncates)",
        "shapes": ws,
    }


def part_peers(ctx, res, budget):
    """cl100k: ours (exact + bytes, every block size) and every CPU peer, checked first."""
    bb = ctx["bb"]
    tok = ctx["tokenizer"]("cl100k")
    ours = ctx["ours"]("cl100k")
    bytes_ref = peers_mod.reference_encoding(ctx["data"], "cl100k", ctx["testing"].BYTES_MODE_PATTERN)
    ps = peers_mod.load(ctx["data"], "cl100k", threads=ctx["threads"])
    out = {"vocab": "cl100k", "threads": ps.threads, "notes": ours.notes,
           "peer_versions": {k: p.version for k, p in ps.peers.items()},
           "unavailable": dict(ps.unavailable), "rows": []}
    res["peers"] = out
    for name, why in ps.unavailable.items():
        log(f"  peer {name} unavailable: {why}")
    grid = ctx["peer_grid"]
    blocks = ctx["paper_blocks"]
    for ci, (B, L) in enumerate(grid):
        if budget.left() < 10 and ci >= 3:
            out["rows"].append({"batch": B, "bytes": L, "skipped": "time budget"})
            continue
        texts = excerpts(ctx["raw"], B, L, seed=ci)
        total = nbytes_of(texts)
        ref = ps.reference_ids(texts)
        row = {"batch": B, "bytes": L, "total_bytes": total, "tokens": sum(map(len, ref)),
               "ours": {}, "peers": {}}
        out["rows"].append(row)
        data_np, lens_np = bb.pack_strings(texts, max_len=L)
        data_dev, lens_dev = ours.put(data_np, lens_np)
        T = L
        # -- ours, device-resident, every block size; then end to end at the best one
        for mode in ("exact", "bytes"):
            mref = ref if mode == "exact" else [list(r) for r in bytes_ref.encode_ordinary_batch(texts, num_threads=ps.threads)]
            per_bs = {}
            for bs in blocks:
                try:
                    got = ours.run_checked(mode, bs, T, data_dev, lens_dev)
                    if got is None:
                        break
                    ok, detail = compare_rows(*got, mref, T)
                    r = {"exact_vs_tiktoken": ok, "check": detail}
                    r.update(time_ours(ours, mode, bs, T, data_dev, lens_dev, total))
                except Exception as e:  # noqa: BLE001
                    r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                per_bs[str(bs)] = r
            if not ours.available(mode):
                row["ours"][mode] = {"unavailable": ours.unavailable[mode]}
                continue
            timed = {k: v for k, v in per_bs.items() if "latency_s" in v}
            entry = {"block_sizes": per_bs}
            if timed:
                best = min(timed, key=lambda k: timed[k]["device_s"])
                bs = int(best)
                entry.update(best_block_size=bs, **{k: timed[best][k] for k in (
                    "exact_vs_tiktoken", "check", "latency_s", "device_s", "MBps", "device_MBps")})
                entry.update(e2e(ctx, ours, tok, texts, mode, bs, L, T, total))
            row["ours"][mode] = entry
        # -- peers: check on these inputs, then time
        for name, p in ps.peers.items():
            ok, detail = peers_mod.check(p, texts, ref)
            if not ok:
                row["peers"][name] = {"exact_vs_tiktoken": False, "check": detail}
                continue
            m = measure(lambda: p.encode(texts), target_s=0.5, max_reps=30)
            row["peers"][name] = {"exact_vs_tiktoken": True, "s": m["s"], "reps": m["reps"],
                                  "MBps": total / m["s"] / 1e6}
        timed_peers = {k: v["MBps"] for k, v in row["peers"].items() if "MBps" in v}
        if timed_peers:
            best = max(timed_peers, key=timed_peers.get)
            row["fastest_peer"] = {"name": best, "MBps": timed_peers[best]}
        log_peer_row(row)
        ctx["save"]()


def e2e(ctx, ours, tok, texts, mode, bs, L, T, total):
    """End to end: list[str] on the host -> padded ids on the device (packing + transfer +
    encode): the harness's path (pack_strings, device_put, jitted encode with unchecked
    lengths), the same with NumPy arguments, a stream of batches, and the public
    `Tokenizer.encode_batch` (what each is: benchmarks/README.md)."""
    bb = ctx["bb"]
    f = ours.fn(mode, bs, T)

    def fast():
        d, l = bb.pack_strings(texts, max_len=L)
        ids, counts = f(*ours.put(d, l))[:2]
        ids.block_until_ready()
        return ids, counts

    ids, counts = fast()
    ref_ids, _ = f(*ours.put(*bb.pack_strings(texts, max_len=L)))[:2]
    same = bool(np.array_equal(np.asarray(ids), np.asarray(ref_ids)))
    m = measure(fast, target_s=0.3, max_reps=50)
    pack = measure(lambda: bb.pack_strings(texts, max_len=L), target_s=0.2, max_reps=50)
    d_np, l_np = bb.pack_strings(texts, max_len=L)

    def h2d():
        d, l = ours.put(d_np, l_np)
        d.block_until_ready()
        l.block_until_ready()
    h = measure(h2d, target_s=0.2, max_reps=50)
    # The NumPy arrays handed straight to the jitted call, which moves them itself (what
    # encode_batch does; other transfer variants: benchmarks/host_path.py).
    def e2e_numpy():
        ids = f(*bb.pack_strings(texts, max_len=L))[0]
        ids.block_until_ready()
        return ids

    # A stream: STREAM batches (rotations of this batch: same bytes, other rows) packed and
    # dispatched one after another with no wait in between, one block at the end: the host
    # packs and sends batch i+1 while the GPU encodes batch i, as in an input pipeline.
    shifts = [k * len(texts) // STREAM for k in range(STREAM)]
    rotations = [texts[s:] + texts[:s] for s in shifts]
    ref = np.asarray(ref_ids)

    def stream_equal(outs) -> bool:  # each batch's ids against the rotated reference
        return all(np.array_equal(np.asarray(got), np.roll(ref, -s, axis=0))
                   for s, got in zip(shifts, outs))

    def e2e_stream():
        outs = [f(*bb.pack_strings(r, max_len=L))[0] for r in rotations]
        ours.jax.block_until_ready(outs)
        return outs

    same = same and bool(np.array_equal(np.asarray(e2e_numpy()), ref))
    same = same and stream_equal(e2e_stream())
    mn = measure(e2e_numpy, target_s=0.3, max_reps=50)
    st = measure(e2e_stream, target_s=0.5, max_reps=30)["s"] / STREAM

    def fast_ljust():
        ids = f(*ours.put(*pack_ljust(texts, L)))[0]
        ids.block_until_ready()
        return ids

    same = same and bool(np.array_equal(np.asarray(fast_ljust()), np.asarray(ref_ids)))
    mj = measure(fast_ljust, target_s=0.3, max_reps=50)
    pj = measure(lambda: pack_ljust(texts, L), target_s=0.2, max_reps=50)
    out = {"e2e_s": m["s"], "e2e_MBps": total / m["s"] / 1e6, "e2e_reps": m["reps"],
           "e2e_ids_equal_device_resident": same,
           "e2e_ljust_s": mj["s"], "e2e_ljust_MBps": total / mj["s"] / 1e6,
           "pack_ljust_s": pj["s"], "pack_ljust_MBps": total / pj["s"] / 1e6,
           "pack_s": pack["s"], "pack_MBps": total / pack["s"] / 1e6,
           "h2d_s": h["s"], "h2d_MBps": (d_np.nbytes + l_np.nbytes) / h["s"] / 1e6,
           "e2e_numpy_s": mn["s"], "e2e_numpy_MBps": total / mn["s"] / 1e6,
           "e2e_stream_s": st, "e2e_stream_MBps": total / st / 1e6, "e2e_stream_batches": STREAM}
    try:
        # The public path: Tokenizer.encode_batch (on a GPU: pinned staging + DLPack import,
        # blockbpe_jax/staging.py), one batch and a stream, each checked against the
        # device-resident ids.
        def api(batch=texts):
            return tok.encode_batch(batch, max_len=L, max_tokens=T, mode=mode, block_size=bs,
                                    device=ours.dev).ids

        def api_one():
            ids = api()
            ids.block_until_ready()
            return ids

        def api_stream():
            outs = [api(r) for r in rotations]
            ours.jax.block_until_ready(outs)
            return outs

        api_same = bool(np.array_equal(np.asarray(api_one()), ref)) and stream_equal(api_stream())
        out["e2e_api_ids_equal_device_resident"] = api_same
        if api_same:
            a = measure(api_one, target_s=0.3, max_reps=50)
            ast = measure(api_stream, target_s=0.5, max_reps=30)["s"] / STREAM
            out.update(e2e_api_s=a["s"], e2e_api_MBps=total / a["s"] / 1e6,
                       e2e_api_stream_s=ast, e2e_api_stream_MBps=total / ast / 1e6)
    except Exception as e:  # noqa: BLE001
        out["e2e_api_error"] = f"{type(e).__name__}: {str(e)[:200]}"
    return out


def summarize_targets(res) -> dict:
    """Issue 4's targets against this run's numbers (cl100k, War and Peace)."""
    t: dict = {"note": "device = GPU time per call (a chain of calls in one executable); "
                       "latency = one jitted call + block_until_ready (dispatch included)"}
    rows = {(r["batch"], r["bytes"]): r for r in res.get("peers", {}).get("rows", []) if "ours" in r}

    def ours(cell):
        r = rows.get(cell, {}).get("ours", {})
        for mode in ("exact", "bytes"):
            if "device_MBps" in r.get(mode, {}):
                return mode, r[mode]
        return None, {}

    mode, e = ours((1024, 4096))
    if e:
        t["device_resident_1024x4096"] = {
            "target": ">= 20 GB/s (exact)", "mode": mode, "GBps_device": e["device_MBps"] / 1e3,
            "GBps_with_dispatch": e["MBps"] / 1e3, "met": mode == "exact" and e["device_MBps"] >= 20e3}
    for cell in ((1024, 4096), (1024, 512)):
        mode, e = ours(cell)
        fp = rows.get(cell, {}).get("fastest_peer")
        if e and fp and "e2e_MBps" in e:
            # One batch: the best of the list[str] -> ids paths we timed (each checked equal);
            # stream: batches back to back (see e2e). "met" asks it of the single batch.
            one = {k[:-5]: e[k] for k in plot.ONE_BATCH_KEYS if e.get(k)}
            best = max(one, key=one.get)
            streams = {k[:-5]: e[k] for k in plot.STREAM_KEYS if e.get(k)}
            stream = max(streams.values()) if streams else None
            t[f"end_to_end_{cell[0]}x{cell[1]}"] = {
                "target": ">= 3x the fastest exact CPU peer", "mode": mode,
                "fastest_peer": fp["name"], "fastest_peer_MBps": fp["MBps"],
                "one_batch_MBps": one, "one_batch_best": best,
                "ratio_one_batch": one[best] / fp["MBps"],
                "stream_MBps": stream, "stream_paths_MBps": streams, "ratio_stream": stream / fp["MBps"] if stream else None,
                "met": mode == "exact" and one[best] >= 3 * fp["MBps"],
                "met_stream": bool(mode == "exact" and stream and stream >= 3 * fp["MBps"])}
    mode, e = ours((64, 512))
    if e:
        t["latency_64x512"] = {"target": "<= 100 us device-resident", "mode": mode,
                               "latency_median_us": e["latency_s"] * 1e6,
                               "latency_min_us": min(v.get("latency_min_s", 9) for v in e["block_sizes"].values()) * 1e6,
                               "device_us": e["device_s"] * 1e6,
                               "met": mode == "exact" and e["latency_s"] <= 100e-6}
    mem = res.get("memory")
    if mem:
        t["memory"] = {"tables_bytes": {k: v.get("table_nbytes") for k, v in mem["vocabs"].items()},
                       "workspace_rule": mem["workspace_rule"]}
    return t


def log_peer_row(row):
    parts = []
    for mode, e in row["ours"].items():
        if "device_MBps" in e:
            parts.append(f"ours[{mode}] dev={e['device_MBps']:.0f} lat={e['latency_s'] * 1e6:.0f}us "
                         f"e2e={e.get('e2e_MBps', float('nan')):.0f}/{e.get('e2e_ljust_MBps', float('nan')):.0f}MB/s"
                         f"{'' if e['exact_vs_tiktoken'] else '(!MISMATCH)'}")
        else:
            parts.append(f"ours[{mode}] {e.get('unavailable', 'error')[:60]}")
    for name, p in row["peers"].items():
        parts.append(f"{name}={p['MBps']:.1f}" if "MBps" in p else f"{name}=(!{p['check'][:40]})")
    log(f"  B={row['batch']:5d} L={row['bytes']:5d} " + " | ".join(parts))


def part_paper(ctx, res, budget):
    """The BlockBPE paper: GPT-2 vocabulary, bytes mode, block sizes x batch x excerpt length."""
    ours = ctx["ours"]("r50k")
    bytes_ref = peers_mod.reference_encoding(ctx["data"], "r50k", ctx["testing"].BYTES_MODE_PATTERN)
    ps = peers_mod.load(ctx["data"], "r50k", threads=ctx["threads"], only=("hf_tokenizers",))
    out = {"vocab": "r50k", "mode": "bytes", "notes": ours.notes, "threads": ps.threads,
           "unavailable": dict(ps.unavailable), "rows": [], "baselines": []}
    res["paper"] = out
    bb = ctx["bb"]
    for B in ctx["paper_batches"]:
        for L in ctx["paper_lengths"]:
            if budget.left() < 5:
                out["rows"].append({"batch": B, "bytes": L, "skipped": "time budget"})
                continue
            texts = excerpts(ctx["raw"], B, L, seed=B * 7919 + L)
            total = nbytes_of(texts)
            mref = [list(r) for r in bytes_ref.encode_ordinary_batch(texts, num_threads=ps.threads)]
            data_dev, lens_dev = ours.put(*bb.pack_strings(texts, max_len=L))
            first_ids = None
            for bs in ctx["paper_blocks"]:
                r = {"block_size": bs, "batch": B, "bytes": L, "total_bytes": total,
                     "tokens": sum(map(len, mref))}
                try:
                    ids, counts = ours.run_checked("bytes", bs, L, data_dev, lens_dev)
                    ok, detail = compare_rows(ids, counts, mref, L)
                    if first_ids is None:
                        first_ids = ids
                    r.update(exact_vs_tiktoken=ok, check=detail,
                             same_as_first_block_size=bool(np.array_equal(ids, first_ids)))
                    r.update(time_ours(ours, "bytes", bs, L, data_dev, lens_dev, total, target_s=0.2))
                    r["merge_s"] = r["device_s"]
                except Exception as e:  # noqa: BLE001
                    r["error"] = f"{type(e).__name__}: {str(e)[:300]}"
                out["rows"].append(r)
            # the paper's baselines: tiktoken (GPT-2 pattern) and HF tokenizers, same inputs
            base = {"batch": B, "bytes": L, "total_bytes": total}
            eref = ps.reference_ids(texts)
            for name, p in ps.peers.items():
                ok, detail = (True, "reference") if name == "tiktoken" else peers_mod.check(p, texts, eref)
                if not ok:
                    base[name] = {"exact_vs_tiktoken": False, "check": detail}
                    continue
                m = measure(lambda: p.encode(texts), target_s=0.2, max_reps=20)
                base[name] = {"s": m["s"], "MBps": total / m["s"] / 1e6, "reps": m["reps"]}
            out["baselines"].append(base)
            cells = [r for r in out["rows"][-len(ctx["paper_blocks"]):] if "device_MBps" in r]
            log(f"  B={B:5d} L={L:5d} " + " ".join(
                f"bs{r['block_size']}={r['device_MBps']:.0f}MB/s({r['device_s'] * 1e6:.0f}us)"
                f"{'' if r['exact_vs_tiktoken'] else '(!)'}" for r in cells) + " | " + " ".join(
                f"{k}={v['MBps']:.1f}" for k, v in base.items() if isinstance(v, dict) and "MBps" in v))
            ctx["save"]()


def part_scaling(ctx, res, budget):
    """r50k, bytes and exact modes: time vs string length, and vs batch size."""
    ours = ctx["ours"]("r50k")
    bb = ctx["bb"]
    refs = {"exact": peers_mod.reference_encoding(ctx["data"], "r50k"),
            "bytes": peers_mod.reference_encoding(ctx["data"], "r50k", ctx["testing"].BYTES_MODE_PATTERN)}
    out = {"vocab": "r50k", "notes": ours.notes, "length": [], "batch": [],
           "block_sizes": list(ctx["scale_blocks"])}
    res["scaling"] = out
    threads = ctx["threads"]

    def point(kind, B, L, seed):
        texts = excerpts(ctx["raw"], B, L, seed=seed)
        total = nbytes_of(texts)
        data_dev, lens_dev = ours.put(*bb.pack_strings(texts, max_len=L))
        pt = {"batch": B, "bytes": L, "total_bytes": total,
              "workspace": "global" if L > ctx["smem_max"] else "shared"}
        eref = refs["exact"].encode_ordinary_batch(texts, num_threads=threads)
        m = measure(lambda: refs["exact"].encode_ordinary_batch(texts, num_threads=threads),
                    target_s=0.2, max_reps=20)
        pt["tiktoken"] = {"s": m["s"], "MBps": total / m["s"] / 1e6}
        refs_cache: dict = {}
        for mode in ("bytes", "exact"):
            for bs in ctx["scale_blocks"]:
                key = (kind, mode, bs, B if kind == "length" else None)
                if key in stopped:
                    pt[f"{mode}_{bs}"] = {"skipped": stopped[key]}
                    continue
                if budget.left() < 5:
                    pt[f"{mode}_{bs}"] = {"skipped": "time budget"}
                    continue
                try:
                    got = ours.run_checked(mode, bs, L, data_dev, lens_dev)
                    if got is None:
                        pt[f"{mode}_{bs}"] = {"unavailable": ours.unavailable[mode]}
                        continue
                    n = B if mode == "exact" else max(1, min(B, BYTES_CHECK_BYTES // L))
                    if mode not in refs_cache:
                        refs_cache[mode] = eref if mode == "exact" else \
                            refs["bytes"].encode_ordinary_batch(texts[:n], num_threads=threads)
                    ids, counts = got
                    ok, detail = compare_rows(ids[:n], counts[:n], [list(r) for r in refs_cache[mode]], L)
                    r = {"exact_vs_tiktoken": ok, "check": detail + (f" (first {n} of {B} rows)" if n < B else "")}
                    r.update(time_ours(ours, mode, bs, L, data_dev, lens_dev, total, target_s=0.2))
                    # the next point of a series is 4x longer (or 2x larger): stop when it
                    # would take more than SLOW_CALL_S even if it grew only linearly
                    growth = 4 if kind == "length" else 2
                    if r["latency_s"] * growth > SLOW_CALL_S:
                        stopped[key] = (f"skipped: the previous point took {r['latency_s']:.2f} s "
                                        f"(> {SLOW_CALL_S} s / {growth} predicted)")
                except Exception as e:  # noqa: BLE001
                    r = {"error": f"{type(e).__name__}: {str(e)[:300]}"}
                    stopped[key] = "an earlier point failed"
                pt[f"{mode}_{bs}"] = r
        return pt

    stopped: dict = {}
    for B in ctx["scale_length_batches"]:
        for L in ctx["scale_lengths"]:
            if B * L > SCALE_MAX_TOTAL_BYTES or L >= len(ctx["raw"]):
                continue
            pt = point("length", B, L, seed=L + B)
            out["length"].append(pt)
            log_scale(pt)
            ctx["save"]()
    for B in ctx["scale_batches"]:
        L = ctx["scale_batch_len"]
        pt = point("batch", B, L, seed=B)
        out["batch"].append(pt)
        log_scale(pt)
        ctx["save"]()


def log_scale(pt):
    cells = []
    for k, v in pt.items():
        if isinstance(v, dict) and k != "tiktoken":
            if "device_s" in v:
                cells.append(f"{k}={v['device_s'] * 1e6:.0f}us{'' if v['exact_vs_tiktoken'] else '(!)'}")
            else:
                cells.append(f"{k}=({next(iter(v.values()))!s:.40})")
    log(f"  B={pt['batch']:5d} L={pt['bytes']:8d} tiktoken={pt['tiktoken']['s'] * 1e6:.0f}us " + " ".join(cells))


# --------------------------------------------------------------------------------------------
def meta(ctx, args):
    jax = ctx["jax"]
    dev = ctx["device"]
    m = {
        "date_utc": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "parts": ctx["parts"], "quick": ctx["quick"],
        "device": getattr(dev, "device_kind", str(dev)), "platform": dev.platform,
        "jax": jax.__version__, "python": platform.python_version(),
        "host": socket.gethostname(), "cpu_count": os.cpu_count(), "threads": ctx["threads"],
        "blockbpe_jax": getattr(ctx["bb"], "__version__", "?"),
        "has_cuda_module": bool(getattr(ctx["bb"], "HAS_CUDA_MODULE", False)),
        "data_dir": str(ctx["data"]),
        "env": {k: os.environ.get(k) for k in ("XLA_FLAGS", "RAYON_NUM_THREADS", "BLOCKBPE_DATA")
                if os.environ.get(k)},
    }
    try:
        import jaxlib
        m["jaxlib"] = jaxlib.__version__
    except Exception:  # noqa: BLE001
        pass
    for cmd, key in ((["git", "rev-parse", "HEAD"], "git_commit"),
                     (["git", "status", "--porcelain", "--untracked-files=no"], "git_dirty")):
        try:
            r = subprocess.run(cmd, cwd=HERE.parent, capture_output=True, text=True, timeout=10)
            if r.returncode == 0:
                if key == "git_commit":
                    m[key] = r.stdout.strip()
                elif "git_commit" in m:
                    m[key] = bool(r.stdout.strip())
        except Exception:  # noqa: BLE001
            pass
    if dev.platform == "gpu":
        try:
            r = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total",
                                "--format=csv,noheader"], capture_output=True, text=True, timeout=20)
            m["nvidia_smi"] = r.stdout.strip()
        except Exception:  # noqa: BLE001
            pass
    return m


def device_memory(dev):
    try:
        s = dev.memory_stats() or {}
        return {k: int(s[k]) for k in ("bytes_in_use", "peak_bytes_in_use", "bytes_limit") if k in s}
    except Exception:  # noqa: BLE001
        return {}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.environ.get("OUT", str(HERE / "results")))
    ap.add_argument("--only", default=os.environ.get("BLOCKBPE_BENCH_ONLY", ""),
                    help=f"comma list of parts ({','.join(PARTS)}); default all")
    ap.add_argument("--quick", action="store_true", help="tiny sizes on the default device (CPU check)")
    ap.add_argument("--threads", type=int, default=os.cpu_count())
    ap.add_argument("--budget-s", type=float,
                    default=float(os.environ["BLOCKBPE_BENCH_BUDGET_S"]) if os.environ.get("BLOCKBPE_BENCH_BUDGET_S") else None,
                    help="wall-clock budget; cells past it are recorded as skipped (default 420, quick 300)")
    ap.add_argument("--scale-blocks", default="256,1024", help="block sizes of the scaling sweeps")
    ap.add_argument("--no-plots", action="store_true")
    args = ap.parse_args(argv)

    parts = [p.strip() for p in args.only.split(",") if p.strip()] or list(PARTS)
    bad = [p for p in parts if p not in PARTS]
    if bad:
        ap.error(f"unknown part(s) {bad}; choose from {PARTS}")
    parts = [p for p in PARTS if p in parts]
    budget = Budget(args.budget_s or (300 if args.quick else 420))
    os.environ.setdefault("RAYON_NUM_THREADS", str(args.threads))

    import jax

    import blockbpe_jax as bb
    from blockbpe_jax import testing

    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    tag = "all" if len(parts) == len(PARTS) else "_".join(parts)
    if args.quick:
        tag = "quick_" + tag
    out_path = out_dir / f"results_{tag}.json"

    data = testing.data_dir()
    raw = (data / "corpus" / "war_and_peace_en.txt").read_bytes()
    device = jax.devices()[0]
    toks, ours_cache = {}, {}

    def tokenizer(name):
        if name not in toks:
            toks[name] = bb.Tokenizer.from_file(data / "vocab" / testing.VOCAB_FILES[name][0])
        return toks[name]

    def ours(name):
        if name not in ours_cache:
            ours_cache[name] = Ours(bb, tokenizer(name), device, name)
        return ours_cache[name]

    res: dict = {}
    ctx = dict(bb=bb, jax=jax, testing=testing, data=data, raw=raw, device=device,
               quick=args.quick, threads=args.threads, parts=parts, tokenizer=tokenizer, ours=ours,
               smem_max=int(bb.native.cpu.smem_max_len),
               scale_blocks=tuple(int(x) for x in args.scale_blocks.split(",")),
               peer_grid=PEER_GRID, paper_blocks=PAPER_BLOCKS, paper_batches=PAPER_BATCHES,
               paper_lengths=PAPER_LENGTHS, scale_lengths=SCALE_LENGTHS,
               scale_length_batches=SCALE_LENGTH_BATCHES, scale_batches=SCALE_BATCHES,
               scale_batch_len=SCALE_BATCH_LEN)
    if args.quick:
        ctx.update(QUICK)
        ctx["scale_blocks"] = ctx["scale_blocks"][:1]
    res["meta"] = meta(ctx, args)
    res["timings"] = {}

    def save():
        res["meta"]["elapsed_s"] = round(budget.elapsed(), 1)
        try:
            res["targets"] = summarize_targets(res)
        except Exception as e:  # noqa: BLE001
            res["targets"] = {"error": repr(e)[:300]}
        res["meta"]["device_memory"] = device_memory(device)
        tmp = out_path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(res, indent=1, default=str))
        tmp.replace(out_path)
    ctx["save"] = save

    log(f"blockbpe_jax benchmarks: parts={parts} device={res['meta']['device']} "
        f"jax={jax.__version__} threads={args.threads} budget={budget.seconds:.0f}s -> {out_path}")
    fns = {"memory": lambda: part_memory(ctx, res), "peers": lambda: part_peers(ctx, res, budget),
           "paper": lambda: part_paper(ctx, res, budget), "scaling": lambda: part_scaling(ctx, res, budget)}
    failed = []
    for p in parts:
        t = time.perf_counter()
        log(f"== {p} (t={budget.elapsed():.0f}s)")
        try:
            fns[p]()
        except Exception as e:  # noqa: BLE001
            traceback.print_exc()
            res.setdefault("errors", {})[p] = f"{type(e).__name__}: {e}"[:2000]
            failed.append(p)
        res["timings"][p] = round(time.perf_counter() - t, 1)
        save()
    log(f"wrote {out_path} ({budget.elapsed():.0f} s)")
    if not args.no_plots:
        try:
            for png in plot.make_all([out_path], out_dir):
                log(f"wrote {png}")
        except ImportError as e:
            log(f"no plots ({e}); make them later with: python3 benchmarks/plot.py {out_path.name}")
        except Exception:  # noqa: BLE001
            traceback.print_exc()
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
