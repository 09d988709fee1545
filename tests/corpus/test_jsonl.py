"""The native block reader (ffi/core/jsonl.h, `split_documents`) against the Python reader
(corpus.inputs.lines.line_documents, which json.loads each line): where the native reader accepts a
block its documents and lines are the Python reader's; where it gives up, the Python reader
decides. On well-formed JSONL it must not give up."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbpe_jax.corpus import documents
from blockbpe_jax.corpus.inputs import lines as line_reader
from blockbpe_jax import native
from blockbpe_jax.corpus.types import CorpusError
from blockbpe_jax.text_rows import pack_strings

from helpers import is_utf8
from strategies import json_string, json_value, json_values

split_documents = native.cpu.split_documents
FIELD = "text"


def python_reader(block: bytes, field):
    """(documents, lines) as the Python reader gives them, or None where it raises."""
    try:
        docs = list(line_reader.line_documents(block.split(b"\n"), Path("x"), 0, field))
    except CorpusError:
        return None
    return [d for d, _ in docs], [line - 1 for _, line in docs]


def native_reader(block: bytes, field, threads: int = 1, sep: bytes = b""):
    """(documents, lines) as split_documents gives them; with `sep`, joined with it after each
    document into a buffer of `into`'s (the corpus job's way), checked and taken off again."""
    asked = []

    def into(n: int) -> np.ndarray:
        asked.append(n)
        return np.full(n + 5, 0xAB, np.uint8)  # (longer than asked: the job's buffers are)

    out = split_documents(block, field, threads, sep, into if sep else None)
    if out is None:
        return None
    data, offsets, lines, newlines = out
    assert newlines == block.count(b"\n")
    end = offsets[-1]
    assert offsets[0] == 0 and end == len(data) - (5 if asked else 0) and (np.diff(offsets) >= len(sep)).all()
    raw = data.tobytes()
    docs = [raw[a : b - len(sep)] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())]
    assert all(raw[b - len(sep) : b] == sep for b in offsets[1:].tolist())
    if sep and docs:
        assert asked == [end] and raw[end:] == b"\xab" * 5
    return docs, lines.tolist()


def check_same(block: bytes, field, must_accept: bool, threads: int = 1):
    got = native_reader(block, field, threads)
    want = python_reader(block, field)
    if got is not None:
        assert want is not None, "the native reader accepted a block the Python reader rejects"
        assert got == want
    elif must_accept:
        pytest.fail(f"the native reader gave up on a well-formed block: {block[:200]!r}")
    return got


# -- generated JSON, written with every spelling json.loads accepts ----------------------------


ws = st.sampled_from(["", " ", "  ", "\t", " \r", "\r"])
plain_texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
texts = st.lists(
    st.one_of(
        st.characters(exclude_categories=("Cs",)),  # with lone surrogates
        st.integers(0xD800, 0xDFFF).map(chr),
    ),
    max_size=40,
).map("".join)
values = json_values(plain_texts, nan=False, max_leaves=8)


@st.composite
def jsonl_line(draw, lone_in_field=False):
    """One well-formed object line holding FIELD (a string) among other keys and values."""
    text = draw(texts if lone_in_field else plain_texts)
    before = draw(st.dictionaries(plain_texts.filter(lambda k: k != FIELD), values, max_size=3))
    after = draw(
        st.dictionaries(plain_texts.filter(lambda k: k != FIELD and k not in before), values, max_size=2)
    )
    items = list(before.items()) + [(FIELD, text)] + list(after.items())
    w = lambda: draw(ws)  # noqa: E731
    body = ("," + w()).join(
        (
            draw(json_string(k))
            if k != FIELD
            else draw(st.sampled_from(['"text"', '"te\\u0078t"', '"\\u0074ext"']))
        )
        + w()
        + ":"
        + w()
        + draw(json_value(v, ws))
        + w()
        for k, v in items
    )
    return w() + "{" + w() + body + "}" + w()


@st.composite
def jsonl_block(draw, lone_in_field=False):
    lines = draw(
        st.lists(
            st.one_of(jsonl_line(lone_in_field), st.sampled_from(["", " ", "\r", " \t"])),
            min_size=1,
            max_size=8,
        )
    )
    return ("\n".join(lines) + draw(st.sampled_from(["", "\n"]))).encode("utf-8", "surrogatepass")


settings_ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@settings_
@given(jsonl_block())
def test_well_formed_jsonl_equals_json_loads(block):
    got = check_same(block, FIELD, must_accept=True)
    assert native_reader(block, FIELD, 3, sep=b"<s>") == got  # (joined with separators: the job's way)


def test_join_into_a_buffer_that_does_not_fit():
    block = b'{"text": "abc"}\n{"text": "de"}\n'
    for bad in (np.zeros(7, np.uint8), np.zeros(20, np.int32), np.zeros(40, np.uint8)[::2], b"x" * 20):
        with pytest.raises(ValueError, match="into\\(\\) must return a writable contiguous uint8 array"):
            split_documents(block, FIELD, 1, b"<s>", lambda n: bad)
    with pytest.raises(ZeroDivisionError):  # (its own error goes through)
        split_documents(block, FIELD, 1, b"<s>", lambda n: 1 / 0)


@settings_
@given(jsonl_block(lone_in_field=True))
def test_lone_surrogates_give_up_or_agree(block):
    # A lone surrogate in the field is an error of the Python reader: the native one gives up.
    got = check_same(block, FIELD, must_accept=False)
    if python_reader(block, FIELD) is not None:
        assert got is not None


MUTATIONS = [
    b"",
    b'"',
    b"\\",
    b"{",
    b"}",
    b",",
    b":",
    b"\n",
    b"\r",
    b"\x00",
    b"\x1f",
    b"\x7f",
    b"\xff",
    b"\xc3",
    b"\xed\xa0\x80",
    b"\\u",
    b"\\ud800",
    b"\\udc00",
    b"0",
    b"-",
    b".",
    b"e",
    b"NaN",
    b"Infinity",
    b"\xef\xbb\xbf",
    b"\x0c",
    b"\x0b",
    b"[",
    b"]",
    b"truefalse",
]


@settings_
@given(
    jsonl_block(),
    st.lists(
        st.tuples(st.integers(0, 10**6), st.sampled_from(MUTATIONS), st.integers(0, 3)),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_jsonl_never_accepts_what_python_rejects(block, edits):
    for at, insert, drop in edits:
        at %= len(block) + 1
        block = block[:at] + insert + block[at + drop :]
    check_same(block, FIELD, must_accept=False)


CASES = [
    (b'{"text": "a", "text": "b"}', True),  # the last one wins, as in a dict
    (b'{"text": 1, "text": "b"}', True),
    (b'{"text": "a", "text": 1}', False),  # field is int
    (b'{"a": [1, 2.5e-3, -0, true, null, NaN, -Infinity, {"b": []}], "text": "x"}', True),
    (b'{"text": "\\ud83d\\ude00 \\u00e9\\n\\/"}', True),
    (b'{"text": "\\ud83d x"}', False),  # a lone surrogate in the field
    (b'{"k\\udc00": "\\udc00", "text": "x"}', True),  # ... elsewhere is fine
    (b'{"text": "x"} {}', False),
    (b'{"text": "x",}', False),
    (b'{"text": "x\tb"}', False),  # a raw control character
    (b'["text"]', False),
    (b'{"other": "x"}', False),
    (b'\xef\xbb\xbf{"text": "x"}', False),  # a BOM: json.loads refuses it
    (b'{"n": 01, "text": "x"}', False),
    (b'{"n": 1.e5, "text": "x"}', False),
    (b'{"n": ' + b"9" * 5000 + b', "text": "x"}', False),  # over int's digit limit
    (b'{"text": "\\x"}', False),
    (b'{"text": "\xe4"}', False),  # invalid UTF-8
    (b"[" * 3000 + b"]" * 3000, False),
]


@pytest.mark.parametrize("line, accepted", CASES, ids=[str(i) for i in range(len(CASES))])
def test_jsonl_cases(line, accepted):
    got = check_same(line + b"\n", FIELD, must_accept=accepted)
    assert (got is not None) == accepted


@settings_
@given(
    st.lists(st.binary(max_size=30).map(lambda b: b.replace(b"\n", b"")), max_size=12),
    st.sampled_from([b"\n", b"\r\n"]),
)
def test_lines_mode_equals_python(lines, eol):
    block = eol.join(lines) + eol
    valid = all(is_utf8(x) for x in lines)
    check_same(block, None, must_accept=valid)


@pytest.mark.parametrize(
    "line, message",
    [
        (
            b'{"n": ' + b"9" * 5000 + b', "text": "x"}',
            r"^{path}:2: not valid JSON: Exceeds the limit \(4300 digits\) for integer string conversion",
        ),
        (
            b'{"text": "x", "a": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
            r"^{path}:2: not valid JSON: maximum recursion depth exceeded",
        ),
    ],
    ids=["digits", "depth"],
)
def test_json_that_json_loads_refuses_is_a_file_line_error(tmp_path, line, message):
    path = tmp_path / "x.jsonl"
    path.write_bytes(b'{"text": "ok"}\n' + line + b"\n")
    with pytest.raises(CorpusError, match=message.format(path=re.escape(str(path)))):
        list(documents.iter_windows([path], jsonl_field=FIELD))


@pytest.mark.parametrize("rows, width", [(3000, 1024), (97, 65536), (4096, 16)])
def test_large_batches_pack_like_ljust(rows, width):
    """Batches of several MiB are written by several threads (core/pack_strings.h
    write_rows): every row, its zero padding, the empty rows past the documents and the
    lengths equal a bytes.ljust reference."""
    rng = np.random.default_rng(rows)
    docs = [bytes(rng.integers(1, 256, int(n), dtype=np.uint8)) for n in rng.integers(0, width + 1, rows)]
    want = np.frombuffer(b"".join(d.ljust(width, b"\0") for d in docs), np.uint8).reshape(rows, width)
    data, lengths = pack_strings(docs, max_len=width)
    np.testing.assert_array_equal(data, want)
    np.testing.assert_array_equal(lengths, [len(d) for d in docs])


@pytest.mark.parametrize("field", [FIELD, None])
def test_one_special_byte_at_every_offset_of_the_scans(field):
    """A quote, escape, control byte, non-ASCII character or invalid byte at each offset of a
    run of plain ASCII (either side of the 16- and 8-byte scans' boundaries): the native
    reader takes what the Python reader takes and gives up only where it refuses."""
    for s in [b'"', b'\\"', b"\\n", b"\\u00e9", "é🎉".encode(), b"\x01", b"\x7f", b"\xe4", b"\xc3"]:
        for at in range(40):
            body = b"a" * at + s + b"b" * (37 - at % 19)
            line = (b'{"text": "' + body + b'"}' if field else body) + b"\n"
            check_same(line, field, must_accept=python_reader(line, field) is not None)
