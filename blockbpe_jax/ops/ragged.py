"""Ragged input: one flat byte buffer plus offsets instead of a padded [B, L] array.

The host then only concatenates the strings (no padding bytes to build or to copy to the
device); the padded layout the kernel reads is gathered on the device, inside the same jitted
computation as the encode. (The ids out flat: `Encoded.flat_numpy`, ops/flat_ids.py.)
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from .primitive import Encoded, encode


def pack_ragged(texts: Sequence[str | bytes]) -> tuple[np.ndarray, np.ndarray]:
    """list of str/bytes -> (uint8[N] all bytes back to back, int32[B + 1] offsets). The items
    are pack_strings' (TypeError for anything else: `bytes(3)` would be three zero bytes)."""
    blobs = []
    for i, t in enumerate(texts):
        if not isinstance(t, (str, bytes)):
            raise TypeError(f"pack_ragged: item {i} is neither str nor bytes")
        blobs.append(t.encode("utf-8") if isinstance(t, str) else t)
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    np.cumsum([len(b) for b in blobs], out=offsets[1:])
    if offsets[-1] >= 2**31:
        raise ValueError(f"pack_ragged: {int(offsets[-1])} bytes do not fit int32 offsets")
    return np.frombuffer(b"".join(blobs), dtype=np.uint8), offsets.astype(np.int32)


def unflatten(flat, offsets, max_len: int):
    """(uint8[N], int32[B+1]) -> (uint8[B, max_len], int32[B]) on the device, jittable.

    A string longer than max_len keeps its true length, so `encode` refuses it (checked
    lengths) or flags its row (count -1 with check_lengths=False): nothing is cut silently.
    """
    starts, lengths = offsets[:-1], offsets[1:] - offsets[:-1]
    cols = jnp.arange(max_len, dtype=jnp.int32)
    index = jnp.clip(starts[:, None] + cols[None, :], 0, max(flat.shape[0] - 1, 0))
    inside = cols[None, :] < lengths[:, None]
    data = jnp.where(inside, flat[index] if flat.shape[0] else 0, 0).astype(jnp.uint8)
    return data, lengths.astype(jnp.int32)


def encode_ragged(flat, offsets, tokenizer, *, max_len: int, max_tokens: int, **kwargs) -> Encoded:
    """`encode` on ragged input: string b is flat[offsets[b]:offsets[b+1]], at most max_len
    bytes. Other keyword arguments as for `encode`."""
    if np.dtype(flat.dtype) != np.uint8 or np.ndim(flat) != 1:
        raise TypeError(f"encode_ragged: flat must be uint8[N], got {flat.dtype}{list(np.shape(flat))}")
    if np.dtype(offsets.dtype) != np.int32 or np.ndim(offsets) != 1 or np.shape(offsets)[0] < 1:
        raise TypeError(
            f"encode_ragged: offsets must be int32[B + 1], got {offsets.dtype}{list(np.shape(offsets))}"
        )
    flat = flat if isinstance(flat, jax.Array) else jnp.asarray(flat)
    offsets = offsets if isinstance(offsets, jax.Array) else jnp.asarray(offsets)
    data, lengths = unflatten(flat, offsets, max_len)
    return encode(data, lengths, tokenizer, max_tokens=max_tokens, **kwargs)


def gather_rows(flat, starts, lengths, width: int):
    """uint8[rows, width] on the device, jittable: row r is flat[starts[r]:][:lengths[r]], then
    zeros. Each row is one slice of `width` bytes (several times faster than a gather per
    byte on the CPU backend), so flat must hold starts[r] + width bytes for every row (pad it):
    a slice past its end would be moved back, not cut."""
    rows = jax.vmap(lambda s: jax.lax.dynamic_slice(flat, (s,), (width,)))(starts)
    inside = jnp.arange(width, dtype=jnp.int32)[None, :] < lengths[:, None]
    return jnp.where(inside, rows, jnp.uint8(0))
