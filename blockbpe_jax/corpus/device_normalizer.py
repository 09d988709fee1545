"""The normalizer in the corpus job on the device (docs/corpus.md, "The normalizer: on the device
or on the host"): whether the job may leave a tokenizer's normalizer to the encode calls
(`device_normalizer_available`), and the documents they report, normalized on the host and
encoded again (`encode_normalized_again`, from the engine's finishing step). Where the host
normalizes instead, corpus.engine.plan_window does it for the whole window."""

from __future__ import annotations

import numpy as np

from .device import CompiledWindows
from .plan import plan_batches
from .types import CorpusError, Window

NOT_NORMALIZED = -2  # a row's count where the executors could not normalize it (kCountNotNormalized)


def device_normalizer_available(tok, sep: bytes) -> bool:
    """Whether the corpus job leaves the tokenizer's normalizer to the encode calls (docs/corpus.md):
    one the executors apply themselves (Tokenizer._device_normalizes: NFC, Lowercase, NFC then
    Lowercase) and, with NFC, a packing separator (b"": none) that NFC leaves in place in any
    row: every code point of it a normalization boundary and none of them in the decomposition
    of a code point NFC rewrites (NFC could spell the separator out of a document's text
    otherwise). Lowercase needs no such test: it rewrites code points one at a time, and the
    separator, a special token matched in the raw text, is not lowercased."""
    if not tok._device_normalizes:
        return False
    if not sep or not tok.nfc:
        return True
    from ..pretok import nfc_data, unicode

    try:
        points = np.array([ord(c) for c in sep.decode("utf-8")], np.int64)
    except UnicodeDecodeError:
        return False
    decomp = unicode.nfc_decompositions()
    rewritten = decomp[unicode.nfc_quick_check()[decomp[:, 0]] == 2, 1:]
    return not nfc_data.unsafe_code_points()[points].any() and not np.isin(points, rewritten).any()


def document_bytes(w: Window, docs=None) -> list[bytes]:
    """The window's documents (those of the indices `docs`, default all) as bytes, read back
    from the device where only it holds them (the device split without packing)."""
    data = w.data
    if data.size and data.strides[0] == 0:  # (corpus.device_split without packing: a view of one byte)
        data = np.asarray(w.slot.to_device())
    docs = np.arange(w.ndocs) if docs is None else np.asarray(docs)
    raw, starts, ends = data.tobytes(), w.offsets[docs], w.offsets[docs + 1] - w.sep_len
    return [raw[a:b] for a, b in zip(starts.tolist(), ends.tolist())]


def encode_normalized_again(engine, work, got: np.ndarray, raw, end: int, widths: np.ndarray):
    """With the normalizer on the device: the documents the encode calls reported (count -2, a
    row whose NFC outgrows its width or holds a segment of hundreds of combining marks,
    ffi/pretok/nfc_normalize.h, or with a code point whose lowercase is not written in place,
    pretok/lowercase.h), and every document of a packed call where one is (a row
    reported, or whose separator NFC joined to the next document's first code point,
    writes no separators: the call's later slots moved), normalized on the host around
    their specials (engine.normalized_documents) and encoded again, trusted, at widths that fit them, into `raw` from `end`. Updates got,
    the window's src, count_at and kept, and widths (the calls' widths compaction
    allows) in place -> (raw, end). engine: the job's corpus.engine.WindowEncoder; work: the
    window's corpus.engine.WindowWork, its counts back (`got`, in plan order)."""
    import jax

    plan, perm = work.plan, work.perm
    sizes = [len(p.docs) for p in plan]
    call_of = np.repeat(np.arange(len(plan)), sizes)
    packed_call = np.array([p.slots > 0 for p in plan], bool)
    again = (got == NOT_NORMALIZED) | ((got < 0) & packed_call[call_of])
    if not again.any():
        return raw, end
    for c in np.unique(call_of[again]):
        if packed_call[c]:
            again[call_of == c] = True
    redo = np.flatnonzero(again)
    w = work.window
    texts = engine.normalized_documents(w, perm[redo])
    lengths = np.fromiter(map(len, texts), np.int64, len(texts))
    if engine.max_len is not None and lengths.max() > engine.max_len:
        i = int(np.argmax(lengths))
        raise CorpusError(
            f"{engine.where(w, int(perm[redo[i]]))}: document of {int(lengths[i])} bytes, more than "
            f"--max-len {engine.max_len} (use --split chunk:N)"
        )
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    slot = engine.buffers.flat_of(np.frombuffer(b"".join(texts) or b"\0", np.uint8))
    rows, calls, positions = [], [], []
    for width, idx in plan_batches(lengths, engine.batch_bytes, engine.max_docs, engine.max_len):
        g, r = redo[idx], np.arange(len(idx))
        calls.append((len(idx), width, width + 1, end, sum(len(x) for x in rows), 0))
        rows.append(idx)
        work.src[g], work.count_at[g] = end + r * (width + 1), end + len(idx) * (width + 1) + r
        work.kept[g] = width + 1  # (every token kept: never encoded again at full width)
        np.maximum.at(widths, call_of[g], width)
        end += len(idx) * (width + 2)
    if end > raw.size:
        raw = engine.fns.grow(raw, size=engine.buffers.grown(end))
    order = np.concatenate(rows)
    table = engine.host_table(np.stack([starts[order], lengths[order]]), np.arange(len(order)), len(order))
    if engine.trusted_encodes is None:
        tables = engine.tok.tables(engine.allowed_special, engine.target)
        engine.trusted_encodes = CompiledWindows(tables, engine.target, **engine.static, assume_nfc=True)
    calls = np.array(calls, np.int64)
    space = engine.buffers.workspace(engine.trusted_encodes.scratch(calls))
    raw = engine.trusted_encodes(slot.to_device(), jax.device_put(table, engine.target), raw, calls, space)
    positions = np.zeros(engine.buffers.doc_slots(len(redo)), np.int32)
    positions[: len(redo)] = work.count_at[redo]
    got[redo] = np.asarray(engine.reads.gather(raw, positions))[: len(redo)]
    engine.buffers.give_back_flat(slot)  # (the gather waited for the call that read it)
    engine.normalized_on_host += len(redo)
    return raw, end
