"""First-fit packing across batches with carry-over: `pack_stream`, its `Carry` and `CarryReport`.

`pack_stream` is grain's FirstFitPackIterDataset itself (shuffle_bins=False), carry-over
included: what does not fit one batch waits on the device for the next.

    carry = empty_carry(capacity=96, width=T)
    for data, lengths in batches:          # jitted: carry in, carry out, no host round trip
        packed, carry, report = pack_stream(carry, encode(data, lengths, ...), seq_len=T,
                                            rows=R, window=64)

One batch is `pack(method="first_fit", overflow="stop")` (`ops/packing.py`, which states the
layout's rules) over a window of the stream. The names are importable from
`blockbpe_jax.ops.packing` too.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp

from .packing import _check, _ids_and_counts, pack

__all__ = ["pack_stream", "Carry", "CarryReport", "empty_carry"]


class Carry(NamedTuple):
    """Documents waiting for the next batch of `pack_stream`, in stream order, at the front."""

    ids: jax.Array  # int32[capacity, width]: a document's ids not yet written, left-aligned
    counts: jax.Array  # int32[capacity]: how many; 0 = a free slot


class CarryReport(NamedTuple):
    """What `pack_stream` did besides packing (int32 scalars unless noted)."""

    batch_full: jax.Array  # bool: a piece fitted no row, so grain ends the batch here too
    documents_carried: jax.Array  # documents (or their unwritten pieces) in the new carry
    documents_lost: jax.Array  # documents with tokens left that did not fit the carry: dropped
    tokens_lost: jax.Array  # their tokens
    documents_invalid: jax.Array  # new rows with a negative count, skipped


def empty_carry(capacity: int, width: int) -> Carry:
    """A carry of `capacity` free slots for documents of up to `width` ids."""
    if not isinstance(capacity, int) or capacity < 0:
        raise ValueError(f"empty_carry: capacity must be an int >= 0, got {capacity!r}")
    if not isinstance(width, int) or width < 1:
        raise ValueError(f"empty_carry: width must be a positive int, got {width!r}")
    return Carry(jnp.zeros((capacity, width), jnp.int32), jnp.zeros((capacity,), jnp.int32))


def _front(ids, counts):
    """Documents with tokens moved to the front, keeping their order (a stable partition)."""
    order = jnp.argsort((counts <= 0).astype(jnp.int32), stable=True)
    return ids[order], counts[order]


def pack_stream(
    carry: Carry, encoded_or_ids, counts=None, *, seq_len: int, rows: int, window: int, pad_id: int = 0
):
    """One batch of first-fit packing over a stream of documents, with carry-over. Jittable.

    The stream is the carry's documents, then the new ones (empty and invalid documents are
    skipped). The first `window` documents of it are packed as `pack(method="first_fit",
    overflow="stop")` does: each seq_len piece, in order, into the first row with room, and
    the batch ends at the first piece that fits no row. That piece, every later one and the
    documents past the window make the next carry, in order. Fed every document once, batch
    after batch, this gives grain's `FirstFitPackIterDataset(length_struct={"tokens": seq_len},
    num_packing_bins=rows, shuffle_bins=False)` batches exactly, as long as every batch ends
    full (`report.batch_full`): a window that fits whole makes a batch grain would have kept
    filling. Keep the stream ahead of the packer (window and the documents fed per batch above
    what a batch takes); `CarryReport` says when it was not, and what did not fit the carry.

    Args:
      carry: `Carry` from `empty_carry(capacity, width)` or the previous call; its width must
        be the ids' width.
      encoded_or_ids, counts: the new documents, as for `pack` (no BOS/EOS here: put them in
        the ids). A count above the width (cut by encode) packs the ids there are.
      seq_len, rows, pad_id: as for `pack`.
      window: static: how many documents of the stream one batch looks at (the scan length).

    Returns:
      (Packed, Carry, CarryReport). Packed.report is `pack`'s over the window: its
      tokens_dropped and documents_partial count what went to the carry too.
    """
    _check(seq_len, rows, "first_fit", "stop")
    if not isinstance(window, int) or window < 1:
        raise ValueError(f"pack_stream: window must be a positive int, got {window!r}")
    ids, counts = _ids_and_counts("pack_stream", encoded_or_ids, counts)
    capacity, width = carry.ids.shape
    if ids.shape[1] != width:
        raise ValueError(
            f"pack_stream: the ids are {ids.shape[1]} wide and the carry "
            f"{width}; make the carry with empty_carry(capacity, width={ids.shape[1]})"
        )
    invalid = jnp.sum(counts < 0, dtype=jnp.int32)
    all_ids, all_counts = _front(jnp.concatenate([carry.ids, ids]), jnp.concatenate([carry.counts, counts]))
    total = all_ids.shape[0]
    m = min(window, total)
    packed = pack(
        all_ids[:m],
        all_counts[:m],
        seq_len=seq_len,
        rows=rows,
        method="first_fit",
        overflow="stop",
        pad_id=pad_id,
    )
    # Written pieces are a prefix of each document (pieces go in order and the batch stops at
    # the first one that fits nowhere): the rest starts at the count written.
    start = jnp.concatenate([packed.report.packed_per_document, jnp.zeros(total - m, jnp.int32)])
    rest = jnp.clip(all_counts, 0, width) - start
    col = jnp.arange(width, dtype=jnp.int32)[None, :]
    rest_ids = jnp.take_along_axis(all_ids, jnp.clip(start[:, None] + col, 0, width - 1), axis=1)
    rest_ids = jnp.where(col < rest[:, None], rest_ids, 0)
    rest_ids, rest = _front(rest_ids, rest)
    lost = jnp.maximum(rest[capacity:], 0)
    i32 = lambda x: jnp.sum(x, dtype=jnp.int32)
    report = CarryReport(
        batch_full=jnp.any(jnp.clip(all_counts[:m], 0, width) > start[:m]),
        documents_carried=i32(rest[:capacity] > 0),
        documents_lost=i32(lost > 0),
        tokens_lost=i32(lost),
        documents_invalid=invalid,
    )
    return packed, Carry(rest_ids[:capacity], jnp.maximum(rest[:capacity], 0)), report
