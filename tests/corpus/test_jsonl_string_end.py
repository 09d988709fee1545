"""A long JSONL line's field string ended where json.loads ends it: at the first quote no
backslash escapes, found by 64-byte slices scanned apart whose escape states are then carried
from one to the next (ffi/core/json_rules.h, string_end and slice_end), and the line walked on
after it, a later occurrence of the field winning (core/json_lines.h, long_field_span).

Two readers find strings so: the device split on lines over its thread threshold (a GPU
warp's rounds of 32 slices for lines of up to 4 KiB, a block's rounds of 512 slices for longer
ones, cuda/jsonl_split.cuh, group_string_end; its CPU executor runs the same rounds a slice
after the other, string_end_by_rounds) and the host reader's threads on lines over 1 MiB
(core/json_line.h, skip_string). The strings hold runs of backslashes of every length up to
two slices and more (escaped quotes, escapes and plain bytes after them, the closing quote
after a run) at every offset from the slices' and the rounds' boundaries; each block is
checked against json.loads and the host reader's one-thread parse."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from test_jsonl import check_same
from test_jsonl_device import DEVICES, FIELD, check_block

SLICE = 64  # bytes a slice (ffi/core/json_rules.h, kSliceBytes)
THREAD_LINE = 1 << 10  # longer lines are the device split's warps' (core/json_lines.h, kThreadLine)
WARP_LINE = 4 << 10  # longer lines are its blocks' (kWarpLine)
# (the shortest line of a group, and the group's round of slices: cuda/jsonl_split.cuh)
GROUPS = {"warp": (THREAD_LINE, 32 * SLICE), "block": (WARP_LINE, 512 * SLICE)}
HOST_LONG_LINE = 1 << 20  # longer lines' fields are the host reader's threads' (core/jsonl.h, kLongLine)

# What follows a run of k backslashes in the text: its JSON spelling has 2k backslashes before a
# plain byte, 2k + 1 before an escape (\" \n \/ \u00e9 \ud83d\ude00 with ensure_ascii) or the
# run's end at the string's end (2k before the closing quote).
AFTER_RUN = ["", "a", '"', "\n", "/", "\u00e9", "\x01", "\U0001f600", "\\\\"]


@st.composite
def backslash_text(draw, min_bytes: int, round_bytes: int) -> str:
    """Text of at least min_bytes whose runs of backslashes fall at every offset from the
    slices' and rounds' boundaries: a filler of min_bytes and up to a round more, or up to two
    slices around the first round's end past min_bytes (the string's slices start at most 15
    bytes before it: the line's members before it are short), then pieces of a filler of up to
    two slices, a run of up to 70 backslashes (141 in JSON: more than two slices of them) and
    what follows it."""
    round_end = -(-min_bytes // round_bytes) * round_bytes
    filler = draw(
        st.one_of(
            st.integers(min_bytes, min_bytes + round_bytes),
            st.integers(round_end - 2 * SLICE, round_end + SLICE),
        )
    )
    parts = ["x" * filler]
    for _ in range(draw(st.integers(1, 6))):
        parts.append("y" * draw(st.integers(0, 2 * SLICE)))
        parts.append("\\" * draw(st.integers(0, 70)))
        parts.append(draw(st.sampled_from(AFTER_RUN)))
    return "".join(parts)


@st.composite
def long_line(draw, min_bytes: int, round_bytes: int) -> tuple[bytes, bool]:
    """One long line whose field is such a text, members after it at times (a string with its
    own runs, the field again as a string, short or long, or as a number), and at times cut
    short; and whether json.loads takes it."""
    ensure_ascii = draw(st.booleans())

    def spell(text: str) -> str:
        return json.dumps(text, ensure_ascii=ensure_ascii)

    members = [
        f'"id": {draw(st.integers(0, 9))}',
        f'"{FIELD}": ' + spell(draw(backslash_text(min_bytes, round_bytes))),
    ]
    after = draw(st.sampled_from(["none", "member", "again", "again_long", "again_number"]))
    if after == "member":
        members.append('"t": ' + spell(draw(backslash_text(0, round_bytes))))
    elif after == "again":
        members.append(f'"{FIELD}": ' + spell(draw(backslash_text(0, round_bytes))))
    elif after == "again_long":
        members.append(f'"{FIELD}": ' + spell(draw(backslash_text(min_bytes, round_bytes))))
    elif after == "again_number":
        members.append(f'"{FIELD}": 5')
    line = "{" + ", ".join(members) + draw(st.sampled_from(["}", " } ", ', "n": [1, {"x": null}]}']))
    data = line.encode("utf-8")
    good = after != "again_number"
    if draw(st.integers(0, 4)) == 0:  # cut short: no closing quote, or no closing brace
        data = data[: draw(st.integers(min_bytes + 1, len(data) - 1))]
        good = False
    return data, good


@st.composite
def long_lines_block(draw, min_bytes: int, round_bytes: int) -> tuple[bytes, bool]:
    line, good = draw(long_line(min_bytes, round_bytes))
    lines = draw(st.permutations([line, b'{"text": "short\\\\"}', b""]))
    return b"\n".join(lines), good


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("group", list(GROUPS))
def test_device_split_ends_long_strings_as_json_loads(kind, group):
    @settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(long_lines_block(*GROUPS[group]))
    def run(case):
        block, good = case
        check_block(block, FIELD, kind, must_accept=good)

    run()


def test_host_reader_ends_long_strings_as_json_loads():
    @settings(
        max_examples=20,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(long_lines_block(HOST_LONG_LINE, 32 * SLICE))
    def run(case):
        block, good = case
        check_same(block, FIELD, must_accept=good, threads=2)

    run()


def _escape_after(run: int) -> bytes:
    """What follows a run of `run` backslashes in a JSON string: a plain byte after an even run,
    an escape's letter after an odd one (its last backslash escapes it)."""
    return [b"a", b'"', b"a", b"n", b"a", b"u00e9", b"a", b"ud83d\\ude00"][run % 8]


def _runs_everywhere() -> bytes:
    """One line of ~1.5 MB whose field holds a run of every length up to 140 backslashes ending
    at every offset from the 64-byte slices (of the block: the field's bytes start at its byte
    10), each followed by its letter, plain bytes to the slice's end and an escaped quote at the
    next slice's start (which a scan that carried a run's escape into that slice would take for
    the string's end), then a member after the field."""
    body = bytearray(b"x" * WARP_LINE)
    for run in range(141):
        for end in range(SLICE):
            body += b"y" * ((end - (10 + len(body) + run - 1)) % SLICE)
            body += b"\\" * run + _escape_after(run)
            body += b"y" * (-(10 + len(body)) % SLICE) + b'\\"'
    return b'{"text": "' + bytes(body) + b'", "t": "\\\\"}'


def _closing_runs(min_bytes: int) -> bytes:
    """Long lines of over min_bytes whose field ends in an even run of backslashes (of up to
    130) before its closing quote, the quote at every offset from the 64-byte slices."""
    lines, at = [], 0
    for run in (0, 2, 4, 6, 62, 64, 66, 126, 128, 130):
        for offset in range(SLICE):
            body = b"x" * (min_bytes + (offset - (at + 10 + min_bytes + run)) % SLICE) + b"\\" * run
            lines.append(b'{"text": "' + body + b'"}')
            assert (at + 10 + len(body)) % SLICE == offset
            at += len(lines[-1]) + 1
    return b"\n".join(lines)


@pytest.mark.parametrize("kind", DEVICES)
def test_every_run_at_every_slice_offset(kind):
    """Every run length at every slice offset, in the middle of a string and before its closing
    quote: the device split and the host reader's threads (the long line is over 1 MiB) take the
    documents json.loads gives. (The blocks' buffers are 16-byte aligned, so the offsets from
    the block's start are the offsets from the slices.)"""
    runs = _runs_everywhere()
    assert len(runs) > HOST_LONG_LINE
    check_block(runs, FIELD, kind, must_accept=True)
    check_block(_closing_runs(THREAD_LINE), FIELD, kind, must_accept=True)  # (a warp's lines)
    check_block(_closing_runs(WARP_LINE), FIELD, kind, must_accept=True)  # (a block's)
    if kind == "cpu":
        check_same(runs, FIELD, must_accept=True, threads=2)
