"""On-device post-processing of `encode`'s output, in pure jax.numpy (CPU and GPU alike).

* `decode(ids, counts, tables, max_bytes=...)`: ids back to padded bytes, jittable.
* `finalize(encoded, max_length=..., bos_id=..., eos_id=..., ...)`: BOS/EOS, truncation side
  and padding side, the way HF tokenizers' `padding=`/`truncation=` options lay rows out.
* `attention_mask(counts, max_length, padding_side=...)`: the matching bool mask.

All three work under `jax.jit` and `jax.vmap`; the options are static Python values.
Every function keeps the library's count convention: a count is the row's full length, so
`count > width` means the row was cut, and -1 marks a row that could not be produced.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
from jax import lax

from .primitive import EncodeTables, Encoded

__all__ = ["decode", "finalize", "attention_mask"]


def _token_bytes_tables(tables):
    if not isinstance(tables, EncodeTables):  # a Tokenizer
        tables = tables.tables()
    return tables.token_offsets, tables.token_data


def _decode_row(ids, count, offsets, data, max_bytes: int):
    """One row: (uint8[max_bytes], int32 byte length or -1)."""
    width = ids.shape[0]
    vocab_size = offsets.shape[0] - 1
    position = jnp.arange(width, dtype=jnp.int32)
    live = position < jnp.clip(count, 0, width)
    in_vocab = (ids >= 0) & (ids < vocab_size)
    safe = jnp.where(in_vocab, ids, 0)
    source = offsets[safe]
    length = offsets[safe + 1] - source
    # A live id outside the vocabulary, or a hole (an id with no bytes), spoils the row.
    bad = jnp.any(live & ~(in_vocab & (length > 0))) | (count < 0)
    length = jnp.where(live, length, 0)
    ends = jnp.cumsum(length, dtype=jnp.int32)
    starts = ends - length
    total = ends[-1] if width else jnp.int32(0)
    # Owner token of every output byte: each token writes its index at its first byte, then a
    # running maximum fills the bytes after it. Zero-length slots write 0 (harmless under max).
    owner = jnp.zeros(max_bytes, jnp.int32).at[starts].max(jnp.where(length > 0, position, 0), mode="drop")
    owner = lax.cummax(owner)
    j = jnp.arange(max_bytes, dtype=jnp.int32)
    keep = (j < total) & ~bad
    src = jnp.where(keep, source[owner] + (j - starts[owner]), 0)
    out = jnp.where(keep, data[src], jnp.uint8(0))
    return out, jnp.where(bad, jnp.int32(-1), total)


def decode(ids, counts, tables, *, max_bytes: int):
    """Token ids back to bytes on the device: jittable, vmappable.

    Args:
      ids: int[B, T] token ids (`Encoded.ids`); positions >= counts[b] are ignored.
      counts: int[B] (`Encoded.counts`); the first min(counts[b], T) ids of row b are decoded
        (a count > T means `encode` truncated the row: its bytes are those of the T ids kept).
      tables: an `EncodeTables` (`tok.tables()`) or a `Tokenizer`; only token_offsets and
        token_data are read, so special tokens decode to their text.
      max_bytes: static width of the output.

    Returns:
      (bytes uint8[B, max_bytes], byte_lengths int32[B]): row b holds its bytes then zeros.
      byte_lengths are full lengths (> max_bytes: the bytes were cut at max_bytes). A row that
      contains an id outside [0, V), or an id with no bytes (a hole in the vocabulary), or has
      a negative count, is an error: byte_lengths = -1 and its bytes are all zero.
    """
    ids = jnp.asarray(ids).astype(jnp.int32)
    counts = jnp.asarray(counts).astype(jnp.int32)
    if ids.ndim != 2 or counts.shape != ids.shape[:1]:
        raise TypeError(f"decode: ids must be [B, T] and counts [B], got {ids.shape}, {counts.shape}")
    if not isinstance(max_bytes, int) or max_bytes < 1:
        raise ValueError(f"decode: max_bytes must be a positive int, got {max_bytes!r}")
    offsets, data = _token_bytes_tables(tables)
    row = lambda i, c: _decode_row(i, c, offsets, data, max_bytes)
    return jax.vmap(row)(ids, counts)


def _as_ids(x) -> tuple[int, ...]:
    if x is None:
        return ()
    return (int(x),) if isinstance(x, int) or hasattr(x, "__index__") else tuple(int(i) for i in x)


def finalize(
    encoded: Encoded,
    *,
    max_length: int,
    bos_id: int | Sequence[int] | None = None,
    eos_id: int | Sequence[int] | None = None,
    pad_id: int = 0,
    padding_side: str = "right",
    truncation_side: str = "right",
) -> Encoded:
    """Model-ready rows: [BOS] + tokens + [EOS], cut to `max_length`, padded on one side.

    Args:
      encoded: `encode`'s output (ids int[B, T], full counts int[B]).
      max_length: static width of the result; it must hold the BOS and EOS ids.
      bos_id, eos_id: an id, a sequence of ids (prefix / suffix), or None. They are always
        kept: truncation removes text tokens only.
      pad_id: fills the padding.
      padding_side: "right" (tokens at the start) or "left" (tokens end at the last column).
      truncation_side: "right" keeps the first tokens, "left" the last ones.

    Returns:
      Encoded(ids int32[B, max_length], counts int32[B]). counts are the full finalized
      lengths, `counts[b] = encoded.counts[b] + len(bos) + len(eos)`, so as for `encode`,
      `counts > max_length` is the truncation flag and `min(counts, max_length)` the number of
      real ids (`attention_mask` uses it). counts = -1 marks a row that cannot be built from
      the ids given: its input count was negative, or the ids to keep lie past the input width
      T (left truncation of a row that `encode` already cut, or a max_length wider than T
      after a cut: encode with max_tokens >= the longest row for those). Such rows are padding.
    """
    if padding_side not in ("right", "left"):
        raise ValueError(f"finalize: padding_side must be 'right' or 'left', got {padding_side!r}")
    if truncation_side not in ("right", "left"):
        raise ValueError(f"finalize: truncation_side must be 'right' or 'left', got {truncation_side!r}")
    prefix, suffix = _as_ids(bos_id), _as_ids(eos_id)
    n_pre, n_suf = len(prefix), len(suffix)
    if not isinstance(max_length, int) or max_length < max(1, n_pre + n_suf):
        raise ValueError(
            f"finalize: max_length must be an int >= max(1, {n_pre + n_suf}) "
            f"(the BOS and EOS ids), got {max_length!r}"
        )
    ids = jnp.asarray(encoded.ids).astype(jnp.int32)
    counts = jnp.asarray(encoded.counts).astype(jnp.int32)[:, None]
    width = ids.shape[1]

    kept = jnp.clip(jnp.minimum(counts, max_length - n_pre - n_suf), 0)  # text tokens kept
    first = counts - kept if truncation_side == "left" else jnp.zeros_like(counts)
    bad = (counts < 0) | ((kept > 0) & (first + kept > width))
    used = n_pre + kept + n_suf
    column = jnp.arange(max_length, dtype=jnp.int32)[None, :]
    q = column - (max_length - used if padding_side == "left" else 0)  # index within the row
    text = jnp.take_along_axis(ids, jnp.clip(first + q - n_pre, 0, max(width - 1, 0)), axis=1)
    out = jnp.where((q >= n_pre) & (q < n_pre + kept), text, jnp.int32(pad_id))
    if n_pre:
        out = jnp.where(
            (q >= 0) & (q < n_pre), jnp.asarray(prefix, jnp.int32)[jnp.clip(q, 0, n_pre - 1)], out
        )
    if n_suf:
        s = q - n_pre - kept
        out = jnp.where(
            (s >= 0) & (s < n_suf), jnp.asarray(suffix, jnp.int32)[jnp.clip(s, 0, n_suf - 1)], out
        )
    out = jnp.where(bad, jnp.int32(pad_id), out)
    new_counts = jnp.where(bad, -1, counts + n_pre + n_suf)[:, 0]
    return Encoded(out, new_counts)


def attention_mask(counts_or_encoded, max_length: int | None = None, *, padding_side: str = "right"):
    """bool[B, max_length]: True on the real ids of each row (`finalize`'s layout).

    Takes counts (int[B], full counts as `finalize`/`encode` report them: clipped to
    max_length; -1 gives an all-False row) or an `Encoded` (max_length then defaults to its
    width). `padding_side` must be the one given to `finalize`.
    """
    if isinstance(counts_or_encoded, Encoded):
        counts = counts_or_encoded.counts
        max_length = counts_or_encoded.ids.shape[1] if max_length is None else max_length
    else:
        counts = counts_or_encoded
    if max_length is None:
        raise ValueError("attention_mask: max_length is required with bare counts")
    if padding_side not in ("right", "left"):
        raise ValueError(f"attention_mask: padding_side must be 'right' or 'left', got {padding_side!r}")
    real = jnp.clip(jnp.asarray(counts).astype(jnp.int32), 0, max_length)[..., None]
    column = jnp.arange(max_length, dtype=jnp.int32)
    return column >= max_length - real if padding_side == "left" else column < real
