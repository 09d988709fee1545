"""`pack_strings` (ffi/core/pack_strings.h, also what the CUDA module's staging packs with):
each row is its item's UTF-8 bytes then zeros, for strs of every width CPython stores (Latin-1,
the BMP, astral code points), with or without the UTF-8 form CPython keeps beside a str, and
bytes; the first bad item's error, CPython's own for a surrogate; and a str's UTF-8 form is
written into the rows without being made and kept beside the str."""

from __future__ import annotations

import ctypes
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb

from helpers import compile_sanitized

_as_utf8 = ctypes.pythonapi.PyUnicode_AsUTF8AndSize
_as_utf8.restype = ctypes.c_void_p
_as_utf8.argtypes = [ctypes.py_object, ctypes.c_void_p]


def with_utf8_form(text: str) -> str:
    """`text`, its UTF-8 form made and kept beside it by CPython (where it has one: not with a
    surrogate)."""
    try:
        _as_utf8(text, None)
    except UnicodeEncodeError:
        pass
    return text


def expected(items, max_len):
    """(rows, lengths) the rule gives, or the first bad item's (exception type, message: for a
    surrogate, CPython's, which pack_strings goes on to explain)."""
    blobs = []
    for k, item in enumerate(items):
        if isinstance(item, str):
            try:
                item = item.encode("utf-8")
            except UnicodeEncodeError as e:
                return UnicodeEncodeError, str(e)
        elif not isinstance(item, bytes):
            return TypeError, f"pack_strings: item {k} is neither str nor bytes"
        if max_len is not None and len(item) > max_len:
            return ValueError, f"pack_strings: string {k} has {len(item)} bytes, more than max_len={max_len}"
        blobs.append(item)
    width = (
        max_len if max_len is not None else max(16, 1 << (max(map(len, blobs), default=0) - 1).bit_length())
    )
    rows = np.zeros((len(blobs), width), np.uint8)
    for k, b in enumerate(blobs):
        rows[k, : len(b)] = np.frombuffer(b, np.uint8)
    return rows, np.array([len(b) for b in blobs], np.int32)


# Code points of every width: ASCII, Latin-1, the BMP (surrogates among them), astral.
code_points = st.one_of(
    st.characters(max_codepoint=0x7F),
    st.characters(min_codepoint=0x80, max_codepoint=0xFF),
    st.characters(min_codepoint=0x100, max_codepoint=0xFFFF),
    st.characters(min_codepoint=0x10000),
)
# Text of one script's letters between ASCII spaces and punctuation, long enough for the eight-
# unit writers (core/utf8_ssse3.h) and with shares of non-ASCII letters on either side of the
# choices core/text_view.h makes: Latin-1 accents, Latin Extended-A, Greek, Cyrillic, CJK.
SCRIPTS = [(0xC0, 0xFF), (0x100, 0x17F), (0x3B1, 0x3C9), (0x430, 0x44F), (0x4E00, 0x9FFF)]
script_text = st.tuples(st.sampled_from(SCRIPTS), st.integers(1, 64)).flatmap(
    lambda s: st.text(
        st.one_of(
            st.characters(min_codepoint=s[0][0], max_codepoint=s[0][1]),
            *[st.characters(max_codepoint=0x7F)] * s[1],  # (1 to 64 ASCII draws to one letter)
        ),
        min_size=16,
        max_size=2000,
    )
)
item = st.one_of(
    st.text(code_points, max_size=40).map(lambda t: "".join(t)),  # (fresh: no UTF-8 form)
    st.text(code_points, max_size=40).map(lambda t: with_utf8_form("" + t + "")),
    st.text(st.characters(min_codepoint=0x80, max_codepoint=0xFFFF), min_size=30, max_size=3000),
    script_text,
    st.binary(max_size=40),
)


@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(items=st.lists(item, max_size=12), max_len=st.one_of(st.none(), st.integers(0, 200)))
def test_rows_are_the_utf8_bytes(items, max_len):
    want = expected(items, max_len)
    if isinstance(want[0], type):
        with pytest.raises(want[0]) as raised:
            bb.pack_strings(items, max_len=max_len)
        assert str(raised.value).startswith(want[1])
        return
    rows, lengths = bb.pack_strings(items, max_len=max_len)
    assert np.array_equal(rows, want[0]) and np.array_equal(lengths, want[1])


@given(st.lists(st.sampled_from([3, None, b"ok", "ok", "a\ud800", "x" * 50]), min_size=1, max_size=6))
def test_the_first_bad_item_names_the_error(items):
    """Errors of several kinds in one batch: the first bad item's, whichever kind it is."""
    want = expected(items, 20)
    if isinstance(want[0], type):
        with pytest.raises(want[0]) as raised:
            bb.pack_strings(items, max_len=20)
        assert str(raised.value).startswith(want[1])


def test_no_utf8_form_is_kept_beside_the_strs():
    """A str without a UTF-8 form gets none from being packed (CPython would keep a copy of
    the text beside every str it encodes: a batch's memory twice over)."""
    texts = ["".join(["é", "日本", "🎉", "x"]) * k for k in range(1, 200)]
    sizes = [sys.getsizeof(t) for t in texts]
    rows, lengths = bb.pack_strings(texts)
    assert [sys.getsizeof(t) for t in texts] == sizes
    assert lengths.tolist() == [len(t.encode()) for t in texts]
    with_utf8_form(texts[0])
    assert sys.getsizeof(texts[0]) > sizes[0]  # (what the check above would see)


def test_long_rows_of_every_width():
    """Rows long enough to be measured and written on several threads: each width (the widest
    code point of a str sets it) with runs of narrower code points, ASCII and not, that its
    fast path takes or leaves at every offset."""
    pairs = [
        ("a", "é"),
        ("a", "ł"),
        ("é", "ł"),
        ("a", "日"),
        ("é", "日"),
        ("ł", "🎉"),
        ("日", "🎉"),
        ("a", "🎉"),
    ]
    for narrow, wide in pairs:
        texts = [narrow * k + wide + narrow * (k % 13) + wide * 3 for k in range(300)] + [wide * 70000]
        rows, lengths = bb.pack_strings(texts)
        want, want_lengths = expected(texts, None)
        assert np.array_equal(rows, want) and np.array_equal(lengths, want_lengths), (narrow, wide)


def test_transcoding_under_address_and_undefined_behaviour_sanitizers(tmp_path):
    """The transcoding (ffi/core/utf8_units.h) built with AddressSanitizer and
    UndefinedBehaviorSanitizer (tests/cpp/utf8_units_sanitized.cc): strings of each unit width
    and every length to 70 and some long ones, in memory of their exact size and written into
    memory of exactly their UTF-8 length, against an encoder written out in the test: no read
    or write past either, no undefined behaviour, every byte and length right, surrogates
    refused."""
    binary = compile_sanitized(
        "utf8_units_sanitized.cc", tmp_path / "utf8_units_sanitized", "address,undefined"
    )
    run = subprocess.run([str(binary)], capture_output=True, text=True)
    assert run.returncode == 0, (run.stdout + run.stderr)[-3000:]
    assert "ERROR" not in run.stderr and "runtime error" not in run.stderr, run.stderr[-3000:]
    assert run.stdout.strip().endswith("strings, 0 differ") and int(run.stdout.split()[0]) > 8000
