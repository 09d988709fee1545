"""The device's split of a block of lines (corpus.inputs.device_lines.split_lines, the FFI target
bbpe_split_lines) against the host's: json.loads per line (corpus.inputs.lines.line_documents)
and the native host reader (`native.cpu.split_documents`, ffi/core/jsonl.h), on generated JSONL
and plain text. Where the device split accepts a block, its documents and lines are both
references'; where it gives up, the host reader gives up too (the same rules), and the user
sees today's one-line file:line error. Each test runs on the CPU executor, and on a GPU where
JAX sees one."""

from __future__ import annotations

import json
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbpe_jax import native
from blockbpe_jax.corpus import documents
from blockbpe_jax.corpus.inputs import device_lines
from blockbpe_jax.corpus.inputs import lines as line_reader
from blockbpe_jax.corpus.types import CorpusError
from blockbpe_jax.testing import read_corpus

from helpers import gpu_devices
from strategies import json_string, json_value, json_values

FIELD = "text"
DEVICES = [pytest.param("cpu", id="cpu")] + [
    pytest.param("gpu", id="gpu", marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX"))
]


def device_of(kind: str):
    return jax.devices("cpu")[0] if kind == "cpu" else gpu_devices()[0]


def python_reader(block: bytes, field):
    """(documents, lines) as json.loads per line gives them, or the CorpusError it raises."""
    try:
        docs = list(line_reader.line_documents(block.split(b"\n"), Path("x"), 0, field))
    except CorpusError as e:
        return e
    return [d for d, _ in docs], [line - 1 for _, line in docs]


def host_reader(block: bytes, field, sep: bytes = b""):
    """(documents, lines) as the native host reader gives them (one thread), or None."""
    out = native.cpu.split_documents(block, field, 1, sep, None)
    if out is None:
        return None
    data, offsets, lines, newlines = out
    assert newlines == block.count(b"\n")
    raw = data.tobytes()
    return [
        raw[a : b - len(sep)] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
    ], lines.tolist()


def device_reader(block: bytes, field, kind: str, sep: bytes = b""):
    """(documents, lines) as the device split gives them, or None where it gives up."""
    out = device_lines.split_block(block, field, sep, device_of(kind))
    if out is None:
        return None
    data, offsets, lines, newlines = out
    assert newlines == block.count(b"\n")
    assert offsets[0] == 0 and offsets[-1] == len(data) and (np.diff(offsets) >= len(sep)).all()
    raw = data.tobytes()
    assert all(raw[b - len(sep) : b] == sep for b in offsets[1:].tolist())
    return [
        raw[a : b - len(sep)] for a, b in zip(offsets[:-1].tolist(), offsets[1:].tolist())
    ], lines.tolist()


def check_block(block: bytes, field, kind: str, must_accept: bool = False, sep: bytes = b"<|sep|>"):
    """The device split equals the host reader (accepting and giving up alike) and, where it
    accepts, json.loads per line; returns what it gave."""
    got = device_reader(block, field, kind, sep)
    assert got == host_reader(block, field, sep)
    want = python_reader(block, field)
    if got is not None:
        assert not isinstance(want, CorpusError), (
            f"the device split accepted a block json.loads rejects: {want}"
        )
        assert got == want
    elif must_accept:
        pytest.fail(f"the device split gave up on a well-formed block: {block[:200]!r}")
    return got


# -- generated JSONL: every spelling json.loads accepts, and lines it does not ------------------


# every code point class: ASCII, controls, 2-, 3- and 4-byte UTF-8, noncharacters, private use
code_points = st.one_of(
    st.characters(max_codepoint=0x7F),
    st.characters(exclude_categories=("Cs",)),
    st.sampled_from(["\x00", "\x1f", "\x7f", "\u0080", "\u07ff", "\u0800", "\ufffe", "\uffff", "\ue000"]),
    st.sampled_from(["\U00010000", "\U0001f600", "\U0010ffff", "\u2028", "\u00e9", "\u4e2d"]),
)
plain_texts = st.lists(code_points, max_size=30).map("".join)
texts_with_lone = st.lists(st.one_of(code_points, st.integers(0xD800, 0xDFFF).map(chr)), max_size=30).map(
    "".join
)
values = json_values(plain_texts, nan=True, max_leaves=10)
spaces = st.sampled_from(["", " ", "\t", " \r", "\r\n ", "  "])


@st.composite
def object_line(draw, field_value=None, lone=False):
    """One object line holding FIELD (by default a string; `lone`: it may hold lone
    surrogates) among other members, its key spelled with escapes at times."""
    if field_value is None:
        field_value = draw(texts_with_lone if lone else plain_texts)
    before = draw(st.dictionaries(plain_texts.filter(lambda k: k != FIELD), values, max_size=3))
    after = draw(
        st.dictionaries(plain_texts.filter(lambda k: k != FIELD and k not in before), values, max_size=2)
    )
    items = list(before.items()) + [(FIELD, field_value)] + list(after.items())
    w = lambda: draw(spaces)  # noqa: E731
    key = lambda k: (  # noqa: E731
        draw(st.sampled_from(['"text"', '"te\\u0078t"', '"\\u0074ext"']))
        if k == FIELD
        else draw(json_string(k))
    )
    body = ("," + w()).join(key(k) + w() + ":" + w() + draw(json_value(v, spaces)) + w() for k, v in items)
    return w().replace("\n", "") + "{" + w() + body + "}" + w().replace("\n", "")


blank_lines = st.sampled_from(["", " ", "\r", " \t", "\x0b", "\x0c "])


@st.composite
def jsonl_block(draw, lone=False):
    lines = draw(st.lists(st.one_of(object_line(lone=lone), blank_lines), min_size=1, max_size=8))
    ending = draw(st.sampled_from(["", "\n"]))
    return ("\n".join(line.replace("\r\n", "\r") for line in lines) + ending).encode("utf-8", "surrogatepass")


def _bad_line(draw) -> str:
    """A line json.loads or the reader refuses (or one only the host reader gives up on)."""
    good = draw(object_line())
    return draw(
        st.sampled_from(
            [
                good[: max(1, len(good) // 2)],  # cut short
                good + ",",  # trailing garbage
                '{"other": "x"}',  # missing field
                "{}",
                '{"text": 12}',  # non-string field
                '{"text": null}',
                '{"text": ["a"]}',
                '{"text": {"a": "b"}}',
                '{"text": "a", "text": 1}',  # the last occurrence wins
                '["text", "a"]',  # not an object
                '"text"',
                '{"text": "\\ud800"}',  # a lone surrogate in the field
                '{"text": "\\ud800\\u0041"}',
                '{"text": "a\tb"}',  # a raw control character
                '{"text": "\\x41"}',  # a bad escape
                '{"text": "\\u12"}',
                "{'text': 'a'}",
                '{"text": "a",}',
                '{"text": "a"} {"text": "b"}',
                '{"text": "a", "n": 01}',  # numbers json.loads refuses
                '{"text": "a", "n": 1.}',
                '{"text": "a", "n": -}',
                '{"text": "a", "n": tru}',
                '{"text": "a", "n": ' + "[" * 70 + "]" * 70 + "}",  # deep nesting (only the reader gives up)
                '{"text": "a", "n": ' + "9" * 120 + "}",  # a long number (likewise)
                '{"text": "a", "n": NaN, "m": -Infinity}',
                '{"text": "ok"}\x0b',  # \v around the object: not JSON whitespace
            ]
        )
    )


@st.composite
def bad_jsonl_block(draw):
    """A block of good lines with one or two bad ones, or raw bytes that are not UTF-8."""
    lines = [line.encode("utf-8", "surrogatepass") for line in draw(st.lists(object_line(), max_size=4))]
    for _ in range(draw(st.integers(1, 2))):
        bad = draw(st.one_of(st.builds(_bad_line_bytes, st.data()), st.binary(min_size=1, max_size=12)))
        lines.insert(draw(st.integers(0, len(lines))), bad.replace(b"\n", b" "))
    return b"\n".join(lines) + draw(st.sampled_from([b"", b"\n"]))


def _bad_line_bytes(data) -> bytes:
    line = _bad_line(data.draw).encode("utf-8")
    if data.draw(st.booleans()):  # invalid UTF-8 inside the field's string, at times
        at = line.find(b'"text": "')
        if at >= 0:
            cut = at + 9
            line = (
                line[:cut]
                + data.draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xf4\x90\x80\x80"]))
                + line[cut:]
            )
    return line


settings_ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("kind", DEVICES)
def test_well_formed_jsonl_equals_json_loads(kind):
    @settings_
    @given(jsonl_block())
    def run(block):
        check_block(block, FIELD, kind, must_accept=True)

    run()


@pytest.mark.parametrize("kind", DEVICES)
def test_lone_surrogates_in_the_field_give_up_as_the_host(kind):
    @settings_
    @given(jsonl_block(lone=True))
    def run(block):
        check_block(block, FIELD, kind)

    run()


@pytest.mark.parametrize("kind", DEVICES)
def test_bad_jsonl_gives_up_as_the_host_and_words_todays_error(kind, tmp_path):
    path = tmp_path / "bad.jsonl"

    @settings_
    @given(bad_jsonl_block())
    def run(block):
        check_block(block, FIELD, kind)
        path.write_bytes(block)
        today = _outcome(
            lambda: [(d.data, d.position) for d in documents.iter_documents([path], jsonl_field=FIELD)]
        )
        ours = _outcome(lambda: _pairs(device_lines.block_documents(block, path, 0, FIELD, device_of(kind))))
        assert ours == today

    run()


def _outcome(fn):
    """What fn returns, or its CorpusError's message (one line, naming file and line)."""
    try:
        return fn()
    except CorpusError as e:
        assert "\n" not in str(e)
        return str(e)


def _pairs(got):
    docs, positions = got
    return list(zip(docs, np.asarray(positions).tolist()))


@pytest.mark.parametrize("kind", DEVICES)
def test_the_first_line_given_up_on_is_the_first_bad_one(kind):
    lines = [b'{"text": "a"}', b"", b'{"text": "b\\n"}', b'{"text": 3}', b'{"nope": 1}']
    block = b"\n".join(lines)
    split = device_lines.split_lines_jit(FIELD, b"", 8, 64)
    _, _, _, status = split(
        jax.device_put(np.frombuffer(block, np.uint8), device_of(kind)), np.int32(len(block))
    )
    status = np.asarray(status)
    assert status[device_lines.CODE] == device_lines.GIVE_UP and status[device_lines.BAD_LINE] == 3
    with pytest.raises(CorpusError, match=r"^x\.jsonl:4: field 'text' is int, not a string$"):
        device_lines.block_documents(block, Path("x.jsonl"), 0, FIELD, device_of(kind))


# -- plain text lines ------------------------------------------------------------------------------


@st.composite
def text_block(draw):
    lines = draw(st.lists(plain_texts.map(lambda t: t.replace("\n", " ")), max_size=8))
    ends = [draw(st.sampled_from(["\n", "\r\n", "\r\r\n"])) for _ in lines]
    block = "".join(line + end for line, end in zip(lines, ends)).encode("utf-8")
    if draw(st.booleans()) and block:  # the last line unterminated
        block = block[:-1]
    if draw(st.integers(0, 4)) == 0:  # invalid UTF-8 somewhere
        at = draw(st.integers(0, len(block)))
        block = (
            block[:at]
            + draw(st.sampled_from([b"\x80", b"\xc0\xaf", b"\xed\xb0\x80", b"\xe2\x82"]))
            + block[at:]
        )
    return block


@pytest.mark.parametrize("kind", DEVICES)
def test_plain_lines_equal_the_host(kind, tmp_path):
    path = tmp_path / "lines.txt"

    @settings_
    @given(text_block())
    def run(block):
        got = check_block(block, None, kind, sep=b"")
        assert (got is None) == isinstance(python_reader(block, None), CorpusError)
        path.write_bytes(block)
        today = _outcome(lambda: [(d.data, d.position) for d in documents.iter_documents([path])])
        ours = _outcome(lambda: _pairs(device_lines.block_documents(block, path, 0, None, device_of(kind))))
        assert ours == today

    run()


# -- real corpora: many tiles and scan chunks -------------------------------------------------


@pytest.mark.parametrize("kind", DEVICES)
def test_real_corpora(kind, data_dir):
    """GSM8K's JSONL (1,319 lines over many 4 KiB tiles and several scan chunks) and War and
    Peace's lines (tens of thousands), then GSM8K with its 1000th line broken: the first line
    given up on is that one, found across chunks, and the error is today's."""
    jsonl = read_corpus(data_dir / "corpus" / "gsm8k_test.jsonl")
    for field in ("question", "answer"):
        assert check_block(jsonl, field, kind, must_accept=True)[1][-1] == jsonl.count(b"\n") - 1
    text = read_corpus(data_dir / "corpus" / "war_and_peace_en.txt")
    check_block(text, None, kind, must_accept=True, sep=b"")
    lines = jsonl.split(b"\n")
    lines[999] = lines[999].replace(b'"answer"', b'"answer" 1', 1)
    broken = b"\n".join(lines)
    split = device_lines.split_lines_jit("question", b"", len(lines), len(broken))
    status = np.asarray(
        split(jax.device_put(np.frombuffer(broken, np.uint8), device_of(kind)), np.int32(len(broken)))[3]
    )
    assert status[device_lines.CODE] == device_lines.GIVE_UP and status[device_lines.BAD_LINE] == 999
    path = Path("gsm8k_test.jsonl")
    with pytest.raises(CorpusError, match=r"^gsm8k_test\.jsonl:1000: not valid JSON: "):
        device_lines.block_documents(broken, path, 0, "question", device_of(kind))


# -- huge lines, capacities, padding -------------------------------------------------------------


@pytest.mark.parametrize("kind", DEVICES)
def test_huge_lines(kind):
    rng = np.random.default_rng(7)
    words = ["word", "caf\u00e9", "\u4e2d\u6587", "\U0001f600", 'q"uote', "back\\slash", "tab\t", "new\nline"]
    text = " ".join(rng.choice(words, 300_000).tolist())  # ~2.7 MB, every escape kind
    line = json.dumps({"id": 1, FIELD: text, "tail": [1, 2, {"x": None}]})
    block = (
        "\n".join([line, '{"text": "short"}', json.dumps({FIELD: text}, ensure_ascii=False)]) + "\n"
    ).encode()
    got = check_block(block, FIELD, kind, must_accept=True)
    assert got[0][0] == text.encode()
    plain = (text.replace("\n", " ") * 2).encode()
    check_block(plain + b"\r\n" + plain, None, kind, must_accept=True, sep=b"")


# Lines longer than these are decoded in pieces by a warp, by a block (ffi/core/json_lines.h,
# kThreadLine, kWarpLine).
THREAD_LINE, WARP_LINE = 1 << 10, 4 << 10


@st.composite
def long_lines_block(draw):
    """Lines over THREAD_LINE or WARP_LINE bytes whose field repeats one spelling (escapes,
    surrogate pairs, lone surrogates at times) after a prefix of random length, so that the
    pieces' cuts fall everywhere in it; and a long plain line likewise."""
    unit = draw(st.one_of(plain_texts, texts_with_lone).filter(bool))
    spelled = draw(json_string(unit))[1:-1]
    prefix = "p" * draw(st.integers(0, 60))
    long = draw(st.sampled_from([THREAD_LINE, WARP_LINE]))
    field = prefix + spelled * (long // len(spelled.encode("utf-8", "surrogatepass")) + 2)
    line = '{"id": 1, "text": "' + field + '", "tail": [1, {"x": null}]}'
    lines = draw(st.permutations([line, '{"text": "short"}', ""]))
    jsonl = "\n".join(lines).encode("utf-8", "surrogatepass")
    plain_unit = draw(plain_texts.filter(bool)).replace("\n", " ").encode()
    plain = prefix.encode() + plain_unit * (long // len(plain_unit) + 2)
    return jsonl, plain + b"\r\nshort\n" + plain


@pytest.mark.parametrize("kind", DEVICES)
def test_long_lines_decoded_in_pieces(kind):
    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(long_lines_block())
    def run(blocks):
        jsonl, plain = blocks
        check_block(jsonl, FIELD, kind)
        check_block(plain, None, kind, must_accept=True, sep=b"")

    run()


@pytest.mark.parametrize("kind", DEVICES)
def test_capacities_and_padding(kind):
    device = device_of(kind)
    block = b'{"text": "abc"}\n\n{"text": "de"}\n{"text": "f"}'
    padded = np.zeros(256, np.uint8)
    padded[: len(block)] = np.frombuffer(block, np.uint8)
    padded[len(block) :] = ord("\n")  # (bytes past `size` are not read)

    def run(size, max_lines, max_bytes):
        out = device_lines.split_lines_jit(FIELD, b"|", max_lines, max_bytes)(
            jax.device_put(padded, device), np.int32(size)
        )
        return [np.asarray(x) for x in out]

    data, offsets, lines, status = run(len(block), 3, 9)
    assert status.tolist()[:4] == [device_lines.OK, 3, 9, 3] and status[device_lines.BAD_LINE] == -1
    assert data.tobytes() == b"abc|de|f|" and offsets.tolist() == [0, 4, 7, 9] and lines.tolist() == [0, 2, 3]
    assert run(len(block), 2, 64)[3][device_lines.CODE] == device_lines.TOO_MANY_LINES
    assert run(len(block), 3, 8)[3][device_lines.CODE] == device_lines.TOO_MANY_BYTES
    data, offsets, _, status = run(16, 3, 9)  # the first line only
    assert status[device_lines.CODE] == device_lines.OK and data[: offsets[1]].tobytes() == b"abc|"
    status = run(10_000, 300, 300)[3]  # size past N: N (the padding's empty lines are no documents)
    assert status.tolist()[:4] == [device_lines.OK, 3, 9, int((padded == ord("\n")).sum())]
    _, _, _, status = run(0, 3, 9)
    assert status.tolist()[:4] == [device_lines.OK, 0, 0, 0]


def test_refuses_what_it_cannot_take():
    block = jax.numpy.zeros(16, jax.numpy.uint8)
    with pytest.raises(ValueError, match="field name"):
        device_lines.split_lines(block, 0, field="x" * 300, max_lines=4, max_bytes=4)
    with pytest.raises(ValueError, match="sep holds at most"):
        device_lines.split_lines(block, 0, field=FIELD, sep=b"s" * 65, max_lines=4, max_bytes=4)
    assert not device_lines.device_field("\ud800") and device_lines.device_field(None)
