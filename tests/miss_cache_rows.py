"""Rows of the GPU's misses' cache (ffi/cuda/miss_cache.cuh) built in Python, for the tests that
plant a row or read what a kernel kept: where a key hashes (miss_key_hash), its check word
(miss_check) and the row's layout (key bytes 0..15, state, check, tokens 0..8; a key of 17..32
bytes also has its bytes 16..31 and tokens 9..20 in the row's second half)."""

from __future__ import annotations

import numpy as np

from blockbpe_jax.tables import build
from blockbpe_jax.tables.sets import MISS_CACHE_ROW_INTS

M64 = (1 << 64) - 1
READY_TAG = 2  # a ready row's state: length << 16 | count << 8 | 2
STATE, FIRST_TOKEN, KEY_TAIL, MORE_TOKENS = 4, 7, 16, 20
SHORT_TOKENS, LONG_TOKENS = 9, 21
_TAIL_MUL = (0xD6E8FEB86659FD93, 0xA0761D6478BD642F)


def key_words(piece: bytes) -> tuple[int, int, int, int]:
    """The key's bytes 0..7, 8..15, 16..23, 24..31 as little-endian words (zero past its end)."""
    assert 0 < len(piece) <= 32
    padded = piece.ljust(32, b"\0")
    return tuple(int.from_bytes(padded[i : i + 8], "little") for i in range(0, 32, 8))


def home_row(piece: bytes, rows: int) -> int:
    """The row the kernels try first for the piece, in a cache of `rows` rows."""
    head_lo, head_hi, tail_lo, tail_hi = key_words(piece)
    if len(piece) > 16:
        head_lo ^= tail_lo * _TAIL_MUL[0] & M64
        head_hi ^= tail_hi * _TAIL_MUL[1] & M64
    h = build._short_key_hash(
        np.array([head_lo], np.uint64), np.array([head_hi], np.uint64), np.array([len(piece)])
    )
    return int(h[0]) & (rows - 1)


def state(piece: bytes, count: int) -> int:
    return len(piece) << 16 | count << 8 | READY_TAG


def check_word(piece: bytes, row_state: int, tokens: list[int]) -> int:
    head_lo, head_hi, tail_lo, tail_hi = key_words(piece)
    h = (head_lo * 0x9E3779B97F4A7C15 & M64) ^ (head_hi * 0xC2B2AE3D27D4EB4F & M64) ^ (row_state & 0xFFFFFFFF)
    h ^= (tail_lo * _TAIL_MUL[0] & M64) ^ (tail_hi * _TAIL_MUL[1] & M64)
    for t in tokens:
        h = ((h ^ (t & 0xFFFFFFFF)) * 0x100000001B3) & M64
        h ^= h >> 29
    return h ^ (h >> 32) ^ 0x5851F42D4C957F2D


def planted_row(piece: bytes, tokens: list[int], check_delta: int = 0) -> np.ndarray:
    """The row a kernel writes for `piece` merged into `tokens` (check_delta: a wrong check)."""
    assert len(tokens) <= (LONG_TOKENS if len(piece) > 16 else SHORT_TOKENS)
    s = state(piece, len(tokens))
    check = (check_word(piece, s, tokens) + check_delta) & M64
    head_lo, head_hi, tail_lo, tail_hi = key_words(piece)
    words = np.zeros(MISS_CACHE_ROW_INTS, np.uint64)
    words[:FIRST_TOKEN] = [head_lo & 0xFFFFFFFF, head_lo >> 32, head_hi & 0xFFFFFFFF, head_hi >> 32, s,
                           check & 0xFFFFFFFF, check >> 32]  # fmt: skip
    words[FIRST_TOKEN : FIRST_TOKEN + min(len(tokens), SHORT_TOKENS)] = tokens[:SHORT_TOKENS]
    if len(piece) > 16:
        words[KEY_TAIL:MORE_TOKENS] = [
            tail_lo & 0xFFFFFFFF,
            tail_lo >> 32,
            tail_hi & 0xFFFFFFFF,
            tail_hi >> 32,
        ]
        words[MORE_TOKENS : MORE_TOKENS + len(tokens) - SHORT_TOKENS] = tokens[SHORT_TOKENS:]
    return words.astype(np.uint32).view(np.int32)
