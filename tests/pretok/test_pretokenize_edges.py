"""The pre-tokenizer (ffi/pretok/) on invalid UTF-8, in bytes mode, on empty and one-byte
texts and refused operands, and core/bpe_core.h's branch-free leftmost-first merge rule
(tests/pretok_shim.py has the shim and the oracles). BLOCKBPE_FULL=1 runs more examples.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbpe_jax import pretok

from helpers import FULL
from pretok_shim import CHUNKS, PATTERN_IDS, describe, gen_text, special_mask, splitter


# ---------------------------------------------------------------------------------------------
# Invalid UTF-8: every byte not covered by a valid sequence is one code point that behaves like
# a symbol. Oracle: the same bytes with each such byte replaced by a private-use character.


def decode_with_pua(data: bytes):
    """(text, byte length of each char): invalid bytes -> U+E000 + byte (class Co: a symbol)."""
    chars, lens = [], []
    i = 0
    while i < len(data):
        try:
            s = data[i:].decode("utf-8")
            chars.extend(s)
            lens.extend(len(c.encode()) for c in s)
            break
        except UnicodeDecodeError as e:
            good = data[i : i + e.start].decode("utf-8")
            chars.extend(good)
            lens.extend(len(c.encode()) for c in good)
            for b in data[i + e.start : i + e.end]:
                chars.append(chr(0xE000 + b))
                lens.append(1)
            i += e.end
    return "".join(chars), lens


def random_bytes(rng: random.Random, n: int) -> bytes:
    k = rng.random()
    if k < 0.3:
        return bytes(rng.randrange(256) for _ in range(n))
    if k < 0.6:  # bytes that look like UTF-8 pieces
        pool = [
            b"a",
            b" ",
            b"\n",
            b"'",
            b"s",
            b"1",
            b"\x80",
            b"\xbf",
            b"\xc2",
            b"\xc3\xa9",
            b"\xe4\xb8",
            b"\xe4\xb8\xad",
            b"\xed\xa0\x80",
            b"\xf0\x9f\x98",
            b"\xf0\x9f\x98\x80",
            b"\xf4\x90\x80\x80",
            b"\xc0\xaf",
            b"\xe0\x80\xaf",
            b"\xff",
            b"\xcc\x81",
            b"\xf8",
        ]
        return b"".join(rng.choice(pool) for _ in range(n))
    text = gen_text(rng).encode("utf-8")  # valid text with a few bytes flipped
    b = bytearray(text)
    for _ in range(rng.randint(1, 3)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_invalid_utf8(shim, pattern):
    rng = random.Random(100 + pattern)
    for _ in range(3000 if FULL else 300):
        data = random_bytes(rng, rng.randint(1, 48))
        seq = shim.flags(pattern, data)
        for chunk in CHUNKS:
            assert np.array_equal(shim.flags(pattern, data, None, chunk), seq), (data, chunk)
        text, lens = decode_with_pua(data)
        off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        want = np.zeros(len(data), np.uint8)
        for _, (s, e) in splitter(pattern).pre_tokenize_str(text):
            want[off[s]] = 1
        assert np.array_equal(seq, want), describe(pattern, data, seq, want, "invalid utf-8")


def test_invalid_utf8_policy_examples(shim):
    # "\xe4\xb8" (truncated) + "a": two symbol code points then a letter -> pieces "\xe4\xb8", "a"
    assert shim.flags(1, b"\xe4\xb8a").tolist() == [1, 0, 1]
    # a lone continuation byte after a space is a symbol led by the space
    assert shim.flags(1, b"x \x80").tolist() == [1, 1, 0]
    # surrogate encodings are invalid: three symbols
    assert shim.flags(1, b"\xed\xa0\x80").tolist() == [1, 0, 0]
    # a valid 4-byte sequence: one code point
    assert shim.flags(1, "a\U0001f600".encode()).tolist() == [1, 1, 0, 0, 0]


# ---------------------------------------------------------------------------------------------
# Specials, bytes mode, edge cases


def test_bytes_mode_and_edges(shim):
    """Bytes mode has no stages (piece_start stays zero); empty and one-byte texts; an operand
    whose size does not fit the layout is refused."""
    data = "ab c<|endoftext|>d\u4e2d".encode()
    assert shim.flags(pretok.BYTES_MODE, data, special_mask(data)).tolist() == [0] * len(data)
    for p in PATTERN_IDS:
        assert shim.flags(p, b"").tolist() == []
        assert shim.flags(p, b"x").tolist() == [1]
        for chunk in CHUNKS:
            assert shim.flags(p, b"x", None, chunk).tolist() == [1]
    op = shim.pretokenizer(1).operand()
    buf = np.zeros(4, np.uint8)
    for size, stages in [(op.size - 1, 1), (op.size, 2), (op.size, 5), (op.size, -1), (16, 1)]:
        assert (
            shim.lib.bbpe_pretokenize(
                op.ctypes.data, size, stages, buf.ctypes.data, 4, None, 0, shim.lookback, 1, buf.ctypes.data
            )
            == -1
        ), (size, stages)


def _leftmost_first_sweep(candidates: int, bits: int = 32) -> int:
    """merge_segment's rule, one pair after another: a candidate pair merges unless the pair
    before it merged (its left token is then gone)."""
    merges, prev = 0, False
    for i in range(bits):
        prev = bool(candidates >> i & 1) and not prev
        merges |= prev << i
    return merges


def test_leftmost_first_merges_bits_equal_the_sweep(shim):
    """The branch-free bit form (ffi/core/bpe_core.h, used by the CUDA kernel's lane-parallel merges,
    which the CPU never runs) selects exactly the pairs of the sequential sweep: every mask of
    the low 16 bits, every single run of set bits, and random 32-bit masks."""
    rng = np.random.default_rng(0)
    masks = list(range(1 << 16))
    masks += [((1 << (e - s)) - 1) << s for s in range(32) for e in range(s, 33)]
    masks += [int(a & b | c) for a, b, c in rng.integers(0, 1 << 32, size=(20_000, 3), dtype=np.uint64)]
    for m in masks:
        m &= 0xFFFFFFFF
        assert shim.lib.bbpe_leftmost_first_merges(m) == _leftmost_first_sweep(m), hex(m)


def test_leftmost_first_merges_64_bits_equal_the_sweep(shim):
    """The same on 64 bits (a warp's piece of up to 64 tokens, merge_in_warp): every single
    run of set bits, runs across bit 32, and random masks."""
    rng = np.random.default_rng(1)
    masks = [((1 << (e - s)) - 1) << s for s in range(64) for e in range(s, 65)]
    masks += [
        (a << 32 | b) & (c << 32 | d) for a, b, c, d in rng.integers(0, 1 << 32, size=(20_000, 4)).tolist()
    ]
    masks += [m | (1 << 31 | 1 << 32) for m in masks[-2000:]]
    for m in masks:
        assert shim.lib.bbpe_leftmost_first_merges64(m) == _leftmost_first_sweep(m, 64), hex(m)


_SPECIAL_CHARS = [" ", "\u2581", "a", "<", "\n", "\xe9", "\u4e2d"]


@settings(max_examples=400, deadline=None)
@given(
    specials=st.lists(
        st.text(st.sampled_from(_SPECIAL_CHARS), min_size=1, max_size=4), min_size=1, max_size=24
    ),
    text=st.text(st.sampled_from(_SPECIAL_CHARS), max_size=40),
    escaped=st.booleans(),
)
def test_special_starts_rejects_only_positions_that_match_no_special(shim, specials, text, escaped):
    """SpecialStarts (ffi/core/bpe_core.h: the pair of bytes a position starts must begin some
    special, literally or with a special's `\u2581` as a space) is exact: every position where
    special_match_at finds a special passes it, and special_match_with (the table's first bytes
    and the filter in front) finds what special_match_at finds. Specials and text from spaces, `\u2581`, and
    one-, two- and three-byte characters; more than 15 distinct first bytes also covered."""
    blobs = sorted({s.encode() for s in specials}, key=len, reverse=True)
    m = shim.special_starts(blobs, text.encode(), escaped)
    assert not np.any((m.match >= 0) & ~m.may), (blobs, text, escaped)
    assert m.match_with.tolist() == m.match.tolist(), (blobs, text, escaped)
    assert m.length_with.tolist() == m.length.tolist(), (blobs, text, escaped)


def test_special_starts_rejects_what_no_special_begins(shim):
    """The filter does reject: a space before a letter starts none of Gemma-style runs of
    `\u2581` (escaped, a space matches `\u2581`; the run needs a second one), nor does `<` before
    a space start `<b>`; a space before a space, and `<b`, do. Past 15 first bytes (slots go
    in byte order), every position whose byte starts a special passes."""
    runs = ["\u2581" * k for k in (3, 2)] + ["<b>"]
    m = shim.special_starts([s.encode() for s in runs], b"a b  c< <b>", escaped=True)
    match, may = m.match, m.may
    assert may.tolist() == [False, False, False, True, False, False, False, False, True, False, False]
    assert match[3] == 1 and match[8] == 2 and (match >= 0).sum() == 2
    many = [bytes([c, c]) for c in b"ABCDEFGHIJKLMNOPQRSTUVWXYZ"]  # 26 first bytes > 15 slots
    m = shim.special_starts(many, b"AAZBZ", escaped=False)
    match, may = m.match, m.may
    assert may.tolist() == [True, False, True, False, True] and match.tolist() == [0, -1, -1, -1, -1]
