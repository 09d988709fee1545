"""The Lowercase operand of the CPU module's batch call (ffi/cpu/nfc_batch.cc: lowercase_batch,
the executors' in-place rule of ffi/pretok/lowercase.h), from normalizer.lower_tables(), and the
call that lowercases a batch of rows with it on the CPU.

Layout, uint8: the Lowercase part of the pre-tokenizer operand (tables.pack) alone:
int32[LOWER_DELTAS] deltas, then the delta-index table as a class table (tables.class_tables).
"""

from __future__ import annotations

import functools

import numpy as np

from . import normalizer as norm
from .tables import class_tables


@functools.lru_cache(maxsize=1)
def operand() -> np.ndarray:
    """The operand, uint8 (read-only)."""
    index, deltas, _ = norm.lower_tables()
    out = class_tables([deltas.astype("<i4").view(np.uint8)], [index])
    out.setflags(write=False)
    return out


def lowercase_batch(data, offsets) -> tuple[np.ndarray, np.ndarray]:
    """Lowercase of each row data[offsets[i]:offsets[i + 1]] on the CPU, in place as the
    executors rewrite it (the CPU module's lowercase_batch).

    Args:
        data: the rows' bytes, uint8 (or bytes).
        offsets: int64[rows + 1], non-decreasing, from 0 to len(data).

    Returns:
        (bytes uint8 of len(data), flagged bool[rows]): the rows lowercased at the same
        offsets, invalid UTF-8 kept as it is; a flagged row (one with a code point whose
        lowercase the executors do not write in place: normalizer.lower_tables' LOWER_FLAG)
        is left as it came, for normalizer.lowercase.
    """
    from .. import native

    data = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    data = np.ascontiguousarray(data, np.uint8)
    offsets = np.ascontiguousarray(offsets, np.int64)
    if offsets.ndim != 1 or len(offsets) < 1:
        raise ValueError("offsets must be int64[rows + 1] from 0 to len(data)")
    return native.cpu.lowercase_batch(data, offsets, operand())
