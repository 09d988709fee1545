"""The special-token rules of ffi/core/special_tokens.h on the CPU (tests/cpp/pretok_shim.cc):
special_match_with (SpecialStarts' pair filter, and run_match_at for first bytes whose specials
are all runs of one unit, as Gemma 3's newline, tab and `\u2581` runs) finds the special and the
length that special_match_at finds, on hypothesis text rich in runs of every length; and the
leftmost-first acceptance by clusters (accept_special_cluster, walked in any order as the GPU's
threads walk them, or over matches listed in byte order) equals the plain left-to-right walk.
BLOCKBPE_FULL=1 runs more examples.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from strategies import fuzz

SPACE = "\u2581"
# Units of the run specials: bytes (a space among them, literal), and `▁`, which with `escaped`
# a space of the text also matches.
UNITS = ["\n", "\t", " ", SPACE, "~"]
# Specials that are no run, sharing first bytes with the runs (a slot with both is scanned).
NOT_RUNS = ["\n<b>", " x", SPACE + "a", "<b>", "~\n", "\t\t<", SPACE + " "]
# Text pieces: the units, near misses of `▁` (its first two bytes, another E2 character), words.
TEXT_BITS = [*UNITS, "\r", "a", "x", "<b>", "<", "\u201c", "\xe9"]
TEXT_BYTES = [b.encode() for b in TEXT_BITS] + [b"\xe2\x96", b"\xe2"]


def leftmost_first(lens) -> list[int]:
    """The walk accept_special_matches implements: from the left, a match counts unless it
    starts inside one that counted (2 at its first byte, 1 at its others)."""
    out, i = [0] * len(lens), 0
    while i < len(lens):
        if lens[i] > 0:
            out[i : i + lens[i]] = [2] + [1] * (lens[i] - 1)
            i += lens[i]
        else:
            i += 1
    return out


run_specials = st.lists(
    st.tuples(st.sampled_from(UNITS), st.integers(1, 40)).map(lambda u: u[0] * u[1]), min_size=1, max_size=40
)
run_text = st.lists(
    st.tuples(st.sampled_from(TEXT_BYTES), st.integers(1, 70)).map(lambda u: u[0] * u[1]), max_size=12
).map(b"".join)


@fuzz(400)
@given(
    runs=run_specials,
    others=st.lists(st.sampled_from(NOT_RUNS), max_size=2),
    order=st.sampled_from(["longest first", "as drawn"]),
    text=run_text,
    escaped=st.booleans(),
)
def test_runs_match_what_special_match_at_finds(shim, runs, others, order, text, escaped):
    """Runs of 1..40 units (past kMaxRun: scanned) with or without specials that are no run in
    the same slots, in the tables' order or any other (the run table takes the first special in
    the table, whatever the order), on text of runs of 1..70: the same special and length as
    special_match_at at every position, and the acceptance of those matches equals the walk."""
    blobs = list(dict.fromkeys(s.encode() for s in runs + others))
    if order == "longest first":
        blobs.sort(key=lambda b: (-len(b), b))
    m = shim.special_starts(blobs, text, escaped)
    assert m.match_with.tolist() == m.match.tolist(), (blobs, text, escaped)
    assert m.length_with.tolist() == m.length.tolist(), (blobs, text, escaped)
    assert not np.any((m.match >= 0) & ~m.may)
    want = leftmost_first(m.length.tolist())
    assert shim.special_accept(m.length_with).tolist() == want
    assert shim.special_accept(m.length_with, reverse=True).tolist() == want
    assert shim.special_accept(m.length_with, listed_parts=3).tolist() == want


def gemma_like() -> list[bytes]:
    """Gemma 3's user-defined runs (newlines and tabs 1..31, `▁` 2..31) and a few of its tags,
    longest first as the tables order them."""
    runs = ["\n" * k for k in range(1, 32)] + ["\t" * k for k in range(1, 32)]
    runs += [SPACE * k for k in range(2, 32)] + ["<b>", "</b>", "<start_of_image>"]
    return sorted((s.encode() for s in runs), key=lambda b: (-len(b), b))


def test_gemma_like_runs_are_counted_and_equal_the_scan(shim):
    """Every length 1..70 of each run, alone, between words and mixed (spaces and `▁`, CRLF):
    the run slots are taken (newline, tab, a space before a space or `▁`, a `▁`) and give
    special_match_at's special and length at every position; tags still go by the scan."""
    blobs = gemma_like()
    for unit in ["\n", "\t", " ", SPACE, " " + SPACE, SPACE + " ", "\r\n", "\n\t"]:
        for k in range(1, 71):
            for text in (unit * k, "a" + unit * k + "b", "<b>" + unit * k + "</b>"):
                data = text.encode()
                m = shim.special_starts(blobs, data, escaped=True)
                assert m.match_with.tolist() == m.match.tolist(), text
                assert m.length_with.tolist() == m.length.tolist(), text
                for i, byte in enumerate(data):
                    after = data[i + 1 : i + 2]
                    counted = (  # (the text's last byte passes the pair filter)
                        byte in b"\n\t"
                        or (byte == 0x20 and after in (b" ", b"\xe2", b""))
                        or (byte == 0xE2 and after in (b"\x96", b""))
                    )
                    assert m.by_run[i] == counted, (text, i)
                assert shim.special_accept(m.length_with).tolist() == leftmost_first(m.length.tolist())


@fuzz(400)
@given(data=st.data(), n=st.integers(0, 300))
def test_cluster_acceptance_equals_the_walk(shim, data, n):
    """Any matches (every position a match of 1..40 bytes or none, as long as it fits; runs of
    nested matches, chains of overlaps): the clusters walked first to last and last to first,
    and the matches listed in byte order and resolved a few at a time, accept what the
    left-to-right walk accepts."""
    density = data.draw(st.sampled_from([0.05, 0.3, 0.9, 1.0]))
    lens = [
        data.draw(st.integers(1, min(40, n - i))) if data.draw(st.floats(0, 1)) < density else 0
        for i in range(n)
    ]
    want = leftmost_first(lens)
    assert shim.special_accept(lens).tolist() == want, lens
    assert shim.special_accept(lens, reverse=True).tolist() == want, lens
    part = data.draw(st.integers(1, max(1, n)))
    assert shim.special_accept(lens, listed_parts=part).tolist() == want, (lens, part)


def test_a_special_twice_leaves_its_slot_to_the_scan(shim):
    """The tables hold each special once; were one there twice (any order), its slot would not
    be counted (two specials for one count of units) and the scan picks the first, as
    special_match_at does."""
    for blobs in ([b"\n\n", b"\n", b"\t", b"\n"], [b"\n", b"\n\n", b"\n", b"\n\n\n"], [b"~~", b"~", b"~~"]):
        text = b"a\n\n\n~~~\n\tb"
        m = shim.special_starts(blobs, text, escaped=False)
        assert m.match_with.tolist() == m.match.tolist() and m.length_with.tolist() == m.length.tolist(), (
            blobs
        )
        assert not m.by_run[text.index(blobs[0][:1])], blobs
