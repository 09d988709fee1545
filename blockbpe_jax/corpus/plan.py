"""The corpus job's plan of a window's encode calls, as rules on numbers (no JAX): documents
sorted by length into calls of one power-of-two width (`plan_batches`), the short ones packed
into shared rows (`packing`), and the plan as the window FFI call's rows (`window_calls`).
corpus/engine.py runs the plan.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np


DEFAULT_BATCH_BYTES = 4 << 20  # padded bytes (rows x width) per encode call
DEFAULT_PACK_WIDTH = 16384  # bytes of a row of packed short documents (0: none packed)


class Packing(NamedTuple):
    """How a job packs short documents into shared rows (core/pack_documents.h)."""

    sep: bytes  # the separator after each document: a special token's bytes
    sep_id: int
    allowed: object  # the allowed specials of the packed rows: the job's and the separator
    width: int


def packing(tok, mode: str, allowed_special, width: int) -> Packing | None:
    """The job's packing, or None where the separator's split is not known to be exact:
    byte-level BPE (exact or bytes mode) only, with a special token to separate documents
    that no other allowed special overlaps (a special matched across a document's end would
    win over the separator: leftmost first)."""
    if not isinstance(width, int) or width < 0:
        raise ValueError(f"pack_width must be an int, 0 or more, got {width!r}")
    specials = tok.vocab.special_tokens
    if not width or mode not in ("exact", "bytes") or tok.vocab.char_level is not None or not specials:
        return None
    name = "<|endoftext|>" if "<|endoftext|>" in specials else min(specials, key=specials.get)
    sep = name.encode()
    allowed = set(tok._special_key(allowed_special)) | {name}
    for other in (s.encode() for s in allowed if s != name):
        if any(sep.startswith(other[i:]) or other[i:].startswith(sep) for i in range(len(other))):
            return None
    if len(sep) >= width:
        return None
    return Packing(sep, specials[name], "all" if allowed_special == "all" else allowed, width)


def pow2_widths(lengths: np.ndarray, floor: int = 16) -> np.ndarray:
    """pow2 of each length, exactly (frexp's exponent of n - 1 is its bit length)."""
    return np.maximum(floor, np.left_shift(1, np.frexp(np.maximum(lengths - 1, 0))[1].astype(np.int64)))


def plan_batches(
    lengths: np.ndarray, batch_bytes: int, max_docs: int | None, max_len: int | None
) -> list[tuple[int, np.ndarray]]:
    """(width, document indices) of each encode call of a window: the documents sorted by
    length, each call holding documents of one power-of-two width (or all at max_len), at
    most batch_bytes // width of them (one at least) and at most max_docs."""
    if not len(lengths):
        return []
    order = np.argsort(lengths, kind="stable")
    widths = np.full(len(order), max_len, np.int64) if max_len is not None else pow2_widths(lengths[order])
    cuts = np.flatnonzero(np.diff(widths)) + 1
    out = []
    for lo, hi in zip(np.concatenate([[0], cuts]).tolist(), np.concatenate([cuts, [len(order)]]).tolist()):
        width = int(widths[lo])
        rows = call_rows(width, batch_bytes, max_docs)
        out += [(width, order[i : min(i + rows, hi)]) for i in range(lo, hi, rows)]
    return out


def first_pass_tokens(width: int) -> int:
    """Token columns of a call of this byte width. Byte-level BPE gives at most one token per
    byte, but real text gives one per 2.5-4.5 bytes: half the width keeps the copy back small,
    and the rare row with more tokens (its count says so) is encoded again at full width."""
    return width + 1 if width < 64 else width // 2


def call_rows(width: int, batch_bytes: int, max_docs: int | None) -> int:
    """The most documents (rows) a call of this width holds: batch_bytes // width of them (one
    at least), and at most max_docs."""
    rows = max(1, batch_bytes // width)
    return rows if max_docs is None else min(rows, max_docs)


def packed_calls(row_of_doc: np.ndarray, n_rows: int, full: int):
    """(documents, first row, rows) of each call of packed rows, `full` rows a call: the
    documents of rows [first row, first row + rows), in order (rows hold consecutive
    documents, so a call's are a run of the packed ones)."""
    packed = np.flatnonzero(row_of_doc >= 0)
    cuts = np.searchsorted(row_of_doc[packed], np.arange(0, n_rows + full, full)).tolist()
    for k, (lo, hi) in enumerate(zip(cuts[:-1], cuts[1:])):
        if lo < hi:
            yield packed[lo:hi], k * full, min(full, n_rows - k * full)


class PlannedCall(NamedTuple):
    """One encode call of a window's plan."""

    docs: np.ndarray  # the window's documents it encodes (indices), in row order
    width: int  # bytes per row
    T: int  # tokens kept per row (the first pass: first_pass_tokens(width); packed rows: width)
    rows: int  # rows of the call: len(docs), or the packed rows' count
    offset: int  # where its ids (rows x T, then the counts) start in the window's id buffer
    entry: int  # its first row's entry in the window's document table
    slots: int  # packed rows: len(docs), slots for their separators' positions; 0: a row each


def window_calls(plan: list[PlannedCall]) -> np.ndarray:
    """A plan as the window FFI call's rows (ffi/binding/window_ffi.h, WindowCall): int64[C, 6]
    of rows, width, T, offset, entry and separator slots (0: a row per document)."""
    return np.array([(p.rows, p.width, p.T, p.offset, p.entry, p.slots) for p in plan], np.int64).reshape(
        -1, 6
    )
