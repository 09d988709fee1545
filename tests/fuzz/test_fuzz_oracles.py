"""The fuzz tests' oracles themselves (tests/fuzz_oracles.py): the private-use view of invalid
UTF-8, tiktoken's pieces read off an Encoding, both raw-bytes oracles reproducing tiktoken
and HF tokenizers on valid text, and the fuzz campaign's linear tiktoken oracle
(blockbpe_jax.testing.tiktoken_raw_ids: Python's `regex` splits) equal to the one that reads
tiktoken's own split, on invalid UTF-8 with specials."""

from __future__ import annotations

import pytest
from hypothesis import assume, given

from hypothesis import strategies as st

from blockbpe_jax import testing

from fuzz_oracles import NAMES, hf_raw_reference, pua_view, tiktoken_pieces, tiktoken_raw_reference
from helpers import hf_tokenizer, load_tokenizer, specials_of, tiktoken_enc
from strategies import fragment_text, fuzz, raw_bytes

# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


def test_pua_view_examples():
    assert pua_view(b"\xe4\xb8a") == ("\ue0e4\ue0b8a", [0, 1, 2, 3])
    assert pua_view(b"\xed\xa0\x80") == ("\ue0ed\ue0a0\ue080", [0, 1, 2, 3])  # a surrogate: 3 bytes
    assert pua_view("a\U0001f600".encode()) == ("a\U0001f600", [0, 1, 5])
    assert pua_view(b"\xf0\x9f\x98!") == ("\ue0f0\ue09f\ue098!", [0, 1, 2, 3, 4])
    assert pua_view(b"\xc0\xaf\xe0\x80\xaf") == (
        "".join(chr(0xE000 + b) for b in b"\xc0\xaf\xe0\x80\xaf"),
        [0, 1, 2, 3, 4, 5],
    )


def test_tiktoken_pieces_examples():
    pattern = load_tokenizer("cl100k", "tiktoken").vocab.pattern
    text = "I'M  12345\n\n x<|endoftext|>y"
    pieces = tiktoken_pieces(text, pattern, ["<|endoftext|>"])
    spelled = [p if isinstance(p, str) else text[p[0] : p[1]] for p in pieces]
    assert spelled == ["I", "'M", " ", " ", "123", "45", "\n\n", " x", "<|endoftext|>", "y"]


@pytest.mark.parametrize("name", NAMES)
@fuzz(25)
@given(text=fragment_text)
def test_piece_oracle_reproduces_tiktoken_on_valid_text(name, text):
    """On valid UTF-8 the invalid-bytes oracle must be tiktoken itself."""
    assume(len(text) <= 120)
    enc = tiktoken_enc(name, "exact")
    assert tiktoken_raw_reference(enc, text.encode("utf-8")) == enc.encode_ordinary(text)


@pytest.mark.parametrize("name", NAMES)
@fuzz(15)
@given(text=fragment_text)
def test_hf_piece_oracle_reproduces_hf_on_valid_text(name, text):
    assume(len(text) <= 120)
    raw = text.encode("utf-8")
    assert (
        hf_raw_reference(name, raw, "exact") == hf_tokenizer(name).encode(text, add_special_tokens=False).ids
    )


@pytest.mark.parametrize("name", NAMES)
@fuzz(25)
@given(data=st.data())
def test_linear_raw_oracle_equals_tiktokens_own_split(name, data):
    specials = specials_of(name, "tiktoken")[:6]
    raw = data.draw(raw_bytes(specials), label="raw")
    assume(len(pua_view(raw)[0]) <= 120)
    enc = tiktoken_enc(name, "exact")
    assert testing.tiktoken_raw_ids(enc, raw, specials) == tiktoken_raw_reference(enc, raw, specials)
    enc_bytes = tiktoken_enc(name, "bytes")
    assert testing.tiktoken_raw_ids(enc_bytes, raw, specials) == tiktoken_raw_reference(
        enc_bytes, raw, specials
    )


@pytest.mark.parametrize("name", NAMES)
def test_linear_raw_oracle_uses_tiktokens_unicode_version(name):
    """Python's `regex` may know a newer Unicode version than tiktoken (U+1E6FE, a Tai Yo letter
    of Unicode 17, is unassigned for tiktoken 0.14): the linear oracle must still split as
    tiktoken does. A lone continuation byte before it makes the row invalid UTF-8."""
    enc = tiktoken_enc(name, "exact")
    for text in ["!\U0001e6fe\u094b\u0915", "x\U0001e6fe\u034b\u0484\u094b\u0915 \U0001e6c0ab"]:
        assert testing.tiktoken_raw_ids(enc, text.encode("utf-8")) == enc.encode_ordinary(text)
        raw = b"\x8d" + text.encode("utf-8")
        assert testing.tiktoken_raw_ids(enc, raw) == tiktoken_raw_reference(enc, raw, [])
