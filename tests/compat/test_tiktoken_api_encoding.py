"""The tiktoken-style view (`tok.as_tiktoken()`): attributes, encode / decode, round trips.

Differential: our view and tiktoken over the same ranks and specials (`testing.tiktoken_oracle`),
for r50k, cl100k and o200k: ids equal, and where tiktoken raises we raise the same exception
type (ValueError messages verbatim). tiktoken's own tests with their literal ids (its registry
encodings by name, p50k and o200k_harmony among them, pickling, encoding_for_model) are in
test_tiktoken_suite.py, whose docstring maps every tiktoken test to its port; the tests here
named like one of tiktoken's extend it with the comparison against tiktoken. Not ported:
`_encode_bytes` (private; its round trip is checked through `Tokenizer.encode_batch` on raw
bytes). Special tokens, batches and offsets: test_tiktoken_api_specials.py; the HF-style call
(`tok(texts, ...)`): test_tiktoken_api_hf_call.py.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

from helpers import both, load_tokenizer, pair, same
from strategies import fuzz, unicode_text

NAMES = ["r50k", "cl100k", "o200k"]
# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


# ----------------------------------------------------------------------------------------------
# Attributes
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_attributes(name):
    ours, ref = pair(name)
    assert ours.name == load_tokenizer(name, "tiktoken").vocab.name
    for attr in ("n_vocab", "max_token_value", "eot_token", "special_tokens_set"):
        assert getattr(ours, attr) == getattr(ref, attr), attr
    assert ours.token_byte_values() == ref.token_byte_values()
    for t in (0, ours.eot_token, ours.max_token_value, ours.n_vocab):
        assert ours.is_special_token(t) == ref.is_special_token(t)
    assert ours.device.platform == "cpu"
    assert isinstance(ours, bb.TiktokenEncoding)


def test_tokenizer_encode_batch_keeps_its_meaning():
    tok = load_tokenizer("cl100k", "tiktoken")
    out = tok.encode_batch(["hello world"])
    assert isinstance(out, bb.Encoded) and isinstance(out.ids, jax.Array)
    assert np.asarray(out.ids)[0, :2].tolist() == [15339, 1917]


# ----------------------------------------------------------------------------------------------
# tiktoken's tests/test_encoding.py and test_simple_public.py
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_simple_single_token_round_trip(name):
    for enc in both(name):
        for token in range(10_000):
            assert enc.encode_single_token(enc.decode_single_token_bytes(token)) == token


def test_simple_repeated():
    expected = {
        "0": [15],
        "00": [405],
        "000": [830],
        "0000": [2388],
        "00000": [20483],
        "000000": [10535],
        "0000000": [24598],
        "00000000": [8269],
        "000000000": [10535, 830],
        "0000000000": [8269, 405],
        "00000000000": [8269, 830],
        "000000000000": [8269, 2388],
        "0000000000000": [8269, 20483],
        "00000000000000": [8269, 10535],
        "000000000000000": [8269, 24598],
        "0000000000000000": [25645],
        "00000000000000000": [8269, 10535, 830],
    }
    for enc in both("r50k"):
        assert enc.encode_batch(list(expected)) == list(expected.values())
        for text, ids in expected.items():
            assert enc.encode(text) == ids


def test_large_repeated():
    ours, ref = pair("o200k")
    tokens = ours.encode("x" * 1_000_000)
    assert tokens and tokens == ref.encode("x" * 1_000_000)


@pytest.mark.parametrize("name", NAMES)
def test_encode_empty(name):
    for enc in both(name):
        assert enc.encode("") == [] and enc.encode_batch([]) == [] and enc.encode_batch([""]) == [[]]


def test_encode_bytes():
    # tiktoken's assertions are on the private `_encode_bytes`; ours take raw bytes through
    # Tokenizer.encode_batch (the primitive's own policy for invalid UTF-8), decoded by the view.
    tok = load_tokenizer("cl100k", "tiktoken")
    ours, _ = pair("cl100k")
    for i in range(10):
        raw = b"\x80" * i
        ids, counts = tok.encode_batch([raw], device=ours.device)
        assert ours.decode_bytes(np.asarray(ids)[0, : int(counts[0])].tolist()) == raw


@pytest.mark.parametrize("name", NAMES)
@fuzz(40)
@given(raw=st.binary(max_size=64))
def test_hyp_encode_bytes(name, raw):
    tok = load_tokenizer(name, "tiktoken")
    ours, _ = pair(name)
    ids, counts = tok.encode_batch([raw], max_len=64, device=ours.device)
    assert ours.decode_bytes(np.asarray(ids)[0, : int(counts[0])].tolist()) == raw


def test_encode_surrogate_pairs():
    for enc in both("cl100k"):
        assert enc.encode("👍") == [9468, 239, 235]
        assert enc.encode("\ud83d\udc4d") == [9468, 239, 235]  # pair -> code point
        assert enc.encode("\ud83d") == enc.encode("�")  # lone surrogate -> U+FFFD
        assert enc.encode_ordinary("a\udc4db") == enc.encode("a�b")
        assert enc.encode_batch(["\ud83d\udc4d", "\ud83d"]) == [[9468, 239, 235], enc.encode("�")]


@pytest.mark.parametrize("name", NAMES)
def test_catastrophically_repetitive(name):
    ours, ref = pair(name)
    values = []
    for c in ["^", "0", "a", "'s", " ", "\n"]:
        big = c * 10_000
        values += [big, " " + big, " " + big + "\n"]
    ids = ours.encode_batch(values)
    assert ids == ref.encode_batch(values)
    for value, row in zip(values, ids):
        assert ours.decode(row) == value == ref.decode(row)
        assert ours.encode(value) == row


@pytest.mark.parametrize("name", NAMES)
@fuzz(60)
@given(text=st.text() | unicode_text)
def test_hyp_roundtrip(name, text):
    ours, ref = pair(name)
    ids = ours.encode(text, disallowed_special=())
    assert ids == ref.encode(text, disallowed_special=())
    assert ours.decode(ids) == text


@pytest.mark.parametrize("name", NAMES)
def test_single_token_roundtrip(name):
    ours, ref = pair(name)
    missing = []
    for token in range(ours.n_vocab + 2):  # two past the end: KeyError for both
        try:
            token_bytes = ours.decode_single_token_bytes(token)
        except KeyError:
            with pytest.raises(KeyError):
                ref.decode_single_token_bytes(token)
            missing.append(token)
            continue
        assert token_bytes == ref.decode_single_token_bytes(token)
        assert ours.encode_single_token(token_bytes) == token
    assert missing[-2:] == [ours.n_vocab, ours.n_vocab + 1]


@pytest.mark.parametrize("name", NAMES)
def test_key_errors(name):
    for fn in (
        lambda e: e.encode_single_token(b"not one token, surely"),
        lambda e: e.encode_single_token("<|not_a_special|>"),
        lambda e: e.decode_single_token_bytes(10**7),
        lambda e: e.decode_bytes([1, 10**7]),
        lambda e: e.decode([10**7]),
    ):
        with pytest.raises(KeyError):
            same(name, fn)
    for special in pair(name)[0].special_tokens_set:  # specials encode/decode as single tokens
        token = same(name, lambda e: e.encode_single_token(special))
        assert same(name, lambda e: e.decode_single_token_bytes(token)) == special.encode()
