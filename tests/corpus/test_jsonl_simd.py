"""The JSONL reader's 64-byte steps (ffi/core/json_simd.h: copy_plain_512, valid_utf8_512, with
AVX-512 where the CPU has it; elsewhere, and in a second run here, the SSE2 and byte-wise
code): escapes, quotes, control and non-ASCII bytes, and malformed UTF-8 at every offset around
the steps and from a line's end, and long generated fields and lines, against json.loads and
Python's decoder (test_jsonl.py's `check_same`)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import is_utf8
from test_jsonl import FIELD, check_same, python_reader, settings_
from strategies import json_string


ESCAPES = [b'\\"', b"\\\\", b"\\/", b"\\b", b"\\f", b"\\n", b"\\r", b"\\t", b"\\u00e9", b"\\ud83d\\ude00"]
# (the last three: a backslash before a byte >= 0x80 whose low seven bits are an escape letter:
# '"' in a lone continuation byte, 'b' and 'f' in the lead bytes of '—' and '\u6e00', whole)
BREAKS = ESCAPES + [b"\\", b"\\x", b"\\u12", b'"', "é".encode(), "🎉".encode(), b"\x01", b"\xe4"]
BREAKS += [b"\\\xa2", b"\\" + "—".encode(), b"\\" + "\u6e00".encode()]


@pytest.mark.parametrize("second", [b"", b"\\n", b"\\\\", b'\\"', b'"', "é".encode()])
def test_escapes_either_side_of_the_64_byte_steps(second):
    """An escape, a bad escape, a quote, a control byte or a non-ASCII character at each offset
    around the 64-byte steps (copy_plain_512 decodes the two-byte escapes there and leaves the
    rest to the byte-wise code), alone and followed a few bytes later by a second one: the
    native reader takes what json.loads takes and gives up only where it refuses."""
    for s in BREAKS:
        for at in range(0, 140, 1 if s in (b"\\", b'\\"', b"\\\\") else 3):
            for gap in (0, 1, 5):
                body = b"a" * at + s + b"c" * gap + second + b"b" * 70
                line = b'{"text": "' + body + b'", "k": "' + b"k" * (at + 64) + b'"}\n'
                check_same(line, FIELD, must_accept=python_reader(line, FIELD) is not None)


@pytest.mark.parametrize("tail", [b'"}', b'"   }', b'"}  ', b'"', b""])
def test_a_break_at_every_distance_from_the_line_end(tail):
    """The field last in its line, so that its last bytes fall in copy_plain_512's last step,
    which reads only the bytes left (the lanes past them as zeros): each break at every
    distance from the end of the line, and strings of every length up to past one step, whole
    or cut short (no closing quote, a backslash as the line's last byte)."""
    for s in BREAKS:
        for before in (0, 1, 63, 64, 65, 130):
            for after in range(0, 70, 1 if s in (b"\\", b'\\"', b"\\\\") else 3):
                body = b"a" * before + s + b"b" * after
                line = b'{"k": 1, "text": "' + body + tail + b"\n"
                check_same(line, FIELD, must_accept=python_reader(line, FIELD) is not None)
    for n in range(0, 140):
        for end in (b'"}\n', b"\\", b"\\n"):
            line = b'{"text": "' + b"x" * n + end
            check_same(line, FIELD, must_accept=python_reader(line, FIELD) is not None)


@settings_
@given(
    st.lists(
        st.text(st.sampled_from('ab "\\/\n\t\b\r\x0cé€😀\x01\x1f'), min_size=40, max_size=300),
        min_size=1,
        max_size=4,
    ),
    st.data(),
)
def test_long_escaped_strings_equal_json_loads(texts, data):
    """Fields of hundreds of bytes dense with escapes (each character spelled raw or escaped at
    random, as `strategies.json_string` does), one to four lines: the documents json.loads gives."""
    lines = [b'{"text": ' + data.draw(json_string(t)).encode() + b', "n": 1}' for t in texts]
    block = b"\n".join(lines) + b"\n"
    check_same(block, FIELD, must_accept=True)


UTF8_ATOMS = [b"a", b" ", "é".encode(), "—".encode(), "🎉".encode(), "\uffff".encode(), "\U0010ffff".encode()]
UTF8_BREAKS = [
    b"\xc0\x80",
    b"\xe0\x80\x80",
    b"\xed\xa0\x80",
    b"\xf4\x90\x80\x80",
    b"\xf5",
    b"\x80",
    b"\xc3",
    b"\xe2\x80",
]
UTF8_BREAKS += [b"\xf0\x9f\x8e", b"\xff", b"\xf8\x88\x80\x80\x80"]


def runs_of(atoms: list[bytes], most_atoms: int, most_runs: int):
    """One to `most_runs` byte strings, each of up to `most_atoms` atoms."""
    run = st.lists(st.sampled_from(atoms), min_size=0, max_size=most_atoms).map(b"".join)
    return st.lists(run, min_size=1, max_size=most_runs)


def breaks_of(atoms: list[bytes], most: int):
    return st.lists(st.tuples(st.integers(0, 10**6), st.sampled_from(atoms)), max_size=most)


def put_in(block: bytes, breaks) -> bytes:
    """`block` with each (at, bytes) of `breaks` inserted, `at` taken modulo its length."""
    for at, bad in breaks:
        at %= len(block)
        block = block[:at] + bad + block[at:]
    return block


@settings_
@given(runs_of(UTF8_ATOMS, 200, 6), breaks_of(UTF8_BREAKS, 2))
def test_long_plain_lines_utf8_checked_as_python(lines, breaks):
    """Plain lines of up to ~800 bytes of one- to four-byte characters (valid_utf8's 64-byte steps
    with AVX-512), some with a malformed sequence put in anywhere (overlong, surrogate, past
    U+10FFFF, a lone continuation, cut short, across the steps' edges): the native reader takes
    exactly the lines Python's decoder takes."""
    block = put_in(b"\n".join(lines) + b"\n", breaks)
    got = check_same(block, None, must_accept=all(is_utf8(x) for x in block.split(b"\n")))
    if got is not None:
        assert all(is_utf8(d) for d in got[0])


@pytest.mark.parametrize("middle", [b"", "é".encode(), b"x" * 64])
def test_utf8_sequences_either_side_of_the_64_byte_steps(middle):
    """Each malformed sequence and each valid one at every offset around valid_utf8's 64-byte
    steps, ASCII after it (a step of ASCII only checks that the one before ended no sequence
    early): plain lines taken exactly where Python's decoder takes them."""
    for s in UTF8_BREAKS + UTF8_ATOMS:
        for at in range(0, 135):
            line = b"a" * at + s + middle + b"b" * 100
            check_same(line + b"\n", None, must_accept=is_utf8(line))


JSON_ATOMS = UTF8_ATOMS + [b"\\n", b'\\"', b"\\u00e9", b"\\\\", b'"', b"\x01", b"\\" + "—".encode()]


@settings_
@given(runs_of(UTF8_ATOMS, 300, 4), breaks_of(UTF8_BREAKS + JSON_ATOMS, 3))
def test_raw_non_ascii_fields_checked_as_json_loads(texts, breaks):
    """JSON fields of raw one- to four-byte characters (the 64-byte steps take non-ASCII bytes as
    they are and the run is checked as UTF-8 after), with malformed sequences, escapes, quotes
    and control bytes put in anywhere, cutting sequences too: the native reader takes exactly
    the lines json.loads takes, with its documents."""
    lines = [b'{"n": 1, "text": "' + t + b'"}' for t in texts]
    block = put_in(b"\n".join(lines) + b"\n", breaks)
    check_same(block, FIELD, must_accept=python_reader(block, FIELD) is not None)


@pytest.mark.parametrize("atom", ["é".encode(), "—".encode(), "🎉".encode()])
def test_a_malformed_sequence_at_every_offset_in_a_non_ascii_field(atom):
    """A run of one non-ASCII character (the steps take it whole) with each malformed sequence
    at every offset around the 64-byte steps: refused exactly where json.loads refuses."""
    for bad in UTF8_BREAKS:
        for at in range(0, 140, 1):
            body = atom * (at // len(atom)) + b"a" * (at % len(atom)) + bad + atom * 30
            line = b'{"text": "' + body + b'"}\n'
            check_same(line, FIELD, must_accept=python_reader(line, FIELD) is not None)


@pytest.mark.skipif(os.environ.get("BLOCKBPE_JSON_AVX512") == "0", reason="this is the run without AVX-512")
def test_the_same_without_avx512():
    """The SSE2 and byte-wise code, what CPUs without AVX-512 VBMI2 run, through this file's and
    test_jsonl.py's tests: a second pytest with BLOCKBPE_JSON_AVX512=0 (the reader reads the
    switch once per process)."""
    here = Path(__file__).resolve().parent
    env = dict(os.environ, BLOCKBPE_JSON_AVX512="0")
    tests = [str(here / "test_jsonl_simd.py"), str(here / "test_jsonl.py")]
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", *tests],
        env=env,
        cwd=here.parents[1],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
