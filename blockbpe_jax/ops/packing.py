"""Sequence packing on the device: `encode`'s (ids, counts) to fixed [rows, seq_len] batches.

    packed = pack(bb.encode(data, lengths, tables, max_tokens=T), seq_len=2048, rows=64,
                  eos_id=tok.eot_token, method="first_fit")
    packed.tokens, packed.segment_ids, packed.positions   # int32[rows, seq_len] each
    mask = segment_attention_mask(packed.segment_ids)     # bool[rows, seq_len, seq_len]

Pure jax.numpy/lax (CPU and GPU alike), jittable; seq_len, rows, method, overflow, the BOS/EOS
ids and pad_id are static. The layout is grain's (google/grain, `grain.experimental`):

* A document is row b's first min(counts[b], T) ids, with the BOS ids before and the EOS ids
  after it. A count > T (a row `encode` cut) packs the T ids it has and reports the
  count - T cut tokens as dropped; a negative count (-1 invalid, -2 not NFC) is skipped and
  reported in `documents_invalid`; a document of 0 tokens (no ids, no BOS/EOS) takes no
  segment (grain would give it a segment id that owns no cells).
* segment_ids: 1, 2, ... for the pieces of a row from left to right, 0 on padding.
  positions: 0, 1, ... within each piece, restarting at every piece, also for the
  continuation pieces of a split document (grain's `*_positions` in both packers below);
  0 on padding. tokens: pad_id on padding.
* method="sequential" is grain `ConcatThenSplitIterDataset(length_struct={"tokens": seq_len})`
  with its defaults (split_full_length_features=True, BOSHandling.DO_NOTHING: BOS/EOS are
  inserted here, not substituted): all documents back to back, cut into rows of seq_len; a
  document that crosses a row boundary continues in the next row as a new segment. The
  result equals grain's first `rows` output rows; whatever lies past rows * seq_len is dropped.
* method="first_fit" is grain `FirstFitPackIterDataset(length_struct={"tokens": seq_len},
  num_packing_bins=rows, shuffle_bins=False)` fed the document pieces: a document longer than
  seq_len is first cut into pieces of seq_len tokens (the last one shorter; grain instead
  requires elements of at most seq_len), and each piece, in order, goes whole to the first
  row with room for it. A piece that fits no row: overflow="stop" (grain exactly: grain emits
  the batch there) leaves it and every later piece unpacked; overflow="drop" skips it and
  keeps packing later pieces into the room left (a fuller batch; no longer grain's batch once
  something is skipped). Rows are not shuffled and keep grain's order.

Nothing is dropped silently: `Packed.report` has the totals and per-document packed counts
(`PackReport`). `pack_reference` is the same rules as plain Python loops (tests compare them).

Across batches, `pack_stream` is grain's FirstFitPackIterDataset itself (shuffle_bins=False),
carry-over included: what does not fit one batch waits on the device for the next. It lives in
`ops/packing_stream.py` (with `Carry`, `CarryReport`, `empty_carry`) and is importable from here.

    carry = empty_carry(capacity=96, width=T)
    for data, lengths in batches:          # jitted: carry in, carry out, no host round trip
        packed, carry, report = pack_stream(carry, encode(data, lengths, ...), seq_len=T,
                                            rows=R, window=64)
"""

from __future__ import annotations

from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .primitive import Encoded
from .postprocess import _as_ids

__all__ = [
    "pack",
    "Packed",
    "PackReport",
    "pack_reference",
    "segment_attention_mask",
]


class PackReport(NamedTuple):
    """What `pack` did with the documents (int32 scalars unless noted)."""

    tokens_packed: jax.Array  # tokens written (BOS/EOS included)
    tokens_dropped: jax.Array  # tokens of valid documents not written, cut by encode included
    tokens_truncated: jax.Array  # the part of tokens_dropped that encode cut (count - T)
    documents_dropped: jax.Array  # valid documents with tokens of which none was written
    documents_partial: jax.Array  # valid documents written in part (or cut by encode)
    documents_invalid: jax.Array  # rows with a negative count, skipped
    rows_used: jax.Array  # rows holding at least one token
    packed_per_document: jax.Array  # int32[B]: tokens of document b written (0 if invalid)


class Packed(NamedTuple):
    tokens: jax.Array  # int32[rows, seq_len]
    segment_ids: jax.Array  # int32[rows, seq_len], 0 = padding
    positions: jax.Array  # int32[rows, seq_len]
    report: PackReport


_METHODS = ("first_fit", "sequential")


def _check(seq_len, rows, method, overflow):
    if not isinstance(seq_len, int) or seq_len < 1:
        raise ValueError(f"pack: seq_len must be a positive int, got {seq_len!r}")
    if not isinstance(rows, int) or rows < 1:
        raise ValueError(f"pack: rows must be a positive int, got {rows!r}")
    if method not in _METHODS:
        raise ValueError(f"pack: method must be one of {_METHODS}, got {method!r}")
    if overflow not in ("drop", "stop"):
        raise ValueError(f"pack: overflow must be 'drop' or 'stop', got {overflow!r}")


def _ids_and_counts(fn: str, encoded_or_ids, counts):
    """(ids int32[B, T], counts int32[B]) from an Encoded or bare ids and counts."""
    if isinstance(encoded_or_ids, Encoded):
        if counts is not None:
            raise TypeError(f"{fn}: give an Encoded or (ids, counts), not both")
        ids, counts = encoded_or_ids.ids, encoded_or_ids.counts
    else:
        ids = encoded_or_ids
        if counts is None:
            raise TypeError(f"{fn}: counts are required with bare ids")
    ids = jnp.asarray(ids).astype(jnp.int32)
    counts = jnp.asarray(counts).astype(jnp.int32)
    if ids.ndim != 2 or counts.shape != ids.shape[:1]:
        raise TypeError(f"{fn}: ids must be [B, T] and counts [B], got {ids.shape}, {counts.shape}")
    return ids, counts


def _doc_token(ids, kept, doc, j, bos, eos):
    """Token j of document `doc` (BOS ids, its kept ids, EOS ids); arrays of indices."""
    width = ids.shape[1]
    c = kept[doc]
    t = j - len(bos)
    out = ids[doc, jnp.clip(t, 0, width - 1)]
    if bos:
        out = jnp.where(j < len(bos), jnp.asarray(bos, jnp.int32)[jnp.clip(j, 0, len(bos) - 1)], out)
    if eos:
        e = t - c
        out = jnp.where(e >= 0, jnp.asarray(eos, jnp.int32)[jnp.clip(e, 0, len(eos) - 1)], out)
    return out


def _sequential(n, seq_len, rows):
    """Concatenate then split: per cell (doc, index in doc, position, segment, live)."""
    ends = jnp.cumsum(n, dtype=jnp.int32)
    starts = ends - n
    g = jnp.arange(rows * seq_len, dtype=jnp.int32).reshape(rows, seq_len)
    live = g < ends[-1]
    doc = jnp.clip(jnp.searchsorted(ends, g, side="right"), 0, n.shape[0] - 1).astype(jnp.int32)
    row_start = g[:, :1]
    position = g - jnp.maximum(starts[doc], row_start)
    rank = jnp.cumsum(n > 0, dtype=jnp.int32)  # rank among non-empty documents
    segment = rank[doc] - rank[doc[:, :1]] + 1
    packed = jnp.clip(jnp.minimum(ends, rows * seq_len) - starts, 0, n)
    return doc, g - starts[doc], position, segment, live, packed


def _first_fit(n, seq_len, rows, n_pieces, stop):
    """First fit of the seq_len pieces of every document, in order (a scan over documents)."""
    S = seq_len

    def step(carry, length):
        fill, nseg, stopped = carry
        out = []
        for k in range(n_pieces):
            size = jnp.clip(length - k * S, 0, S)
            active = size > 0
            fits = fill + size <= S
            row = jnp.argmax(fits).astype(jnp.int32)
            ok = active & fits[row] & ~stopped
            if stop:
                stopped = stopped | (active & ~fits[row])
            out.append((jnp.where(ok, row, -1), fill[row], nseg[row] + 1))
            fill = fill.at[row].add(jnp.where(ok, size, 0))
            nseg = nseg.at[row].add(jnp.where(ok, 1, 0))
        return (fill, nseg, stopped), tuple(jnp.stack(x) for x in zip(*out))

    zeros = jnp.zeros(rows, jnp.int32)
    (fill, _, _), (row, offset, seg) = lax.scan(step, (zeros, zeros, jnp.bool_(False)), n)
    row, offset, seg = row.reshape(-1), offset.reshape(-1), seg.reshape(-1)  # piece = b*K + k
    n_total = row.shape[0]
    piece = jnp.arange(n_total, dtype=jnp.int32)
    size = jnp.clip(n[piece // n_pieces] - (piece % n_pieces) * S, 0, S)
    start_cell = jnp.where(row >= 0, row * S + offset, rows * S)
    owner = jnp.zeros(rows * S, jnp.int32).at[start_cell].max(piece + 1, mode="drop")
    owner = lax.cummax(owner.reshape(rows, S), axis=1) - 1  # pieces fill a row left to right
    s = jnp.arange(S, dtype=jnp.int32)[None, :]
    live = s < fill[:, None]
    owner = jnp.clip(owner, 0, n_total - 1)
    position = s - offset[owner]
    j = (owner % n_pieces) * S + position
    packed = jnp.where(row >= 0, size, 0).reshape(-1, n_pieces).sum(axis=1, dtype=jnp.int32)
    return owner // n_pieces, j, position, seg[owner], live, packed


def pack(
    encoded_or_ids,
    counts=None,
    *,
    seq_len: int,
    rows: int,
    bos_id: int | Sequence[int] | None = None,
    eos_id: int | Sequence[int] | None = None,
    method: str = "first_fit",
    overflow: str = "drop",
    pad_id: int = 0,
) -> Packed:
    """Packs documents (`encode`'s rows) into `rows` rows of `seq_len` tokens. Jittable.

    Args:
      encoded_or_ids: an `Encoded` (then counts=None), or ids int[B, T].
      counts: int[B] full counts (`Encoded.counts`): > T means cut by encode, < 0 invalid.
      seq_len, rows: static output shape.
      bos_id, eos_id: an id, a sequence of ids, or None: put before / after each document.
      method: "first_fit" (grain FirstFitPackIterDataset) or "sequential" (grain
        ConcatThenSplitIterDataset); see the module docstring for the exact rules.
      overflow: first_fit only: "drop" (skip a piece that fits no row, keep packing) or
        "stop" (grain: stop at the first piece that fits no row).
      pad_id: token of the padding cells.

    Returns:
      Packed(tokens, segment_ids, positions: int32[rows, seq_len], report: PackReport).
    """
    _check(seq_len, rows, method, overflow)
    ids, counts = _ids_and_counts("pack", encoded_or_ids, counts)
    bos, eos = _as_ids(bos_id), _as_ids(eos_id)
    B, width = ids.shape
    if B == 0 or width == 0:  # one padding column / document keeps every gather in bounds
        ids = jnp.zeros((max(B, 1), max(width, 1)), jnp.int32)
        counts = jnp.concatenate([counts, jnp.full(1 - min(B, 1), -1, jnp.int32)])
    valid = counts >= 0
    kept = jnp.clip(counts, 0, width)
    n = jnp.where(valid, kept + len(bos) + len(eos), 0)
    truncated = jnp.where(valid, jnp.maximum(counts - width, 0), 0)

    if method == "sequential":
        doc, j, position, segment, live, packed = _sequential(n, seq_len, rows)
    else:
        n_pieces = max(1, -(-(width + len(bos) + len(eos)) // seq_len))
        doc, j, position, segment, live, packed = _first_fit(n, seq_len, rows, n_pieces, overflow == "stop")
    tokens = jnp.where(live, _doc_token(ids, kept, doc, j, bos, eos), jnp.int32(pad_id))
    segment_ids = jnp.where(live, segment, 0).astype(jnp.int32)
    positions = jnp.where(live, position, 0).astype(jnp.int32)

    packed, n, truncated, valid = packed[:B], n[:B], truncated[:B], valid[:B]
    missing = n - packed + truncated
    i32 = lambda x: jnp.sum(x, dtype=jnp.int32)
    report = PackReport(
        tokens_packed=i32(packed),
        tokens_dropped=i32(missing),
        tokens_truncated=i32(truncated),
        documents_dropped=i32((n > 0) & (packed == 0)),
        documents_partial=i32((packed > 0) & (missing > 0)),
        documents_invalid=i32(~valid),
        rows_used=i32(jnp.any(live, axis=1)),
        packed_per_document=packed.astype(jnp.int32),
    )
    return Packed(tokens, segment_ids, positions, report)


def segment_attention_mask(segment_ids, *, causal: bool = True):
    """bool[..., S, S]: query i attends key j iff same non-zero segment (and j <= i if causal)."""
    seg = jnp.asarray(segment_ids)
    mask = (seg[..., :, None] == seg[..., None, :]) & (seg[..., :, None] > 0)
    if causal:
        S = seg.shape[-1]
        mask = mask & jnp.tril(jnp.ones((S, S), jnp.bool_))
    return mask


def pack_reference(
    ids,
    counts,
    *,
    seq_len: int,
    rows: int,
    bos_id=None,
    eos_id=None,
    method: str = "first_fit",
    overflow: str = "drop",
    pad_id: int = 0,
):
    """`pack`'s rules as plain Python loops over NumPy arrays: (tokens, segment_ids, positions,
    report dict). Slow and obviously-correct; the tests compare `pack` against it."""
    _check(seq_len, rows, method, overflow)
    ids, counts = np.asarray(ids), np.asarray(counts)
    bos, eos = list(_as_ids(bos_id)), list(_as_ids(eos_id))
    width = ids.shape[1]
    docs, truncated = [], []
    for b in range(ids.shape[0]):
        c = int(counts[b])
        if c < 0:
            docs.append(None)
            truncated.append(0)
            continue
        docs.append(bos + [int(t) for t in ids[b, : min(c, width)]] + eos)
        truncated.append(max(c - width, 0))
    # Pieces: (document, tokens). sequential: the concatenated stream cut at row boundaries.
    placed = []  # (row, document, tokens) in the order they are written
    if method == "sequential":
        row, fill = 0, 0
        for b, doc in enumerate(docs):
            rest = list(doc or [])
            while rest and row < rows:
                take = min(len(rest), seq_len - fill)
                placed.append((row, b, rest[:take]))
                rest, fill = rest[take:], fill + take
                if fill == seq_len:
                    row, fill = row + 1, 0
    else:
        fill, stopped = [0] * rows, False
        for b, doc in enumerate(docs):
            doc = doc or []
            for k in range(0, len(doc), seq_len):
                piece = doc[k : k + seq_len]
                target = next((r for r in range(rows) if fill[r] + len(piece) <= seq_len), None)
                if target is None and overflow == "stop":
                    stopped = True
                if target is None or stopped:
                    continue
                placed.append((target, b, piece))
                fill[target] += len(piece)
    tokens = np.full((rows, seq_len), pad_id, np.int32)
    segment_ids = np.zeros((rows, seq_len), np.int32)
    positions = np.zeros((rows, seq_len), np.int32)
    fill, nseg = [0] * rows, [0] * rows
    packed = [0] * len(docs)
    for row, b, piece in placed:
        nseg[row] += 1
        for p, t in enumerate(piece):
            tokens[row, fill[row]] = t
            segment_ids[row, fill[row]] = nseg[row]
            positions[row, fill[row]] = p
            fill[row] += 1
        packed[b] += len(piece)
    lengths = [len(d) if d is not None else 0 for d in docs]
    missing = [lengths[b] - packed[b] + truncated[b] for b in range(len(docs))]
    valid = [d is not None for d in docs]
    report = dict(
        tokens_packed=sum(packed),
        tokens_dropped=sum(missing),
        tokens_truncated=sum(truncated),
        documents_dropped=sum(1 for b in range(len(docs)) if lengths[b] > 0 and packed[b] == 0),
        documents_partial=sum(1 for b in range(len(docs)) if packed[b] > 0 and missing[b] > 0),
        documents_invalid=valid.count(False),
        rows_used=sum(1 for f in fill if f > 0),
        packed_per_document=np.asarray(packed, np.int32),
    )
    return tokens, segment_ids, positions, report
