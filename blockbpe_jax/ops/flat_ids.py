"""The ids of a padded [B, T] result back to back: on the device (`flat_ids`), so that only
the rows' ids cross to the host, not their padding, and on the host (`flat_rows`):
`Encoded.flat_numpy`'s two ways."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np


def flat_rows(ids: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Row b's first clip(counts[b], 0, T) ids of host ids [B, T], back to back."""
    kept = np.clip(counts, 0, ids.shape[1])
    return ids[np.arange(ids.shape[1])[None, :] < kept[:, None]]


@functools.partial(jax.jit, static_argnames="size")
def flat_ids(ids, counts, *, size: int):
    """int32[size] on the device, jittable: row b's first kept[b] = clip(counts[b], 0, T) ids
    back to back (row b from sum(kept[:b])), positions past sum(kept) unspecified (a gather per
    position: its row by a binary search of the rows' ends)."""
    rows, width = ids.shape
    kept = jnp.clip(counts, 0, width).astype(jnp.int32)
    ends = jnp.cumsum(kept)
    at = jnp.arange(size, dtype=jnp.int32)
    row = jnp.minimum(jnp.searchsorted(ends, at, side="right"), max(rows - 1, 0)).astype(jnp.int32)
    col = jnp.clip(at - (ends[row] - kept[row]), 0, max(width - 1, 0))
    return ids[row, col]
