"""The corpus job: text/JSONL(.gz) files -> documents -> byte-sized batches -> `encode` ->
flat token shards (`blockbpe_jax/shards.py`: `<prefix>_<k>.bin` ids + `.idx` int64 offsets +
`<prefix>.json`), or padded .npz/.npy shards; and `verify`, which re-encodes a sample with the
reference library. `blockbpe-jax encode|verify` are thin wrappers around `encode_files` and
`verify`.

Every bad input raises CorpusError with one line naming the file and line.
"""

from __future__ import annotations

import os
import random
import sys
import time
from pathlib import Path
from typing import Iterator, Sequence

import numpy as np

from .documents import (SPLITS_HELP, Doc, Window, check_inputs, chunk_cuts,  # noqa: F401
                        iter_documents, iter_windows, parse_split)
from .shards import (ArrayRecordWriter, CorpusError, FlatWriter, PaddedWriter, VerifyError,  # noqa: F401
                     check_output, load_sidecar, open_shard, read_array_records, read_shards)

DEFAULT_BATCH_BYTES = 4 << 20      # padded bytes (rows x width) per encode call
DEFAULT_SHARD_TOKENS = 1 << 28     # tokens per flat shard (512 MiB of uint16)


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
                self.bar = tqdm(total=self.total, unit="B", unit_scale=True, unit_divisor=1000,
                                desc="encode", file=sys.stderr, dynamic_ncols=True)
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
        return (f"encode: {self.docs} documents, {self.done / 1e6:.2f} MB ({self.done / secs / 1e6:.1f} "
                f"MB/s, {self.tokens / secs / 1e6:.2f} M tokens/s)")

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


def plan_batches(lengths: np.ndarray, batch_bytes: int, max_docs: int | None,
                 max_len: int | None) -> list[tuple[int, np.ndarray]]:
    """(width, document indices) of each encode call of a window: the documents sorted by
    length, each call holding documents of one power-of-two width (or all at max_len), at
    most batch_bytes // width of them (one at least) and at most max_docs."""
    order = np.argsort(lengths, kind="stable")
    widths = (np.full(len(order), max_len, np.int64) if max_len is not None
              else _pow2_widths(lengths[order]))
    cuts = np.flatnonzero(np.diff(widths)) + 1
    out = []
    for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(order)]]).tolist()):
        width = int(widths[lo])
        rows = max(1, batch_bytes // width)
        if max_docs is not None:
            rows = min(rows, max_docs)
        out += [(width, order[i:min(i + rows, hi)]) for i in range(lo, hi, rows)]
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
    import threading

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


def encode_documents(tok, windows: Iterator[Window], writer, paths: Sequence[Path], *, mode="exact",
                     allowed_special="none", batch_bytes=DEFAULT_BATCH_BYTES, max_docs=None,
                     max_len=None, block_size=256, device=None, progress=None) -> None:
    """Encodes the documents window by window with `Tokenizer.encode_batch` (within a window,
    sorted by length into calls of one power-of-two width; any length: max_tokens never cuts
    a document) and hands each window's ids, back to back in input order, to `writer.add`.
    Reading, encoding and writing overlap: a thread reads up to 2 windows ahead, this thread
    dispatches a window's calls (asynchronous: the device works meanwhile) while a thread
    copies the previous window's ids back, puts them in input order and writes them."""
    import jax

    from . import native, ops, staging

    nfc = mode == "exact" and tok.nfc

    def where(w: Window, i: int) -> str:
        return f"{paths[w.file_index]}:{int(w.positions[i])}"

    target = device or jax.devices()[0]
    tables = tok.tables(allowed_special, device)
    staged_path = staging.available(target)

    def encode(w: Window, idx: np.ndarray, width: int, T: int):
        """Documents `idx` of the window packed straight from its flat buffer into rows (on a
        CUDA GPU: into pinned memory, one DMA) and encoded; padded to a power of two of rows
        (few distinct shapes, few compilations)."""
        idx = np.ascontiguousarray(idx, np.int64)
        rows = _pow2(len(idx), 1)

        def run(data, lengths):
            return ops.encode(data, lengths, tables, max_tokens=T, mode=mode, block_size=block_size,
                              check_lengths=False, assume_nfc=nfc)

        if staged_path and width > 0:
            staged = staging.stage_flat(w.data, w.offsets, idx, max_len=width, rows=rows, device=target)
            try:
                out = run(staged.data, staged.lengths)
            except BaseException:
                staged.discard()
                raise
            staged.release(out.counts)
            return out
        data, lengths = native.cpu.pack_flat(w.data, w.offsets, idx, width, rows)
        if target != jax.devices()[0]:
            data, lengths = jax.device_put((data, lengths), target)
        return run(data, lengths)

    def launch(w: Window):
        if nfc:  # the width must fit the normalized text
            w = Window.of(tok.normalize(w.blobs), w.positions, w.file_index, w.consumed)
        lengths = w.lengths
        if max_len is not None and w.ndocs and lengths.max() > max_len:
            i = int(np.argmax(lengths))
            raise CorpusError(f"{where(w, i)}: document of {int(lengths[i])} bytes, more than "
                              f"--max-len {max_len} (use --split chunk:N)")
        calls = []
        for width, idx in plan_batches(lengths, batch_bytes, max_docs, max_len):
            T = first_pass_tokens(width)
            calls.append((idx, width, T, encode(w, idx, width, T)))
        return w, calls

    def finish(pending) -> None:
        w, calls = pending
        parts, part_counts = [], []
        for idx, width, T, enc in calls:
            ids, counts = jax.device_get((enc.ids, enc.counts))
            ids, counts = ids[: len(idx)], counts[: len(idx)].astype(np.int64)
            redo = np.flatnonzero(counts > T)
            if redo.size:  # more tokens than the first pass kept: these rows at full width
                again = encode(w, idx[redo], width, width + 1)
                ids2, counts2 = jax.device_get((again.ids, again.counts))
                counts[redo] = counts2[: redo.size]
            bad = np.flatnonzero((counts < 0) | (counts > width + 1))
            if bad.size:
                j = int(bad[0])
                raise CorpusError(f"{where(w, int(idx[j]))}: tokenization failed (count "
                                  f"{int(counts[j])}, width {width + 1})")
            if redo.size:
                full = dict(zip(redo.tolist(), ids2))
                flat = np.concatenate([full[r][:c] if r in full else ids[r, :c]
                                       for r, c in enumerate(counts.tolist())] or [ids[:0, 0]])
            else:
                flat = ids[np.arange(ids.shape[1])[None, :] < counts[:, None]]  # row-major
            parts.append(flat)
            part_counts.append(counts)
        flat, counts = _input_order(w, calls, parts, part_counts)
        writer.add(flat, counts, w)
        if progress is not None:
            progress.update(w.consumed, w.ndocs, int(flat.size))

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


def _input_order(w: Window, calls, parts, part_counts) -> tuple[np.ndarray, np.ndarray]:
    """The window's ids back to back in input order, and its counts, from the calls' ids (each
    call's documents back to back, calls in plan order)."""
    perm = np.concatenate([c[0] for c in calls])
    sorted_counts = np.concatenate(part_counts)
    sorted_flat = np.concatenate(parts) if parts else np.zeros(0, np.int32)
    n = len(perm)
    counts = np.empty(n, np.int64)
    counts[perm] = sorted_counts
    if np.array_equal(perm, np.arange(n)):
        return sorted_flat, counts
    src = np.empty(n, np.int64)
    src[perm] = np.cumsum(sorted_counts) - sorted_counts   # where each document's ids are
    dst = np.cumsum(counts) - counts                       # where they go
    gather = np.repeat(src - dst, counts) + np.arange(int(counts.sum()), dtype=np.int64)
    return sorted_flat[gather], counts


def encode_files(tok, paths: Sequence[str | os.PathLike], out_prefix: str | os.PathLike, *,
                 fmt="flat", split="lines", jsonl_field=None, mode="exact", allowed_special="none",
                 batch_bytes=DEFAULT_BATCH_BYTES, max_docs=None, max_len=None,
                 shard_tokens=DEFAULT_SHARD_TOKENS, shard_docs=None, max_tokens=None, pad_id=0,
                 block_size=256, device=None, overwrite=False, progress=False, meta=None) -> dict:
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
        encode_documents(tok, windows, writer, paths, mode=mode, allowed_special=allowed_special,
                         batch_bytes=batch_bytes, max_docs=max_docs, max_len=max_len,
                         block_size=block_size, device=device, progress=bar)
    except BaseException:
        writer.abort()  # no partial output is left behind
        raise
    finally:
        bar.close()
    v = tok.vocab
    info = dict(vocab=v.name, vocab_source=v.source, n_vocab=v.n_vocab, mode=mode, split=split,
                jsonl_field=jsonl_field, max_len=max_len,
                allowed_special=sorted(allowed_special) if isinstance(allowed_special, (set, frozenset,
                                                                                        list)) else allowed_special,
                inputs=[str(p) for p in paths], seconds=round(time.perf_counter() - t0, 3),
                vocab_arg=dict(vocab=str(Path(v.source).resolve())) if Path(v.source).is_file() else {})
    return writer.finish({**info, **(meta or {})})


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def reference_encoder(tok, mode: str, allowed_special):
    """(name, texts -> list of id lists): tiktoken for tiktoken-format vocabularies (.tiktoken
    files, tiktoken encodings, Llama 3's tokenizer.model) when importable, else the
    tokenizer's own CPU path."""
    v = tok.vocab
    tiktoken_like = (v.char_level is None and not tok.nfc and not v.source.endswith(".json")
                     and (v.pattern is not None or mode == "bytes"))
    try:
        import tiktoken
    except ImportError:
        tiktoken_like = False
    if tiktoken_like:
        from .testing import BYTES_MODE_PATTERN

        specials = set(v.special_tokens.values())
        enc = tiktoken.Encoding(f"{v.name}_reference", special_tokens=dict(v.special_tokens),
                                pat_str=v.pattern if mode == "exact" else BYTES_MODE_PATTERN,
                                mergeable_ranks={b: i for i, b in enumerate(v.token_bytes)
                                                 if b is not None and i not in specials})
        if allowed_special == "none":
            return "tiktoken", lambda texts: enc.encode_ordinary_batch([t.decode() for t in texts])
        allowed = "all" if allowed_special == "all" else set(allowed_special)
        return "tiktoken", lambda texts: [enc.encode(t.decode(), allowed_special=allowed,
                                                     disallowed_special=()) for t in texts]
    import jax

    cpu = jax.devices("cpu")[0]

    def cpu_path(texts):
        out = []
        for t in texts:
            ids, counts = jax.device_get(tok.encode_batch([t], max_tokens=_pow2(len(t)) + 1, mode=mode,
                                                          allowed_special=allowed_special, device=cpu))
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
            raise VerifyError(f"{paths[d.file_index]}:{d.position}: the inputs hold more documents than the "
                              f"shards ({n}): the inputs changed or the output is incomplete")
        if i in want:
            docs[i] = d
    if len(docs) < len(want):
        raise VerifyError(f"the inputs hold fewer documents than the shards ({n}): they changed")
    name, ref = reference_encoder(tok, meta["mode"], meta["allowed_special"])
    for lo in range(0, len(picks), 256):
        group = picks[lo:lo + 256]
        for i, expect in zip(group, ref([docs[i].data for i in group])):
            k = int(np.searchsorted(starts, i, "right")) - 1
            tokens, idx = opened[k]
            j = i - int(starts[k])
            got = tokens[idx[j]:idx[j + 1]].tolist()
            if got != expect:
                t = next((t for t, (a, b) in enumerate(zip(got, expect)) if a != b), min(len(got), len(expect)))
                d = docs[i]
                raise VerifyError(
                    f"{directory / meta['shards'][k]['bin']}: document {j} ({paths[d.file_index]}:"
                    f"{d.position}) differs from {name} at token {t}: {got[t:t + 3]} vs {expect[t:t + 3]} "
                    f"({len(got)} vs {len(expect)} tokens)")
    return dict(documents=n, tokens=meta["tokens"], shards=len(opened), checked=len(picks), reference=name)

