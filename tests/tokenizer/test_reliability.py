"""Reliability of the CPU path (issue P5): concurrency, several tokenizers and shapes under
jit, no leaks, large inputs.

* several Python threads call `encode` at once (eager, jitted, encode_batch, a fresh tokenizer
  whose table caches are filled concurrently): every result equals the single-threaded one;
* two tokenizers (tables passed as pytree arguments) in one jitted function;
* one jitted function called with many (B, L, T) shapes: correct each time, one compile per
  shape;
* no leak: process RSS over 1,000 CPU calls (tolerance justified at the test);
* large inputs: one 64 MiB document and 100,000 short strings, equal to tiktoken, with time and
  peak memory measured and printed (run with `-s` to see them) and bounded.
"""

from __future__ import annotations

import gc
import os
import random
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import testing

from helpers import gpu_devices, load_tokenizer, vocab_path

CPU = jax.devices("cpu")[0]
MiB = 1 << 20
PAGE = os.sysconf("SC_PAGE_SIZE")


@pytest.fixture(autouse=True)
def _needs_data(data_dir):
    """Every test here needs the shared vocabularies and corpora (skips when absent)."""


def rss() -> int:
    """Resident set size of this process now, in bytes."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


class PeakRss:
    """Samples RSS every few milliseconds in a thread: peak minus the RSS at entry."""

    def __enter__(self):
        gc.collect()
        self.start = self.peak = rss()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, rss())
            time.sleep(0.005)

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, rss())
        self.delta = self.peak - self.start
        return False


def tiktoken_exact(name: str):
    tok = load_tokenizer(name, "tiktoken")
    return testing.tiktoken_oracle(name, tok, tok.vocab.pattern)


def tiktoken_bytes(name: str):
    return testing.tiktoken_oracle(name, load_tokenizer(name, "tiktoken"), testing.BYTES_MODE_PATTERN)


def corpus_texts(count: int, lo: int, hi: int, seed: int) -> list[bytes]:
    """`count` excerpts of lo..hi bytes drawn from every corpus (valid UTF-8)."""
    pool = []
    for k, path in enumerate(testing.corpus_paths()):
        pool += testing.excerpts(testing.read_corpus(path)[:300_000], lo, hi, seed=seed + k)
    return random.Random(seed).sample(pool, count)


def rows(ids, counts) -> list[list[int]]:
    ids, counts = np.asarray(ids), np.asarray(counts)
    return [ids[k, : min(int(counts[k]), ids.shape[1])].tolist() for k in range(ids.shape[0])]


# ---------------------------------------------------------------------------------------------
# Concurrency
# ---------------------------------------------------------------------------------------------


def test_threads_encode_at_once():
    cl100k = load_tokenizer("cl100k", "tiktoken")
    o200k_hf = load_tokenizer("o200k", "json")
    # A fresh Tokenizer: its per-(device, specials) table caches get filled by the threads.
    fresh = bb.Tokenizer(load_tokenizer("r50k", "tiktoken").vocab)
    texts = corpus_texts(96, 1, 2000, seed=11)
    special = "<|endoftext|>"
    with_specials = [t.decode() + special + t[:40].decode("utf-8", "ignore") for t in texts[:32]]
    data, lengths = bb.pack_strings(texts, max_len=2048)
    tables = cl100k.tables("none", device=CPU)
    jitted = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=512))

    jobs = {
        "eager-cl100k": lambda: bb.encode(data, lengths, cl100k, max_tokens=2048),
        "eager-cl100k-T64": lambda: bb.encode(data, lengths, cl100k, max_tokens=64, pad_id=-1),
        "jit-cl100k": lambda: jitted(data, lengths, tables),
        "batch-o200k-hf": lambda: o200k_hf.encode_batch(texts, max_len=2048, device=CPU),
        "bytes-cl100k": lambda: cl100k.encode_batch(texts[:48], max_len=2048, mode="bytes", device=CPU),
        "fresh-r50k-all": lambda: fresh.encode_batch(with_specials, allowed_special="all", device=CPU),
        "fresh-r50k-none": lambda: fresh.encode_batch(with_specials, device=CPU),
        "fresh-r50k-subset": lambda: fresh.encode_batch(with_specials, allowed_special={special}, device=CPU),
    }

    def run(job):
        out = jobs[job]()
        return np.asarray(out.ids).copy(), np.asarray(out.counts).copy()

    # The single-threaded results, checked against tiktoken where cheap to do so.
    expected = {job: run(job) for job in jobs}
    strs = [t.decode() for t in texts]
    assert rows(*expected["eager-cl100k"]) == tiktoken_exact("cl100k").encode_ordinary_batch(strs)
    assert rows(*expected["fresh-r50k-all"]) == [
        tiktoken_exact("r50k").encode(t, allowed_special="all") for t in with_specials
    ]
    assert rows(*expected["bytes-cl100k"]) == tiktoken_bytes("cl100k").encode_ordinary_batch(strs[:48])
    fresh = bb.Tokenizer(fresh.vocab)  # empty caches again for the threaded run

    threads = 8
    start = threading.Barrier(threads)
    order = list(jobs) * 3
    random.Random(0).shuffle(order)

    def worker(w):
        start.wait()  # all threads enter encode together
        return [(job, run(job)) for job in order[w::threads]]

    with ThreadPoolExecutor(threads) as pool:
        results = [r for rs in pool.map(worker, range(threads)) for r in rs]
    assert len(results) == len(order)
    for job, (ids, counts) in results:
        np.testing.assert_array_equal(ids, expected[job][0], err_msg=job)
        np.testing.assert_array_equal(counts, expected[job][1], err_msg=job)


# ---------------------------------------------------------------------------------------------
# jit: two tokenizers, many shapes
# ---------------------------------------------------------------------------------------------


def test_two_tokenizers_in_one_jitted_function():
    cl100k = load_tokenizer("cl100k", "tiktoken")
    llama3 = load_tokenizer("llama3", "json")
    texts = corpus_texts(40, 1, 900, seed=5)
    specials = ["<|endoftext|>", "<|begin_of_text|>"]
    texts = [t + specials[k % 2].encode() + t[:20] if k % 3 == 0 else t for k, t in enumerate(texts)]
    data, lengths = bb.pack_strings(texts, max_len=1024)

    @jax.jit
    def both(d, l, t_exact, t_all, t_bytes):
        a = bb.encode(d, l, t_exact, max_tokens=1024)
        b = bb.encode(d, l, t_all, max_tokens=1024, pad_id=-1)
        c = bb.encode(d, l, t_bytes, max_tokens=300, mode="bytes")
        return a, b, c

    a, b, c = both(
        data, lengths, cl100k.tables(device=CPU), llama3.tables("all", device=CPU), llama3.tables(device=CPU)
    )
    strs = [t.decode() for t in texts]
    assert rows(*a) == tiktoken_exact("cl100k").encode_ordinary_batch(strs)
    from tokenizers import Tokenizer

    hf = Tokenizer.from_file(str(vocab_path("llama3", "json")))
    assert rows(*b) == [e.ids for e in hf.encode_batch(strs, add_special_tokens=False)]
    bytes_ref = tiktoken_bytes("llama3").encode_ordinary_batch(strs)
    assert np.asarray(c.counts).tolist() == [len(r) for r in bytes_ref]
    assert rows(*c) == [r[:300] for r in bytes_ref]
    # Each tokenizer's result equals its own eager call: the two tables do not mix.
    eager = bb.encode(data, lengths, cl100k, max_tokens=1024)
    np.testing.assert_array_equal(np.asarray(a.ids), np.asarray(eager.ids))


def test_repeated_jit_with_different_shapes():
    tok = load_tokenizer("o200k", "tiktoken")
    enc = tiktoken_exact("o200k")
    f = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=d.shape[1] // 4 + 1, pad_id=7))
    g = jax.jit(lambda d, l, t, T: bb.encode(d, l, t, max_tokens=T, pad_id=7), static_argnums=3)
    tables = tok.tables(device=CPU)
    pool = corpus_texts(64, 1, 4000, seed=3) + [b"", b" ", "é".encode()]
    # (B, L, T): single rows, wide batches, T = 1, T > L, L past the 8 KiB shared-memory limit.
    shapes = [
        (1, 16, 4),
        (3, 64, 64),
        (8, 256, 16),
        (2, 1024, 300),
        (5, 16, 1),
        (16, 4096, 2048),
        (1, 9000, 3000),
        (7, 128, 500),
        (1, 16, 4),
        (8, 256, 16),
    ]
    rng = random.Random(1)
    seen = set()
    for B, L, T in shapes:
        texts = [t[:L] for t in rng.sample(pool, B)]
        texts = [t[: len(t.decode("utf-8", "ignore").encode())] for t in texts]  # whole characters
        data, lengths = bb.pack_strings(texts, max_len=L)
        refs = enc.encode_ordinary_batch([t.decode() for t in texts])
        for fn, out in (("f", f(data, lengths, tables)), ("g", g(data, lengths, tables, T))):
            width = L // 4 + 1 if fn == "f" else T
            ids, counts = np.asarray(out.ids), np.asarray(out.counts)
            assert ids.shape == (B, width) and counts.tolist() == [len(r) for r in refs], (fn, B, L, T)
            for k, ref in enumerate(refs):
                kept = min(len(ref), width)
                assert ids[k, :kept].tolist() == ref[:kept], (fn, B, L, T, k)
                assert (ids[k, kept:] == 7).all()
        seen.add((B, L, T))
    # One compile per distinct shape, none for the repeats.
    assert g._cache_size() == len(seen)
    assert f._cache_size() == len({(B, L) for B, L, _ in seen})


# ---------------------------------------------------------------------------------------------
# Leaks
# ---------------------------------------------------------------------------------------------


def test_no_leak_over_1000_cpu_calls():
    """RSS after 1,000 calls (after a warm-up) within 16 MiB of RSS before them.

    Each call packs 64 strings into uint8[64, 2048] (128 KiB) and returns int32[64, 512]
    (128 KiB of ids), so losing either buffer per call would add >= 125 MiB over 1,000 calls,
    and losing the CPU handler's per-call scratch (11 bytes per input byte of each row) more.
    Allocator caching and JAX's compilation caches (all shapes are compiled in the warm-up)
    account for a few MiB; 16 MiB separates the two by a wide margin, and also catches a leak
    of 16 KiB or more per call."""
    tok = load_tokenizer("cl100k", "tiktoken")
    texts = [t.decode() for t in corpus_texts(64, 200, 2000, seed=9)]
    tables = tok.tables(device=CPU)
    jitted = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=512))
    expected = None

    def call(i):
        nonlocal expected
        data, lengths = bb.pack_strings(texts, max_len=2048)
        kind = i % 3
        if kind == 0:
            out = bb.encode(data, lengths, tok, max_tokens=512)
        elif kind == 1:
            out = jitted(data, lengths, tables)
        else:
            out = tok.encode_batch(texts, max_len=2048, max_tokens=512, device=CPU)
        counts = np.asarray(out.counts)
        if expected is None:
            expected = counts.copy()
        assert (counts == expected).all()

    for i in range(60):  # warm-up: compile everything, reach the allocator's steady state
        call(i)
    gc.collect()
    before = rss()
    samples = []
    for i in range(1000):
        call(i)
        if i % 100 == 99:
            gc.collect()
            samples.append(rss())
    growth = samples[-1] - before
    print(
        f"\nRSS over 1,000 CPU calls: before {before / MiB:.1f} MiB, after {samples[-1] / MiB:.1f} MiB "
        f"(growth {growth / MiB:+.2f} MiB); every 100 calls: "
        + " ".join(f"{(s - before) / MiB:+.1f}" for s in samples)
    )
    assert growth < 16 * MiB, f"RSS grew by {growth / MiB:.1f} MiB over 1,000 calls"


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
def test_gpu_threads_and_device_memory_over_1000_calls():
    """On the GPU: 8 Python threads calling one jitted encode at once all get the CPU handler's
    ids; then 1,000 more calls leave the device's bytes in use where they were (within 1 MiB:
    each call's outputs are 64 x 512 ids, 128 KiB, plus a 384 KiB workspace, so a leak of either
    would show as >= 125 MiB)."""
    tok = load_tokenizer("cl100k", "tiktoken")
    gpu = gpu_devices()[0]
    raw = testing.read_corpus(next(p for p in testing.corpus_paths() if p.name.startswith("war")))
    texts = [raw[i * 512 : (i + 1) * 512] for i in range(64)]
    data, lengths = bb.pack_strings(texts, max_len=512)
    ref = bb.encode(data, lengths, tok.tables(device=jax.devices("cpu")[0]), max_tokens=512)
    ref_ids = np.asarray(ref.ids)
    d, l = jax.device_put(data, gpu), jax.device_put(lengths, gpu)
    tables = tok.tables(device=gpu)
    f = jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=512, check_lengths=False).ids)
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda _: np.asarray(f(d, l, tables)), range(64)))
    assert all(np.array_equal(o, ref_ids) for o in outs)
    stats = gpu.memory_stats()
    if not stats or "bytes_in_use" not in stats:
        pytest.skip("this JAX backend reports no device memory statistics")
    f(d, l, tables).block_until_ready()
    before = gpu.memory_stats()["bytes_in_use"]
    for _ in range(1000):
        f(d, l, tables).block_until_ready()
    after = gpu.memory_stats()["bytes_in_use"]
    print(f"\ndevice bytes in use over 1,000 GPU calls: {before} -> {after} ({after - before:+d})")
    assert after - before < MiB, f"device memory grew by {(after - before) / MiB:.1f} MiB"


# ---------------------------------------------------------------------------------------------
# Large inputs
# ---------------------------------------------------------------------------------------------


def _document(size: int) -> bytes:
    """`size` bytes (cut on a character boundary) of all the corpora concatenated: prose, wiki
    text, Python source, JSON lines."""
    order = [
        "war_and_peace_en.txt",
        "wikitext2_test.txt.gz",
        "code_python_stdlib.py.txt.gz",
        "gsm8k_train.jsonl.gz",
        "gsm8k_test.jsonl",
    ]
    paths = {p.name: p for p in testing.corpus_paths()}
    raw = b"\n".join(testing.read_corpus(paths[name]) for name in order)
    while len(raw) < size:
        raw += raw
    end = size
    while (raw[end] & 0xC0) == 0x80:
        end -= 1
    return raw[:end]


def test_64mib_document_on_cpu():
    """One 64 MiB document in one row, exact mode, equal to tiktoken.

    Bounds (measured on a 2-core CI machine, see the printout): time 120 s, extra memory of
    the encode 1.5 GiB. The input is 64 MiB, the ids (T = L / 2) 128 MiB (and 128 MiB more for
    the NumPy copy); the CPU handler's scratch is 13 bytes per input byte (tokens, ranks,
    flags, pre-tokenizer keys: ~830 MiB) while the row is encoded."""
    tok = load_tokenizer("cl100k", "tiktoken")
    doc = _document(64 * MiB)
    L = len(doc)
    data, lengths = bb.pack_strings([doc], max_len=64 * MiB)
    T = 32 * MiB
    bb.encode(data[:, :16], np.minimum(lengths, 16), tok, max_tokens=8).ids.block_until_ready()
    with PeakRss() as mem:
        t0 = time.perf_counter()
        out = bb.encode(data, lengths, tok, max_tokens=T)
        ids, counts = np.asarray(out.ids), np.asarray(out.counts)  # includes the compile
        ours_s = time.perf_counter() - t0
    del out
    t0 = time.perf_counter()
    ref = np.asarray(tiktoken_exact("cl100k").encode_ordinary(doc.decode()), dtype=np.int32)
    ref_s = time.perf_counter() - t0
    print(
        f"\n64 MiB document ({L} bytes, {len(ref)} tokens): ours {ours_s:.2f} s "
        f"({L / MiB / ours_s:.1f} MiB/s incl. compile), peak extra RSS {mem.delta / MiB:.0f} MiB; "
        f"tiktoken {ref_s:.2f} s"
    )
    assert int(counts[0]) == len(ref) and len(ref) < T
    np.testing.assert_array_equal(ids[0, : len(ref)], ref)
    assert (ids[0, len(ref) :] == 0).all()
    assert ours_s < 120, f"64 MiB took {ours_s:.1f} s"
    assert mem.delta < 1536 * MiB, f"64 MiB used {mem.delta / MiB:.0f} MiB"


def test_100k_short_strings_on_cpu():
    """100,000 strings of 1-256 bytes (non-blank corpus lines) in one batch, equal to tiktoken.

    Bounds: time 60 s, extra memory 512 MiB (inputs uint8[100000, 256] = 24 MiB, ids
    int32[100000, 256] = 98 MiB)."""
    tok = load_tokenizer("cl100k", "tiktoken")
    lines = []
    for path in testing.corpus_paths():
        for line in testing.read_corpus(path).split(b"\n"):
            if line.strip():
                lines.append(line[:256].decode("utf-8", "ignore").encode())  # whole characters
    rng = random.Random(4)
    texts = [rng.choice(lines) for _ in range(100_000)]
    strs = [t.decode() for t in texts]
    bb.encode(*bb.pack_strings(strs[:2], max_len=256), tok, max_tokens=256).ids.block_until_ready()
    with PeakRss() as mem:
        t0 = time.perf_counter()
        data, lengths = bb.pack_strings(strs, max_len=256)
        t1 = time.perf_counter()
        out = bb.encode(data, lengths, tok, max_tokens=256)
        ids, counts = np.asarray(out.ids), np.asarray(out.counts)
        t2 = time.perf_counter()
    t3 = time.perf_counter()
    refs = tiktoken_exact("cl100k").encode_ordinary_batch(strs, num_threads=os.cpu_count() or 1)
    ref_s = time.perf_counter() - t3
    total_bytes = int(lengths.sum())
    print(
        f"\n100,000 strings ({total_bytes / MiB:.1f} MiB, {sum(map(len, refs))} tokens): pack "
        f"{t1 - t0:.2f} s + encode {t2 - t1:.2f} s (incl. compile), peak extra RSS "
        f"{mem.delta / MiB:.0f} MiB; tiktoken encode_ordinary_batch {ref_s:.2f} s"
    )
    assert counts.tolist() == [len(r) for r in refs]
    assert rows(ids, counts) == refs
    assert t2 - t0 < 60
    assert mem.delta < 512 * MiB
