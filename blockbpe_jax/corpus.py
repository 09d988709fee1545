"""The corpus job: text/JSONL(.gz) files -> documents -> byte-sized batches -> `encode` ->
flat token shards (`blockbpe_jax/shards.py`: `<prefix>_<k>.bin` ids + `.idx` int64 offsets +
`<prefix>.json`), or padded .npz/.npy shards; and `verify`, which re-encodes a sample with the
reference library. `blockbpe-jax encode|verify` are thin wrappers around `encode_files` and
`verify`.

Every bad input raises CorpusError with one line naming the file and line.
"""

from __future__ import annotations

import functools
import os
import random
import sys
import threading
import time
import types
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .documents import (
    SPLITS_HELP,  # noqa: F401
    Doc,  # noqa: F401
    Window,
    check_inputs,
    chunk_cuts,  # noqa: F401
    iter_documents,
    iter_windows,
    parse_split,
)
from .shards import (
    ArrayRecordWriter,
    CorpusError,
    FlatWriter,
    PaddedWriter,
    VerifyError,  # noqa: F401
    check_output,
    load_sidecar,
    open_shard,
    read_array_records,  # noqa: F401
    read_shards,  # noqa: F401
    token_dtype,
)

DEFAULT_BATCH_BYTES = 4 << 20  # padded bytes (rows x width) per encode call
DEFAULT_SHARD_TOKENS = 1 << 28  # tokens per flat shard (512 MiB of uint16)


class Progress:
    """tqdm over input bytes (MB/s) with tokens/s, when importable; else a counter on stderr."""

    def __init__(self, total: int | None, enabled: bool):
        self.bar, self.total, self.enabled = None, total, enabled
        self.done = self.docs = self.tokens = 0
        self.t0 = self.last = time.monotonic()

    def update(self, nbytes: int, ndocs: int, ntokens: int) -> None:
        if self.enabled is True and self.bar is None:  # lazily: early errors print one line
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=self.total,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1000,
                    desc="encode",
                    file=sys.stderr,
                    dynamic_ncols=True,
                )
            except ImportError:
                self.enabled = "counter"
        self.done, self.docs, self.tokens = self.done + nbytes, self.docs + ndocs, self.tokens + ntokens
        rate = self.tokens / max(time.monotonic() - self.t0, 1e-9)
        if self.bar is not None:
            self.bar.update(nbytes)
            self.bar.set_postfix_str(f"{self.docs} docs, {rate / 1e6:.2f} M tok/s", refresh=False)
        elif self.enabled == "counter" and time.monotonic() - self.last > 0.5:
            self.last = time.monotonic()
            print(f"\r{self._text()}", end="", file=sys.stderr, flush=True)

    def _text(self) -> str:
        secs = max(time.monotonic() - self.t0, 1e-9)
        return (
            f"encode: {self.docs} documents, {self.done / 1e6:.2f} MB ({self.done / secs / 1e6:.1f} "
            f"MB/s, {self.tokens / secs / 1e6:.2f} M tokens/s)"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled == "counter":
            print(f"\r{self._text()}", file=sys.stderr)


# --------------------------------------------------------------------------------------------
# The engine
# --------------------------------------------------------------------------------------------


def _pow2(n: int, floor: int = 16) -> int:
    return max(floor, 1 << max(0, n - 1).bit_length())


def _pow2_widths(lengths: np.ndarray, floor: int = 16) -> np.ndarray:
    """_pow2 of each length, exactly (frexp's exponent of n - 1 is its bit length)."""
    return np.maximum(floor, np.left_shift(1, np.frexp(np.maximum(lengths - 1, 0))[1].astype(np.int64)))


def plan_batches(
    lengths: np.ndarray, batch_bytes: int, max_docs: int | None, max_len: int | None
) -> list[tuple[int, np.ndarray]]:
    """(width, document indices) of each encode call of a window: the documents sorted by
    length, each call holding documents of one power-of-two width (or all at max_len), at
    most batch_bytes // width of them (one at least) and at most max_docs."""
    order = np.argsort(lengths, kind="stable")
    widths = np.full(len(order), max_len, np.int64) if max_len is not None else _pow2_widths(lengths[order])
    cuts = np.flatnonzero(np.diff(widths)) + 1
    out = []
    for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(order)]]).tolist()):
        width = int(widths[lo])
        rows = max(1, batch_bytes // width)
        if max_docs is not None:
            rows = min(rows, max_docs)
        out += [(width, order[i : min(i + rows, hi)]) for i in range(lo, hi, rows)]
    return out


def first_pass_tokens(width: int) -> int:
    """Token columns of a call of this byte width. Byte-level BPE gives at most one token per
    byte, but real text gives one per 2.5-4.5 bytes: half the width keeps the copy back small,
    and the rare row with more tokens (its count says so) is encoded again at full width."""
    return width + 1 if width < 64 else width // 2


def _in_background(items: Iterator, depth: int) -> Iterator:
    """The items of `items`, produced by a thread up to `depth` ahead; its exception is raised
    here, in order, when the consumer reaches it. Stops the thread when the consumer stops."""
    import queue

    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def produce():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    return
            q.put((end, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put((end, e))

    thread = threading.Thread(target=produce, daemon=True)
    thread.start()
    try:
        while True:
            item, error = q.get()
            if item is end:
                if error is not None:
                    raise error
                return
            yield item
    finally:
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.1)


def _rows_bucket(n: int, full: int) -> int:
    """Rows of a call of `n` documents whose width holds at most `full` per call: a power of
    two, at least 1/16 of full's: at most five row counts per width, so that a job compiles a
    few executables per width, for at most 1/16 of a call's bytes of empty rows."""
    return max(_pow2(n, 1), _pow2(full, 1) // 16)


def _size_bucket(n: int) -> int:
    """Length of a window's copy back for at most `n` tokens: eight sizes per octave (at most
    1/8 more than n), at least 4096 (a multiple of 4096: `_prefix_count`'s blocks)."""
    if n <= 4096:
        return 4096
    step = max(4096, 1 << (n.bit_length() - 4))
    return -(-n // step) * step


@functools.lru_cache(maxsize=1)
def _device_functions():
    """The jitted steps of a window on the device (built on first use: importing this module
    does not import JAX).

    A window's calls write into one int32 buffer `raw` (donated from call to call): call i's
    padded ids [rows, T] row-major, then its counts [rows], each call after the previous one
    (the offset is passed on the device from call to call). The layout depends only on the
    plan, so the host knows where every document's ids and count
    are before anything ran. The host copies back the counts (`gather`), and `finalize`
    gathers the ids of every document, in input order, back to back, cast to the shard
    dtype: the host copies back only those."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    from . import ops

    @functools.partial(
        jax.jit, static_argnames=("max_tokens", "mode", "block_size", "assume_nfc"), donate_argnums=3
    )
    def encode_into(data, lengths, tables, raw, at, *, max_tokens, mode, block_size, assume_nfc):
        enc = ops.encode(
            data,
            lengths,
            tables,
            max_tokens=max_tokens,
            mode=mode,
            block_size=block_size,
            check_lengths=False,
            assume_nfc=assume_nfc,
        )
        raw = lax.dynamic_update_slice(raw, enc.ids.reshape(-1), (at,))
        raw = lax.dynamic_update_slice(raw, enc.counts, (at + enc.ids.size,))
        # the next call's offset, on the device: no host-to-device copy per call
        return raw, enc.counts, at + enc.ids.size + enc.counts.size

    @jax.jit
    def gather(raw, positions):
        return raw.at[positions].get(mode="clip")

    def _prefix_count(marks):
        """Inclusive prefix sums of 0/1 int32 marks (length a multiple of 4096). A scan over
        millions of elements is slow on XLA's CPU backend (~50 ns each); this is a matmul by a
        triangular matrix per 64 elements, again per 64 block sums, and a scan over the 4096x
        fewer sums that are left (exact: float32 holds every integer below 2**24; HIGHEST
        precision keeps GPUs from rounding the inputs to TF32)."""
        upper = jnp.triu(jnp.ones((64, 64), jnp.float32))

        def within(x):  # x[m * 64]: (inclusive sums in each 64 as float32 [m, 64], their totals)
            inner = jnp.dot(x.astype(jnp.float32).reshape(-1, 64), upper, precision=lax.Precision.HIGHEST)
            return inner, inner[:, -1]

        inner, totals = within(marks)
        inner2, totals2 = within(totals)
        inclusive = (inner2 + (jnp.cumsum(totals2) - totals2)[:, None]).reshape(-1)  # of totals
        return (inner + (inclusive - totals)[:, None]).reshape(-1).astype(jnp.int32)

    @functools.partial(jax.jit, static_argnames=("size", "dtype"))
    def finalize(raw, layout, *, size, dtype):
        """The window's ids back to back in input order, cast to `dtype`, padded to `size`.
        layout int32[2, D]: for the non-empty documents in input order, where their ids go in
        the output and how far they are from their place in raw (src - start); `size` where
        D has more entries than there are documents."""
        starts, shift = layout[0], layout[1]
        # output position j reads raw[j + shift[d]], d the number of starts at or before j,
        # minus 1: the non-empty document that holds j
        marks = jnp.zeros(size, jnp.int32).at[starts].set(1, mode="drop")
        d = jnp.maximum(_prefix_count(marks) - 1, 0)
        return raw.at[jnp.arange(size, dtype=jnp.int32) + shift[d]].get(mode="clip").astype(dtype)

    @functools.partial(jax.jit, static_argnames="size")
    def grow(raw, *, size):
        return jnp.zeros(size, raw.dtype).at[: raw.size].set(raw)

    return types.SimpleNamespace(encode_into=encode_into, gather=gather, finalize=finalize, grow=grow)


class _Buffers:
    """Sizes of a job's window buffers, as high-water marks over its windows (powers of two,
    the first twice the first window's need: every encode call's executable depends on it, so
    a job should see one or two). Buffers of finished windows are kept
    for the next windows and jobs (at most `KEEP`, across devices): zeroing a new one costs
    more than the window's steps on the CPU backend."""

    KEEP = 3
    _spare: list = []  # (device, raw), most recent last
    _lock = threading.Lock()

    def __init__(self, device):
        import jax.numpy as jnp

        self.device, self.slots, self.docs = device, 1 << 12, 1 << 10
        self.zero = jnp.zeros((), jnp.int32, device=device)  # a window's first offset

    def take(self, slots: int):
        import jax.numpy as jnp

        with self._lock:
            if slots > self.slots:  # twice the need: the next windows rarely need more
                self.slots = 2 * _pow2(slots, 1)
            for k in range(len(self._spare) - 1, -1, -1):
                device, raw = self._spare[k]
                if device == self.device and raw.size == self.slots:
                    del self._spare[k]
                    return raw
        return jnp.zeros(self.slots, jnp.int32, device=self.device)

    def doc_slots(self, n: int) -> int:
        with self._lock:
            self.docs = max(self.docs, _pow2(n, 1))
            return self.docs

    def grown(self, slots: int) -> int:
        with self._lock:
            self.slots = max(self.slots, _pow2(slots, 1))
            return self.slots

    def give_back(self, raw) -> None:
        with self._lock:
            self._spare.append((self.device, raw))
            del self._spare[: -self.KEEP]


def encode_documents(
    tok,
    windows: Iterator[Window],
    writer,
    paths: Sequence[Path],
    *,
    mode="exact",
    allowed_special="none",
    batch_bytes=DEFAULT_BATCH_BYTES,
    max_docs=None,
    max_len=None,
    block_size=256,
    device=None,
    progress=None,
) -> None:
    """Encodes the documents window by window (within a window, sorted by length into calls of
    one power-of-two width; any length: max_tokens never cuts a document) and hands each
    window's ids, back to back in input order in the shard dtype, to `writer.add`.

    On the device, a window's calls write into one buffer and one step puts their ids in
    input order (`_device_functions`); the host copies back the window's counts, then its ids
    (about 2-4 bytes per token), once each. Rows with more tokens than the first pass keeps
    are encoded again at full width into the same buffer before that step. Reading, encoding
    and writing overlap: a thread reads up to 2 windows ahead, this thread dispatches a
    window's calls (asynchronous: the device works meanwhile) while a thread finishes the
    previous window and writes it."""
    import jax

    from . import native, staging

    nfc = mode == "exact" and tok.nfc
    fns = _device_functions()
    dtype = token_dtype(tok.vocab.n_vocab)

    def where(w: Window, i: int) -> str:
        return f"{paths[w.file_index]}:{int(w.positions[i])}"

    target = device or jax.devices()[0]
    tables = tok.tables(allowed_special, device)
    staged_path = staging.available(target)
    buffers = _Buffers(target)

    def encode_into(raw, at, w: Window, idx: np.ndarray, width: int, T: int, rows: int):
        """Documents `idx` of the window packed straight from its flat buffer into `rows` rows
        (on a CUDA GPU: into pinned memory, one DMA), encoded, and written into raw at `at` (a
        device scalar): ids [rows, T], then counts [rows]. Returns the new raw (the old one is
        donated) and the offset after them."""
        idx = np.ascontiguousarray(idx, np.int64)
        kw = dict(max_tokens=T, mode=mode, block_size=block_size, assume_nfc=nfc)
        if staged_path and width > 0:
            staged = staging.stage_flat(w.data, w.offsets, idx, max_len=width, rows=rows, device=target)
            try:
                raw, counts, at = fns.encode_into(staged.data, staged.lengths, tables, raw, at, **kw)
            except BaseException:
                staged.discard()
                raise
            staged.release(counts)
            return raw, at
        data, lengths = native.cpu.pack_flat(w.data, w.offsets, idx, width, rows)
        if target != jax.devices()[0]:
            data, lengths = jax.device_put((data, lengths), target)
        raw, _, at = fns.encode_into(data, lengths, tables, raw, at, **kw)
        return raw, at

    def launch(w: Window):
        if nfc:  # the width must fit the normalized text
            w = Window.of(tok.normalize(w.blobs), w.positions, w.file_index, w.consumed)
        lengths = w.lengths
        if max_len is not None and w.ndocs and lengths.max() > max_len:
            i = int(np.argmax(lengths))
            raise CorpusError(
                f"{where(w, i)}: document of {int(lengths[i])} bytes, more than "
                f"--max-len {max_len} (use --split chunk:N)"
            )
        plan = []  # (document indices, width, T, rows, offset in raw)
        end = 0
        for width, idx in plan_batches(lengths, batch_bytes, max_docs, max_len):
            T = first_pass_tokens(width)
            full = max(1, batch_bytes // width)  # plan_batches' most documents per call
            rows = _rows_bucket(len(idx), full if max_docs is None else min(full, max_docs))
            plan.append((idx, width, T, rows, end))
            end += rows * (T + 1)
        raw, at = buffers.take(end), buffers.zero
        for idx, width, T, rows, _ in plan:
            raw, at = encode_into(raw, at, w, idx, width, T, rows)
        resume = at  # where rows encoded again go (== end)
        # per document, in sorted (plan) order: its call's T and width, where its ids and its
        # count are in raw
        sizes = [len(p[0]) for p in plan]
        perm = np.concatenate([p[0] for p in plan]).astype(np.int64)
        row = np.arange(len(perm)) - np.repeat(np.cumsum(sizes) - sizes, sizes)
        T = np.repeat([p[2] for p in plan], sizes)
        base = np.repeat([p[4] for p in plan], sizes)
        src = base + row * T
        count_at = base + np.repeat([p[3] * p[2] for p in plan], sizes) + row
        positions = np.zeros(buffers.doc_slots(len(perm)), np.int32)
        positions[perm] = count_at
        counts = fns.gather(raw, positions)
        counts.copy_to_host_async()
        return w, plan, raw, end, resume, perm, T, src, count_at, counts

    def finish(pending) -> None:
        w, plan, raw, end, at, perm, T, src, count_at, counts = pending
        n = len(perm)
        sizes = [len(p[0]) for p in plan]
        got = np.asarray(counts)[perm].astype(np.int64)  # sorted (plan) order from here on
        redo = np.flatnonzero(got > T)
        if redo.size:  # more tokens than the first pass kept: these rows at full width
            call_of = np.repeat(np.arange(len(plan)), sizes)
            groups = np.split(redo, np.flatnonzero(np.diff(call_of[redo])) + 1)
            # (T = width + 1, rows: a power of two, at least 8) of each call's rows again
            shapes = [(plan[call_of[g[0]]][1] + 1, max(_pow2(len(g), 1), 8)) for g in groups]
            need = end + sum(rows * (T2 + 1) for T2, rows in shapes)
            if need > raw.size:
                raw = fns.grow(raw, size=buffers.grown(need))
            for g, (T2, rows) in zip(groups, shapes):
                raw, at = encode_into(raw, at, w, perm[g], T2 - 1, T2, rows)
                r = np.arange(len(g))
                src[g], count_at[g] = end + r * T2, end + rows * T2 + r
                end += rows * (T2 + 1)
            positions = np.zeros(buffers.doc_slots(n), np.int32)
            positions[: redo.size] = count_at[redo]
            got[redo] = np.asarray(fns.gather(raw, positions))[: redo.size]
        widths = np.repeat([p[1] for p in plan], sizes)
        bad = np.flatnonzero((got < 0) | (got > widths + 1))
        if bad.size:
            k = int(bad[0])
            buffers.give_back(raw)
            raise CorpusError(
                f"{where(w, int(perm[k]))}: tokenization failed (count "
                f"{int(got[k])}, width {int(widths[k]) + 1})"
            )
        counts = np.empty(n, np.int64)
        counts[perm] = got
        source = np.empty(n, np.int64)
        source[perm] = src
        total = int(counts.sum())
        size = _size_bucket(total)
        starts = np.cumsum(counts) - counts
        held = np.flatnonzero(counts)
        layout = np.full((2, buffers.doc_slots(n)), size, np.int32)
        layout[0, : held.size] = starts[held]
        layout[1, : held.size] = source[held] - starts[held]
        ids = np.asarray(fns.finalize(raw, layout, size=size, dtype=dtype))
        buffers.give_back(raw)
        flat = ids[:total]
        writer.add(flat, counts, w)
        if progress is not None:
            progress.update(w.consumed, w.ndocs, total)

    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as writer_thread:
        written = []  # futures of finish(), oldest first
        for window in _in_background(windows, depth=2):
            if not window.ndocs:
                continue
            written.append(writer_thread.submit(finish, launch(window)))
            while len(written) > 1 or (written and written[0].done()):
                written.pop(0).result()  # re-raises a writer's error here
        for future in written:
            future.result()


def enable_compilation_cache() -> str | None:
    """Turns on JAX's persistent compilation cache at ~/.cache/blockbpe_jax/xla (next to the
    table cache, under $BLOCKBPE_CACHE_DIR when set), so that a second run of the corpus job
    loads its executables instead of compiling them again; returns the directory in use. The
    CLI calls it; `encode_files` does not (it would change JAX's settings for the whole of the
    caller's process).
    A directory the user already chose (jax_compilation_cache_dir) is kept; BLOCKBPE_XLA_CACHE=0
    (or BLOCKBPE_CACHE_DIR="") leaves the cache off. Executables are stored however quickly
    they compiled: the job's are many small ones."""
    import jax

    from . import table_cache

    if os.environ.get("BLOCKBPE_XLA_CACHE", "1") == "0":
        return None
    current = jax.config.jax_compilation_cache_dir
    if current:
        return current
    tables_dir = table_cache._cache_dir()
    if tables_dir is None:
        return None
    path = str(tables_dir.parent / "xla")
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
    return path


def encode_files(
    tok,
    paths: Sequence[str | os.PathLike],
    out_prefix: str | os.PathLike,
    *,
    fmt="flat",
    split="lines",
    jsonl_field=None,
    mode="exact",
    allowed_special="none",
    batch_bytes=DEFAULT_BATCH_BYTES,
    max_docs=None,
    max_len=None,
    shard_tokens=DEFAULT_SHARD_TOKENS,
    shard_docs=None,
    max_tokens=None,
    pad_id=0,
    block_size=256,
    device=None,
    overwrite=False,
    progress=False,
    meta=None,
) -> dict:
    """Tokenizes text/JSONL(.gz) files (and parquet files, column `jsonl_field`, when pyarrow is
    installed) into shards at `out_prefix` (DIR/NAME; the directory is created) and returns the
    sidecar (`<prefix>.json`; `<prefix>manifest.json` for fmt "npz" or "npy"). fmt "flat":
    .bin/.idx shards; "arrayrecord": one record per document (`read_array_records`). Flat and
    ArrayRecord shards hold every document's full ids, equal to `tok.encode_batch`'s. Raises
    CorpusError (one line, file:line) on a bad input or an existing output without overwrite."""
    split_kind, chunk = parse_split(split)
    paths = check_inputs(paths)
    directory, name = os.path.split(os.path.expanduser(os.fspath(out_prefix)))
    directory = Path(directory or ".")
    if fmt in ("flat", "arrayrecord") and not name:
        raise CorpusError(f"{out_prefix}: a {fmt} output needs a file name prefix (DIR/NAME)")
    if directory.exists() and not directory.is_dir():
        raise CorpusError(f"{directory}: exists and is not a directory")
    directory.mkdir(parents=True, exist_ok=True)
    check_output(directory, name, overwrite, fmt)
    if fmt == "flat":
        writer = FlatWriter(directory / name, tok.vocab.n_vocab, shard_tokens, shard_docs)
    elif fmt == "arrayrecord":
        writer = ArrayRecordWriter(directory / name, tok.vocab.n_vocab, shard_tokens, shard_docs)
    else:
        writer = PaddedWriter(directory, name, fmt, max_tokens, pad_id, shard_docs or 65536)
    total = None if any(p.suffix == ".gz" for p in paths) else sum(p.stat().st_size for p in paths)
    bar = Progress(total, enabled=progress)
    t0 = time.perf_counter()
    try:
        windows = iter_windows(paths, split_kind, chunk, jsonl_field)
        encode_documents(
            tok,
            windows,
            writer,
            paths,
            mode=mode,
            allowed_special=allowed_special,
            batch_bytes=batch_bytes,
            max_docs=max_docs,
            max_len=max_len,
            block_size=block_size,
            device=device,
            progress=bar,
        )
    except BaseException:
        writer.abort()  # no partial output is left behind
        raise
    finally:
        bar.close()
    v = tok.vocab
    info = dict(
        vocab=v.name,
        vocab_source=v.source,
        n_vocab=v.n_vocab,
        mode=mode,
        split=split,
        jsonl_field=jsonl_field,
        max_len=max_len,
        allowed_special=sorted(allowed_special)
        if isinstance(allowed_special, (set, frozenset, list))
        else allowed_special,
        inputs=[str(p) for p in paths],
        seconds=round(time.perf_counter() - t0, 3),
        vocab_arg=dict(vocab=str(Path(v.source).resolve())) if Path(v.source).is_file() else {},
    )
    return writer.finish({**info, **(meta or {})})


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def reference_encoder(tok, mode: str, allowed_special):
    """(name, texts -> list of id lists): tiktoken for tiktoken-format vocabularies (.tiktoken
    files, tiktoken encodings, Llama 3's tokenizer.model) when importable, else the
    tokenizer's own CPU path."""
    v = tok.vocab
    tiktoken_like = (
        v.char_level is None
        and not tok.nfc
        and not v.source.endswith(".json")
        and (v.pattern is not None or mode == "bytes")
    )
    try:
        import tiktoken
    except ImportError:
        tiktoken_like = False
    if tiktoken_like:
        from .testing import BYTES_MODE_PATTERN

        specials = set(v.special_tokens.values())
        enc = tiktoken.Encoding(
            f"{v.name}_reference",
            special_tokens=dict(v.special_tokens),
            pat_str=v.pattern if mode == "exact" else BYTES_MODE_PATTERN,
            mergeable_ranks={
                b: i for i, b in enumerate(v.token_bytes) if b is not None and i not in specials
            },
        )
        if allowed_special == "none":
            return "tiktoken", lambda texts: enc.encode_ordinary_batch([t.decode() for t in texts])
        allowed = "all" if allowed_special == "all" else set(allowed_special)
        return "tiktoken", lambda texts: [
            enc.encode(t.decode(), allowed_special=allowed, disallowed_special=()) for t in texts
        ]
    import jax

    cpu = jax.devices("cpu")[0]

    def cpu_path(texts):
        out = []
        for t in texts:
            ids, counts = jax.device_get(
                tok.encode_batch(
                    [t], max_tokens=_pow2(len(t)) + 1, mode=mode, allowed_special=allowed_special, device=cpu
                )
            )
            out.append(ids[0, : counts[0]].tolist())
        return out

    return "blockbpe_jax CPU path", cpu_path


def verify(prefix: str | os.PathLike, tok, *, sample: int = 1000, seed: int = 0) -> dict:
    """Checks every shard's .idx/.bin against each other and the sidecar (sizes, offsets, ids
    below n_vocab), then re-reads the inputs and re-encodes `sample` random documents (all when
    sample >= documents) with the reference. Raises VerifyError naming the shard and document."""
    meta, directory = load_sidecar(prefix)
    opened = [open_shard(directory, s, meta["dtype"], meta["n_vocab"]) for s in meta["shards"]]
    starts = np.cumsum([0] + [s["documents"] for s in meta["shards"]])
    n = int(starts[-1])
    if n != meta["documents"]:
        raise VerifyError(f"{directory}: shards hold {n} documents, the sidecar says {meta['documents']}")
    picks = sorted(random.Random(seed).sample(range(n), min(max(sample, 0), n)))
    split, chunk = parse_split(meta["split"])
    paths = check_inputs(meta["inputs"])
    docs, want = {}, set(picks)
    for i, d in enumerate(iter_documents(paths, split, chunk, meta.get("jsonl_field"))):
        if i >= n:
            raise VerifyError(
                f"{paths[d.file_index]}:{d.position}: the inputs hold more documents than the "
                f"shards ({n}): the inputs changed or the output is incomplete"
            )
        if i in want:
            docs[i] = d
    if len(docs) < len(want):
        raise VerifyError(f"the inputs hold fewer documents than the shards ({n}): they changed")
    name, ref = reference_encoder(tok, meta["mode"], meta["allowed_special"])
    for lo in range(0, len(picks), 256):
        group = picks[lo : lo + 256]
        for i, expect in zip(group, ref([docs[i].data for i in group])):
            k = int(np.searchsorted(starts, i, "right")) - 1
            tokens, idx = opened[k]
            j = i - int(starts[k])
            got = tokens[idx[j] : idx[j + 1]].tolist()
            if got != expect:
                t = next(
                    (t for t, (a, b) in enumerate(zip(got, expect)) if a != b), min(len(got), len(expect))
                )
                d = docs[i]
                raise VerifyError(
                    f"{directory / meta['shards'][k]['bin']}: document {j} ({paths[d.file_index]}:"
                    f"{d.position}) differs from {name} at token {t}: {got[t : t + 3]} vs {expect[t : t + 3]} "
                    f"({len(got)} vs {len(expect)} tokens)"
                )
    return dict(documents=n, tokens=meta["tokens"], shards=len(opened), checked=len(picks), reference=name)
