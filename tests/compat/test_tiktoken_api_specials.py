"""The tiktoken-style view (`tok.as_tiktoken()`) against tiktoken over the same ranks and
specials: special tokens (allowed / disallowed, tiktoken's messages verbatim), batches, and
tiktoken's tests/test_offsets.py and test_pickle.py (the assertions ported, not the code).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing

from helpers import both, custom_pickle_encoding, pair, same
from strategies import fuzz, unicode_text

NAMES = ["r50k", "cl100k", "o200k"]
# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


# ----------------------------------------------------------------------------------------------
# Special tokens
# ----------------------------------------------------------------------------------------------


SPECIAL_CASES = [
    {},
    {"allowed_special": "all"},
    {"disallowed_special": ()},
    {"disallowed_special": []},
    {"allowed_special": {"<|endoftext|>"}},
    {"allowed_special": {"<|endoftext|>"}, "disallowed_special": ()},
    {"allowed_special": {"<|endofprompt|>"}},
    {"disallowed_special": {"<|endofprompt|>"}},
    {"allowed_special": {"<|endoftext|>", "<|not_special|>"}},  # unknown names: ignored
    {"allowed_special": {"<|endoftext|>"}, "disallowed_special": {"<|endoftext|>"}},
    {"allowed_special": "all", "disallowed_special": "all"},
]
SPECIAL_TEXTS = [
    "<|endoftext|>",
    "a<|endoftext|>b",
    "x <|endofprompt|> y <|endoftext|>",
    "<|endoftext",
    "<|fim_prefix|><|fim_middle|>",
    "no specials here",
]


def case_id(kwargs: dict) -> str:
    """A case's test id, its sets sorted: str() of a set follows the process's hash seed, and
    pytest-xdist needs every worker to collect the same ids."""
    return ", ".join(f"{k}={sorted(v) if isinstance(v, (set, frozenset)) else v}" for k, v in kwargs.items())


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kwargs", SPECIAL_CASES, ids=case_id)
def test_special_token_cases_equal_tiktoken(name, kwargs):
    """Every text under every allowed/disallowed setting: same ids or the same ValueError
    (tiktoken's message, verbatim), for encode and encode_batch."""
    for text in SPECIAL_TEXTS:
        try:
            same(name, lambda e: e.encode(text, **kwargs))
        except ValueError as e:
            assert str(e).startswith("Encountered text corresponding to disallowed special token")
    try:
        same(name, lambda e: e.encode_batch(SPECIAL_TEXTS, **kwargs))
    except ValueError:
        pass


@pytest.mark.parametrize("name", NAMES)
@fuzz(40)
@given(data=st.data())
def test_hyp_special_ordinary(name, data):
    ours, ref = pair(name)
    text = data.draw(testing.mixed_text(ours.special_tokens_set) | st.text())
    ids = ours.encode_ordinary(text)
    assert ids == ours.encode(text, disallowed_special=()) == ref.encode_ordinary(text)
    assert ours.encode(text, allowed_special="all") == ref.encode(text, allowed_special="all")


# ----------------------------------------------------------------------------------------------
# Batches
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_batch_encode(name):
    text1, text2 = "hello world", "goodbye world"
    for enc in both(name):
        assert enc.encode_batch([text1]) == [enc.encode(text1)]
        assert enc.encode_batch([text1, text2]) == [enc.encode(text1), enc.encode(text2)]
        assert enc.encode_ordinary_batch([text1]) == [enc.encode_ordinary(text1)]
        assert enc.encode_ordinary_batch([text1, text2]) == [
            enc.encode_ordinary(text1),
            enc.encode_ordinary(text2),
        ]
    same(name, lambda e: e.encode_batch([text1, text2], num_threads=2))


@pytest.mark.parametrize("name", NAMES)
@fuzz(30)
@given(batch=st.lists(st.text() | unicode_text, max_size=8))
def test_hyp_batch_roundtrip(name, batch):
    ours, ref = pair(name)
    encoded = ours.encode_batch(batch, allowed_special="all")
    assert encoded == ref.encode_batch(batch, allowed_special="all")
    assert encoded == [ours.encode(t, allowed_special="all") for t in batch]
    assert ours.decode_batch(encoded) == batch
    assert ours.decode_bytes_batch(encoded) == [t.encode() for t in batch]


def test_batch_of_mixed_lengths_is_bucketed_correctly():
    ours, ref = pair("cl100k")
    batch = ["a" * n + " b" for n in (0, 1, 15, 16, 17, 100, 5000, 3)] * 3
    assert ours.encode_batch(batch) == ref.encode_batch(batch)


# ----------------------------------------------------------------------------------------------
# tiktoken's tests/test_offsets.py and test_pickle.py
# ----------------------------------------------------------------------------------------------


def test_basic_offsets():
    cases = [
        ("hello world", [0, 5], {}),
        ("hello world<|endoftext|> green cow", [0, 5, 11, 24, 30], {"allowed_special": "all"}),
        ("我非常渴望与人工智能一起工作", [0, 1, 2, 3, 3, 4, 4, 5, 6, 7, 8, 8, 9, 10, 11, 12, 13], {}),
        ("நடிகர் சூர்யா", [0, 0, 1, 1, 2, 3, 4, 4, 5, 6, 7, 8, 8, 9, 9, 10, 11, 12, 12], {}),
        (" Ġ除", [0, 1], {}),
    ]
    for enc in both("cl100k"):
        for prompt, offsets, kwargs in cases:
            assert enc.decode_with_offsets(enc.encode(prompt, **kwargs)) == (prompt, offsets)


def _common_prefix_len(a, b):
    i = 0
    while i < len(a) and i < len(b) and a[i] == b[i]:
        i += 1
    return i


@fuzz(40)
@given(data=st.data())
def test_hyp_offsets(data):
    ours, ref = pair("cl100k")
    valid = st.integers(0, ours.n_vocab - 1).filter(
        lambda x: x in ref._special_tokens.values() or x in ref._mergeable_ranks.values()
    )
    tokens = data.draw(st.lists(valid, min_size=1, max_size=20))
    tokens = ours.encode(ours.decode(tokens, errors="ignore"), allowed_special="all")
    text = ours.decode(tokens, errors="strict")
    reference = [
        _common_prefix_len(text, ours.decode(tokens[:i], errors="ignore")) for i in range(len(tokens))
    ]
    assert ours.decode_with_offsets(tokens) == ref.decode_with_offsets(tokens) == (text, reference)


def test_custom_special_and_no_eot():
    """test_pickle's custom Encoding (r50k ranks + `<|pickle|>` at 100000), through
    Tokenizer.from_tiktoken; it has no `<|endoftext|>`: eot_token raises KeyError as tiktoken."""
    ref = custom_pickle_encoding()
    ours = bb.Tokenizer.from_tiktoken(ref).as_tiktoken()
    for enc in (ours, ref):
        assert enc.encode("hello world") == [31373, 995]
        assert enc.encode("<|pickle|>", allowed_special="all") == [100_000]
        assert enc.n_vocab == 100_001 and enc.max_token_value == 100_000
        with pytest.raises(KeyError):
            enc.eot_token
        with pytest.raises(KeyError):
            enc.decode_single_token_bytes(60_000)  # a hole between the ranks and the special
        with pytest.raises(ValueError):
            enc.encode("<|pickle|>")
