"""The corpus job's engine (blockbpe_jax/corpus/engine.py, corpus/device.py, corpus/documents.py): calls
sorted by width and put back in input order, dense rows encoded again at full width into a
grown buffer, window shapes bucketed and compiled once, the persistent compilation cache's
switch, call planning, and the GPU job against the CPU job (a second process's executables:
test_executable_cache.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import jax
import numpy as np
import pytest

from blockbpe_jax.corpus import job as corpus, documents, device as window_device, engine as window_encode
from blockbpe_jax import native, staging
from blockbpe_jax.corpus.shards.flat import ArraysWriter
from blockbpe_jax.corpus.spares import Spares

import corpus_shared
from corpus_shared import encode_batch_ids

# corpus_shared's module-scoped fixtures, requested by name below
root, cl100k, r50k, war_and_peace = (
    corpus_shared.root,
    corpus_shared.cl100k,
    corpus_shared.r50k,
    corpus_shared.war_and_peace,
)


@pytest.mark.parametrize("pack_width", [0, 1024])
def test_sorted_calls_and_dense_rows_keep_input_order(tmp_path, r50k, pack_width):
    """Documents of very different lengths (sorted into calls by width, put back in input
    order) and rows with more tokens than half their width (emoji: encoded again at full
    width) give the ids of `encode_batch`, in input order, across several windows; with
    packing, the short ones share rows and the others take those paths."""
    from blockbpe_jax.corpus import documents

    rng = np.random.default_rng(0)
    words = ["alpha", "beta", "🎉🎉🎉", "日本語", "  ", "1234567", "\t", "🇯🇵👩‍👩‍👧"]
    docs = [
        " ".join(rng.choice(words, int(n))).encode()
        for n in rng.integers(1, 400, 300).tolist() + [5000, 1, 2]
    ]
    docs[10] = "\U00020000".encode() * 300  # 1200 bytes, 1200 tokens: more than width // 2
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(docs) + b"\n")
    windows = list(documents.iter_windows([src], window_bytes=4096))
    assert len(windows) > 5 and [b for w in windows for b in w.blobs] == docs
    assert [p for w in windows for p in w.positions.tolist()] == list(range(1, len(docs) + 1))
    out = tmp_path / "o" / "s"
    corpus.encode_files(r50k, [src], out, batch_bytes=8192, pack_width=pack_width)
    assert [a.tolist() for a in corpus.read_shards(out)] == encode_batch_ids(r50k, docs)


def _spy_encode_into(monkeypatch) -> list[tuple[int, int, int, int, int]]:
    """Records (rows, width, T or docs, flat bytes, table entries) of every encode call of the
    corpus job (T: the ids kept per row; docs: a packed call's separator slots), in the order
    of the window FFI calls' plans."""
    real, calls = window_device.CompiledWindows.__call__, []

    def spy(self, flat, table, raw, plan, workspace):
        calls.extend((int(c[0]), int(c[1]), int(c[5] or c[2]), flat.size, table.shape[1]) for c in plan)
        return real(self, flat, table, raw, plan, workspace)

    monkeypatch.setattr(window_device.CompiledWindows, "__call__", spy)
    return calls


def test_dense_rows_redone_into_a_grown_buffer(tmp_path, r50k, monkeypatch):
    """A window whose every row has more tokens than half its width: all rows are encoded
    again at full width after the first pass, into the window's buffer grown past its
    first size; the ids are encode_batch's, in input order, empty documents included."""
    calls = _spy_encode_into(monkeypatch)
    fns = window_device.device_functions()
    grown = []
    real_grow = fns.grow
    monkeypatch.setattr(fns, "grow", lambda raw, size: grown.append(size) or real_grow(raw, size=size))
    monkeypatch.setattr(window_device.WindowBuffers, "_spare", Spares())
    docs = [("\U00020000" * (40 + i) + " x").encode() for i in range(16)]
    docs[3] = b""
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d.decode()}) + "\n" for d in docs), encoding="utf-8")
    corpus.encode_files(r50k, [src], tmp_path / "o" / "s", jsonl_field="text", batch_bytes=4096, pack_width=0)
    want = encode_batch_ids(r50k, docs)
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "o" / "s")] == want
    assert all(len(w) > len(d) // 2 for w, d in zip(want, docs) if d)
    assert [c[:3] for c in calls] == [(1, 16, 17), (15, 256, 128), (15, 256, 257)] and grown == [8192]


def test_later_jobs_reuse_every_window_buffer(tmp_path, r50k, monkeypatch):
    """Every window byte buffer a job had in flight (the reader joins each block into one, which
    is given back once its ids are read) is kept for the next jobs (`WindowBuffers.KEEP`):
    later jobs allocate only when they have more in flight than any job before (timing), so
    over four jobs no more are made than are kept (on a GPU each is a page-locked allocation of
    milliseconds; keeping 6 of the 7-8 in flight made 2 in every later job)."""
    monkeypatch.setattr(window_device.WindowBuffers, "_spare", Spares())
    made = []
    real = staging.FlatSlot.__init__
    monkeypatch.setattr(
        staging.FlatSlot, "__init__", lambda self, *a, **k: made.append(1) or real(self, *a, **k)
    )
    rng = np.random.default_rng(2)
    words = ["alpha", "beta", "gamma", "🎉", "1234"]
    docs = [" ".join(rng.choice(words, int(n))) for n in rng.integers(1, 12, 20000)]  # (windows of one size)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    per_job = []
    for _ in range(4):
        made.clear()
        ids, offsets = r50k.encode_files_to_arrays([src], jsonl_field="text", window_bytes=16384)
        per_job.append(len(made))
    assert per_job[0] > 1 and sum(per_job) <= window_device.WindowBuffers.KEEP[window_device.FLAT], per_job
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == encode_batch_ids(
        r50k, [d.encode() for d in docs]
    )


def test_window_calls_are_one_executable_compiled_once(tmp_path, r50k, monkeypatch):
    """Over many windows, every call sees one or two sizes of the window's bytes and document
    table, so the job compiles one or two executables of its window's calls (each call's rows
    and width are a runtime plan), and the ids in input order one or two sizes on a GPU (the
    host reads back only the window's); a second run of the job compiles nothing."""
    rng = np.random.default_rng(1)
    words = ["alpha", "beta", "gamma", "🎉", "1234", "\n"]
    docs = [" ".join(rng.choice(words, int(n))).encode() for n in rng.integers(1, 300, 3000)]
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(docs) + b"\n")
    windows = list(documents.iter_windows([src], window_bytes=8192))
    assert len(windows) > 50
    calls = _spy_encode_into(monkeypatch)

    def executables() -> dict:
        kinds = [key[0] if isinstance(key[0], str) else key[0][0] for key in window_device._ahead]
        return {kind: kinds.count(kind) for kind in ("finalize", "gather", "encode_window")}

    before = executables()

    corpus.encode_documents(
        r50k, iter(windows), shards_writer(tmp_path / "a", r50k), [src], batch_bytes=16384, pack_width=0
    )
    assert len({c[1] for c in calls}) > 3 and len({c[0] for c in calls}) > 3  # (widths, row counts)
    assert len({c[3] for c in calls}) <= 2 and len({c[4] for c in calls}) <= 2, {c[3:] for c in calls}
    compiled = executables()
    assert 1 <= compiled["encode_window"] - before["encode_window"] <= 2
    assert compiled["gather"] - before["gather"] <= 2
    if jax.devices()[0].platform != "cpu":  # (on the CPU backend finalize's size follows the window)
        assert compiled["finalize"] - before["finalize"] <= 2
    arrays = ArraysWriter(r50k.vocab.n_vocab, src.stat().st_size)
    corpus.encode_documents(r50k, iter(windows), arrays, [src], batch_bytes=16384, pack_width=0)
    assert executables() == compiled
    ids, offsets = arrays.finish({})
    lines = [b for w in windows for b in w.blobs]
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == encode_batch_ids(r50k, lines)
    for n in [0, 1, 4096, 4097, 70_000, 1 << 20, (1 << 20) + 1, 12_345_678]:
        size = window_device.size_bucket(n)
        assert size >= n and size % 4096 == 0 and size <= max(4096, n + max(4096, n // 8))


def shards_writer(prefix: Path, tok):
    from blockbpe_jax.corpus.shards.flat import FlatWriter

    prefix.mkdir()
    return FlatWriter(prefix / "s", tok.vocab.n_vocab, 1 << 20, None)


def test_compilation_cache_switch(tmp_path, monkeypatch):
    """enable_executable_cache: the job's executables kept in ~/.cache/blockbpe_jax/executables
    (under $BLOCKBPE_CACHE_DIR); BLOCKBPE_XLA_CACHE=0 or BLOCKBPE_CACHE_DIR="" is off; JAX's own
    cache settings are left alone."""
    from blockbpe_jax.corpus import executable_cache

    before = jax.config.jax_compilation_cache_dir, executable_cache._directory
    try:
        monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path / "c"))
        executable_cache.enable(tmp_path / "stale")
        monkeypatch.setenv("BLOCKBPE_XLA_CACHE", "0")
        assert corpus.enable_executable_cache() is None and executable_cache._directory is None
        monkeypatch.delenv("BLOCKBPE_XLA_CACHE")
        monkeypatch.setenv("BLOCKBPE_CACHE_DIR", "")
        assert corpus.enable_executable_cache() is None and executable_cache._directory is None
        monkeypatch.setenv("BLOCKBPE_CACHE_DIR", str(tmp_path / "c"))
        assert corpus.enable_executable_cache() == str(tmp_path / "c" / "executables")
        assert executable_cache._directory == tmp_path / "c" / "executables"
        assert jax.config.jax_compilation_cache_dir == before[0]
    finally:
        executable_cache.enable(before[1])


def test_plan_batches_sorts_by_width():
    lengths = np.array([5, 3000, 17, 16, 0, 900, 33, 2048, 2049])
    plan = corpus.plan_batches(lengths, batch_bytes=4096, max_docs=None, max_len=None)
    assert sorted(np.concatenate([i for _, i in plan]).tolist()) == list(range(len(lengths)))
    for width, idx in plan:
        assert all(window_device.pow2(int(n)) == width for n in lengths[idx])
        assert len(idx) == 1 or len(idx) * width <= 4096
    assert [w for w, _ in plan] == sorted(w for w, _ in plan)
    assert [len(i) for _, i in corpus.plan_batches(lengths, 1 << 20, 2, None)] == [2, 1, 1, 1, 1, 1, 2]


def _gpus():
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


@pytest.mark.skipif(
    not _gpus() or not native.HAS_CUDA_MODULE, reason="no GPU visible to JAX, or no CUDA module in this build"
)
@pytest.mark.parametrize("window_bytes", [16 << 20, 64 << 10])
def test_gpu_job_equals_cpu_job(tmp_path, cl100k, war_and_peace, window_bytes):
    """On a GPU (each window's bytes uploaded once, each call's rows gathered on the device,
    its ids read back into a kept page-locked buffer, reused window after window) the job's
    ids, in shards and in memory, equal the CPU job's."""
    gpu, cpu = _gpus()[0], jax.devices("cpu")[0]
    lines = [x for x in war_and_peace[:400_000].split(b"\n") if x] + ["日本語 🎉 ✓".encode()] * 3
    src = tmp_path / "wp.txt"
    src.write_bytes(b"\n".join(lines) + b"\n")
    for name, device in (("gpu", gpu), ("cpu", cpu)):
        corpus.encode_files(
            cl100k,
            [src],
            tmp_path / name / "s",
            device=device,
            batch_bytes=64 << 10,
            window_bytes=window_bytes,
        )
    for a, b in zip(
        corpus.read_shards(tmp_path / "gpu" / "s"), corpus.read_shards(tmp_path / "cpu" / "s"), strict=True
    ):
        np.testing.assert_array_equal(a, b)
    # in memory: copied out of the same reused buffer
    ids, offsets = corpus.encode_files_to_arrays(
        cl100k, [src], device=gpu, batch_bytes=64 << 10, window_bytes=window_bytes
    )
    assert len(offsets) == len(lines) + 1
    for j, b in enumerate(corpus.read_shards(tmp_path / "cpu" / "s")):
        np.testing.assert_array_equal(ids[offsets[j] : offsets[j + 1]], b)


def test_compiled_windows_key_has_the_static_table_fields(r50k):
    """The corpus job's executables are shared across jobs by tables' shapes and static fields:
    tables that differ only in a static field (an FFI attribute, e.g. the whole-piece
    shortcut's max_piece_len or the allowed specials), the mode or the separator never share one."""
    tables = r50k.tables("none")
    cpu = jax.devices("cpu")[0]
    key = window_device.CompiledWindows(tables, cpu, mode="exact").options
    assert window_device.CompiledWindows(r50k.tables("none"), cpu, mode="exact").options == key
    for other in (dataclasses.replace(tables, max_piece_len=0), dataclasses.replace(tables, specials=("x",))):
        assert window_device.CompiledWindows(other, cpu, mode="exact").options != key
    assert window_device.CompiledWindows(tables, cpu, mode="bytes").options != key
    assert window_device.CompiledWindows(tables, cpu, mode="exact", sep_id=50256).options != key


def test_likely_shapes_compiled_ahead_on_a_job_of_long_documents(tmp_path, r50k, monkeypatch):
    """With the GPU's plan (finalize's size guessed and compiled ahead, besides the size each
    window then asks for) turned on for the CPU backend: a job of documents of 16 bytes to
    300 KB gives encode_batch's ids."""
    monkeypatch.setattr(window_encode, "LIKELY_SHAPES_ON_CPU", True)
    asked = []
    real_ahead = window_device.CompiledReads.finalize_ahead
    monkeypatch.setattr(
        window_device.CompiledReads,
        "finalize_ahead",
        lambda self, *shape: asked.append(shape) or real_ahead(self, *shape),
    )
    rng = np.random.default_rng(7)
    words = ["alpha", "beta", "🎉", "1234", "\u4e2d\u6587", "x" * 40]
    sizes = [16, 300, 5000, 70_000, 300_000, 20, 9000]
    docs = []
    for n in sizes:
        text = ""
        while len(text.encode()) < n:
            text += " " + str(rng.choice(words))
        docs.append(text)
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    # (no packing: a small window buffer, which the rows of the widest width done again outgrow)
    corpus.encode_files(r50k, [src], tmp_path / "o" / "s", jsonl_field="text", pack_width=0)
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "o" / "s")] == encode_batch_ids(
        r50k, [d.encode() for d in docs]
    )
    windows = len(list(documents.iter_windows([src], jsonl_field="text")))
    assert len(asked) == 2 * windows  # (each window's guess, then its own size)


def test_in_background_starts_at_once_and_stops_when_dropped():
    """in_background's thread produces before the consumer asks; an error comes after the items
    before it; a consumer dropped before it started stops the thread."""
    import gc
    import threading
    import time

    from blockbpe_jax.corpus.background import in_background

    asked = threading.Event()

    def items():
        asked.set()
        yield from range(3)
        raise OSError("disk gone")

    got = in_background(items(), depth=1)
    assert in_background(got, depth=2) is got  # (no second thread to forward what one reads)
    assert asked.wait(10)  # (nothing asked for an item yet)
    assert next(got) == 0 and next(got) == 1 and next(got) == 2
    with pytest.raises(OSError, match="disk gone"):
        next(got)

    def endless():
        while True:
            yield b"x"

    def producers() -> int:
        return sum(t.name == "blockbpe-background" and t.is_alive() for t in threading.enumerate())

    before = producers()
    dropped = in_background(endless(), depth=1)
    assert producers() == before + 1
    del dropped
    gc.collect()
    deadline = time.monotonic() + 10
    while producers() > before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert producers() == before


def test_map_in_background_two_at_once_in_order():
    """map_in_background runs fn on its threads at once (two items meet at a barrier, which a
    single thread would never pass), hands the results on in input order, takes at most
    threads + depth + 1 items ahead of the consumer, and raises fn's error in its place."""
    import threading
    import time

    from blockbpe_jax.corpus.background import map_in_background

    taken = []

    def items():
        for i in range(20):
            taken.append(i)
            yield i

    both = threading.Barrier(2, timeout=10)

    def fn(i):
        if i < 2:
            both.wait()
        if i == 7:
            raise ValueError("item seven")
        time.sleep(0.002 * (i % 3))  # (later items finish first at times)
        return i * i

    got = map_in_background(fn, items(), threads=2, depth=1, name="blockbpe-test")
    assert [next(got) for _ in range(3)] == [0, 1, 4]
    time.sleep(0.1)  # (the threads run ahead meanwhile, as far as they may)
    assert len(taken) <= 3 + 2 + 1 + 1, taken
    assert [next(got) for _ in range(4)] == [9, 16, 25, 36]
    with pytest.raises(ValueError, match="item seven"):
        next(got)


def test_read_ahead_gives_the_same_shards(tmp_path, r50k):
    """encode_files with `read=read_ahead(...)` (the command's way) writes what it writes reading
    the files itself; a read_ahead for other inputs, or used twice, is refused."""
    rng = np.random.default_rng(5)
    lines = [" ".join(rng.choice(["a", "bb", "ccc", "🎉", "12"], int(n))) for n in rng.integers(1, 400, 500)]
    src = tmp_path / "in.txt"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus.encode_files(r50k, [src], tmp_path / "a" / "s", window_bytes=8192)
    read = corpus.read_ahead([src], window_bytes=8192)
    corpus.encode_files(r50k, [src], tmp_path / "b" / "s", window_bytes=8192, read=read)
    want = [a.tolist() for a in corpus.read_shards(tmp_path / "a" / "s")]
    assert [a.tolist() for a in corpus.read_shards(tmp_path / "b" / "s")] == want
    assert len(want) == len(lines)
    with pytest.raises(ValueError, match="read_ahead"):  # used already
        corpus.encode_files(r50k, [src], tmp_path / "c" / "s", window_bytes=8192, read=read)
    with pytest.raises(ValueError, match="read_ahead"):  # other inputs
        corpus.encode_files(r50k, [src], tmp_path / "d" / "s", read=corpus.read_ahead([src], split="file"))


def test_the_engine_stages_one_at_a_time(tmp_path, r50k):
    """WindowEncoder's stages called by hand on one window: plan_window puts every document in
    one call, launch and finish hand the window's ids to store and write (each on its thread),
    and the writer holds `encode_batch`'s ids in input order."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(2)
    words = ["alpha", "beta", "🎉🎉🎉", "日本語", "1234567"]
    docs = [" ".join(rng.choice(words, int(n))).encode() for n in rng.integers(1, 200, 50)]
    src = tmp_path / "in.txt"
    src.write_bytes(b"\n".join(docs) + b"\n")
    (window,) = documents.iter_windows([src])
    arrays = ArraysWriter(r50k.vocab.n_vocab, src.stat().st_size)
    engine = window_encode.WindowEncoder(r50k, arrays, [src], batch_bytes=4096, pack_width=0)
    work = engine.plan_window(window)
    assert sorted(work.perm.tolist()) == list(range(len(docs)))
    assert sum(len(call.docs) for call in work.plan) == len(docs) and len(work.plan) > 1
    with ThreadPoolExecutor(1) as engine.write_thread, ThreadPoolExecutor(1) as engine.store_thread:
        engine.finish(engine.launch(work))
        engine.stored.pop().result()
        engine.written.pop().result()
    ids, offsets = arrays.finish({})
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == encode_batch_ids(r50k, docs)
