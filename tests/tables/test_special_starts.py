"""The table of where specials can start (`SpecialStarts`, ffi/core/special_tokens.h), built once per
set of specials at load and read by every executor: the specials it lets the executors accept are
those a plain scan accepts. Checked through the CPU module's `special_starts` and `special_spans`
(the same builder and matcher) against the rule written here in Python: at each position the first
special in table order that matches (with `escaped`, a `▁` of a special also matches a space),
accepted leftmost-first. The specials are drawn to hit what the table special-cases: runs of one
unit (up to and past its 32), `▁` runs with `escaped`, more first bytes than its 15 slots, specials
that are prefixes of one another.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbpe_jax import native

from strategies import fuzz

LOW = "\u2581".encode()  # `▁`
UNITS = [b"a", b"b", b" ", b"\n", b"<", LOW, b"\xe2"]


def special_len(special: bytes, text: bytes, i: int, escaped: bool) -> int:
    """Bytes of text[i:] that `special` matches, or -1."""
    q, j = 0, i
    while q < len(special):
        if j >= len(text):
            return -1
        if escaped and text[j] == 0x20 and special[q : q + 3] == LOW:
            q, j = q + 3, j + 1
        elif special[q] == text[j]:
            q, j = q + 1, j + 1
        else:
            return -1
    return j - i


def accepted(specials: list[bytes], text: bytes, escaped: bool) -> list[tuple[int, int, int]]:
    """(start, end, index) of the specials accepted in `text`, leftmost-first."""
    out, i = [], 0
    while i < len(text):
        for k, special in enumerate(specials):
            n = special_len(special, text, i, escaped)
            if n > 0:
                out.append((i, i + n, k))
                i += n
                break
        else:
            i += 1
    return out


def tables(specials: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """special_offsets, special_data in the given order (build_special_tables' layout)."""
    offsets = np.zeros(len(specials) + 1, dtype=np.int32)
    offsets[1:] = np.cumsum([len(s) for s in specials])
    data = np.frombuffer(b"".join(specials) or b"\0", dtype=np.uint8)
    return offsets, data


def spans(specials: list[bytes], texts: list[bytes], escaped: bool) -> list[list[tuple[int, int, int]]]:
    offsets, data = tables(specials)
    text_offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    text_offsets[1:] = np.cumsum([len(t) for t in texts])
    starts = native.cpu.special_starts(offsets, data, escaped)
    rows = native.cpu.special_spans(
        offsets, data, starts, escaped, np.frombuffer(b"".join(texts), dtype=np.uint8), text_offsets
    )
    out: list[list[tuple[int, int, int]]] = [[] for _ in texts]
    for row, start, end, index in rows.tolist():
        out[row].append((start, end, index))
    return out


unit_strings = st.lists(st.sampled_from(UNITS), min_size=1, max_size=6).map(b"".join)
runs = st.builds(
    lambda unit, count: unit * count, st.sampled_from([b"\n", b" ", LOW, b"a"]), st.integers(1, 36)
)
# (letters as first bytes: more first bytes than the table's slots)
lettered = st.builds(lambda c, rest: bytes([c]) + rest, st.integers(ord("c"), ord("z")), unit_strings)
special_sets = st.lists(st.one_of(unit_strings, runs, lettered), min_size=1, max_size=40, unique=True).map(
    lambda s: sorted(s, key=lambda b: (-len(b), b))  # (longest first, as build_special_tables sorts them)
)
texts = st.lists(
    st.lists(st.one_of(st.sampled_from(UNITS), runs, lettered), max_size=30).map(b"".join),
    min_size=1,
    max_size=4,
)


@fuzz(300)
@given(specials=special_sets, texts=texts, escaped=st.booleans())
def test_accepted_as_a_plain_scan_accepts(specials, texts, escaped):
    assert spans(specials, texts, escaped) == [accepted(specials, t, escaped) for t in texts]


@pytest.mark.parametrize("escaped", [False, True])
@pytest.mark.parametrize("longest", [31, 32, 33, 40])
def test_runs_around_the_tables_limit(escaped, longest):
    """Runs of 1..longest units (the table counts runs of up to 32; a longer one leaves the
    first byte to the plain scan), every run length up to 80 in the texts."""
    for unit in (b"\n", b" ", LOW):
        specials = sorted({unit * k for k in range(1, longest + 1)}, key=lambda b: (-len(b), b))
        texts = [b"x" + unit * k + b"y" for k in range(0, 80)]
        assert spans(specials, texts, escaped) == [accepted(specials, t, escaped) for t in texts]


def test_a_wrong_rule_is_caught():
    """The reference is not the table's echo: a space matched for `▁` only with `escaped`."""
    specials, texts = [LOW * 2], [b"a  b"]
    assert spans(specials, texts, True) == [[(1, 3, 0)]] == [accepted(specials, texts[0], True)]
    assert spans(specials, texts, False) == [[]] == [accepted(specials, texts[0], False)]


def test_the_operand():
    """special_starts: one fixed size whatever the specials, and equal for equal specials."""
    small = native.cpu.special_starts(*tables([b"<a>"]), False)
    large = native.cpu.special_starts(*tables([bytes([c]) + b"x" for c in range(40, 120)]), True)
    assert small.dtype == np.uint8 and small.shape == large.shape
    assert np.array_equal(small, native.cpu.special_starts(*tables([b"<a>"]), False))
    assert not np.array_equal(small, large)
    with pytest.raises(ValueError, match="special_offsets must be non-decreasing"):
        native.cpu.special_starts(np.array([0, 5], np.int32), np.zeros(3, np.uint8), False)
    text, offsets = np.frombuffer(b"<a>", np.uint8), np.array([0, 3], np.int64)
    with pytest.raises(ValueError, match="special_starts must hold"):
        native.cpu.special_spans(*tables([b"<a>"]), small[:-4], False, text, offsets)
