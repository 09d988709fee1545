"""A long line's field cut into pieces that a GPU group's threads check and decode apart
(ffi/core/json_lines.h, PieceCut; cuda/jsonl_split.cuh, measure_long and write_long): a line
over 1 KiB is a warp's (32 pieces), over 4 KiB a block's (512 pieces); the pieces' slices sit at
fixed offsets from the field's first 16-byte boundary, each piece's escape state comes from a
scan of the slices' escape maps, and a piece starts at the first token start from its offset's
seventh byte (json_token_start: not a UTF-8 continuation byte, an escaped byte, a \\u escape's
hex digit, nor a surrogate pair's second escape). The CPU executor cuts the same pieces one
after the other, so these tests check the cut on CI and the group's scans on a GPU.

The fields repeat dense spellings (\\uXXXX escapes, surrogate pairs, runs of backslashes before
escaped quotes, raw multi-byte UTF-8) after prefixes of every length up to the spelling's, in
lines of each class and of lengths whose offsets lie 64 and 128 bytes apart, so every offset
falls at every position of a spelling; the defective ones put one defect (a lone surrogate, a
bad hex digit, a bad escape, a raw control byte, bad UTF-8, a run of continuation bytes) at
every position around an offset. Each block's documents equal the host reader's and
json.loads'; where the split gives up, the host reader gives up too, and the error the corpus
job raises is the one it raises without the device split."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbpe_jax.corpus import documents
from blockbpe_jax.corpus.inputs import device_lines
from test_jsonl_device import DEVICES, FIELD, _outcome, _pairs, check_block, device_of

SLICE = 64  # bytes a slice (ffi/core/json_rules.h, kSliceBytes)
THREAD_LINE = 1 << 10  # longer lines are a warp's (core/json_lines.h, kThreadLine)
WARP_LINE = 4 << 10  # longer lines are a block's (kWarpLine)
PREFIX = len('{"text": "')  # where the field's bytes start in its line

# Dense spellings of a field, as JSON writes them (the bytes between the quotes).
SPELLINGS = {
    "pair": "\\ud83d\\ude00",
    "u_escape": "\\u00e9",
    "pairs_and_escapes": "\\ud83d\\ude00\\u00e9\\n\\ud800\\udc00x",
    "backslashes": "\\\\",
    "backslashes_quote": '\\\\\\\\\\\\\\"',
    "odd_mix": '\\\\\\u005c\\"\\/\\b',
    "utf8": "\u00e9\u4e2d\U0001f600",
    "utf8_and_escapes": "\U0001f600\\u4e2d\u00e9\\\\\\ud83d\\ude00\\t",
}

# Line lengths of each class: a warp's with offsets 64 and 128 bytes apart, a block's likewise.
LENGTHS = {"warp64": 1500, "warp128": 3000, "block64": 20000, "block128": 40000}


def _line(prefix: str, spelling: str, length: int) -> bytes:
    body = prefix + spelling * ((length - len(prefix)) // len(spelling.encode()) + 1)
    return b'{"text": "' + body.encode() + b'"}'


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("length", list(LENGTHS.values()), ids=list(LENGTHS))
@pytest.mark.parametrize("name", list(SPELLINGS))
def test_dense_fields_at_every_phase(kind, name, length):
    """A line for each prefix from none to the spelling's length, one block: the pieces'
    offsets fall at every byte of the spelling (the lines start at every offset from 16 too)."""
    spelling = SPELLINGS[name]
    lines = [_line("p" * n, spelling, length) for n in range(len(spelling.encode()) + 1)]
    assert all(len(line) > THREAD_LINE for line in lines)
    got = check_block(b"\n".join(lines), FIELD, kind, must_accept=True)
    assert got[0][0] == json.loads(lines[0])[FIELD].encode()


# One defect each: what json.loads or the device's rules refuse in a field.
DEFECTS = {
    "lone_high": b"\\ud83dx",
    "lone_low": b"\\ude00",
    "high_then_escape": b"\\ud83d\\u0041",
    "bad_hex": b"\\u00g9",
    "bad_escape": b"\\x",
    "control": b"\x01",
    "bad_utf8": b"\xc3(",
    "truncated_utf8": b"\xe4\xb8",
    "continuations": b"\x80\x80\x80\x80\x80",
}


def _defective_lines(spelling: str, length: int, defect: bytes) -> list[bytes]:
    """Lines whose field holds `defect` at each position from 14 bytes before a piece offset to
    20 after it (the offset nearest the field's middle, for a line alone at its block's start:
    the blocks' buffers are 16-byte aligned), in a field of `spelling`."""
    clean = _line("", spelling, length)
    stride = SLICE if length <= (32 if length <= WARP_LINE else 512) * SLICE else 2 * SLICE
    offset = (len(clean) // 2) // stride * stride
    out = []
    for at in range(offset - 14, offset + 21):
        field_at = at - PREFIX
        body = clean[PREFIX:-2]
        out.append(clean[:PREFIX] + body[:field_at] + defect + body[field_at:] + b'"}')
    return out


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("cls", ["warp", "block"])
@pytest.mark.parametrize("defect", list(DEFECTS))
def test_defects_around_piece_offsets_give_up_as_the_host(kind, cls, defect, tmp_path):
    """Each defective line alone in its block (or after a short one): the split gives up where
    json.loads refuses the line or its field is no UTF-8 (a defect inside an escape may spell
    another escape), as the host reader does, and block_documents raises the corpus job's error
    for it, word for word."""
    path = tmp_path / "bad.jsonl"
    length = 1500 if cls == "warp" else 20000
    for spelling in ("x", SPELLINGS["pairs_and_escapes"]):
        for line in _defective_lines(spelling, length, DEFECTS[defect]):
            block = b'{"text": "short"}\n' + line if len(line) % 3 == 0 else line
            got = check_block(block, FIELD, kind)
            path.write_bytes(block)
            today = _outcome(
                lambda: [(d.data, d.position) for d in documents.iter_documents([path], jsonl_field=FIELD)]
            )
            ours = _outcome(
                lambda: _pairs(device_lines.block_documents(block, path, 0, FIELD, device_of(kind)))
            )
            assert ours == today
            assert (got is None) == _refused(line), line


def _refused(line: bytes) -> bool:
    """Whether json.loads refuses the line, or its field is no UTF-8 (a lone surrogate)."""
    try:
        json.loads(line)[FIELD].encode()
    except (ValueError, UnicodeEncodeError):
        return True
    return False


@pytest.mark.parametrize("kind", DEVICES)
def test_plain_long_lines_cut_at_utf8_boundaries(kind):
    """Plain lines of each class, of 2-, 3- and 4-byte characters after every prefix length,
    and with a bad byte or a run of continuation bytes at every position around an offset."""
    for length in LENGTHS.values():
        for unit in ("\u00e9", "\u4e2d", "\U0001f600", "a\U0001f600\u4e2d"):
            lines = [("p" * n + unit * (length // len(unit.encode()))).encode() for n in range(5)]
            check_block(b"\n".join(lines), None, kind, must_accept=True, sep=b"")
    for length in (1500, 20000):
        line = ("\u4e2d" * (length // 3)).encode()
        offset = (length // 2) // SLICE * SLICE
        for at in range(offset - 6, offset + 7):
            for bad in (b"\x80", b"\x80\x80\x80\x80\x80", b"\xf0\x9f"):
                got = check_block(line[:at] + bad + line[at:], None, kind, sep=b"")
                assert got is None


@st.composite
def escape_runs_block(draw):
    """Lines of either class whose field is random escapes, surrogate pairs, runs of
    backslashes and UTF-8, dense, with a defect at times."""
    parts = st.sampled_from(
        [
            "\\\\",
            '\\"',
            "\\n",
            "\\u00e9",
            "\\ud83d\\ude00",
            "\\udbff\\udfff",
            "\u00e9",
            "\U0001f600",
            "x",
            "\\/",
        ]
    )
    unit = "".join(draw(st.lists(parts, min_size=1, max_size=40)))
    length = draw(st.sampled_from([1100, 2500, 4100, 9000, 70000]))
    line = _line("p" * draw(st.integers(0, 80)), unit, length)
    if draw(st.integers(0, 3)) == 0:
        at = draw(st.integers(PREFIX, len(line) - 2))
        line = line[:at] + draw(st.sampled_from(list(DEFECTS.values()))) + line[at:]
    lines = draw(st.permutations([line, b'{"text": "short"}', b""]))
    return b"\n".join(lines)


@pytest.mark.parametrize("kind", DEVICES)
def test_random_dense_fields(kind):
    @settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(escape_runs_block())
    def run(block):
        check_block(block, FIELD, kind)

    run()
