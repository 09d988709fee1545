"""Differential fuzzing of the CPU encode path on invalid UTF-8: in exact mode against the
raw-bytes oracles (tests/fuzz_oracles.py has the policy), in bytes mode against tiktoken with
pattern `(?s:.+)` (and HF BPE for the tokenizer.json vocabularies) on the raw bytes between
special tokens.
"""

from __future__ import annotations

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from fuzz_oracles import VOCABS, check_row, encode_cpu, hf_raw_reference, pua_view, tiktoken_raw_reference
from helpers import load_tokenizer, specials_of, tiktoken_enc
from strategies import fuzz, raw_bytes

# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


def draw_invalid_utf8(name, fmt, data):
    """(the first 6 specials, raw bytes drawn with them, the tokenizer); at most 160 chars."""
    specials = specials_of(name, fmt)[:6]
    raw = data.draw(raw_bytes(specials), label="raw")
    assume(len(pua_view(raw)[0]) <= 160)
    return specials, raw, load_tokenizer(name, fmt)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(60)
@given(data=st.data())
def test_invalid_utf8_exact_mode(name, fmt, data):
    specials, raw, tok = draw_invalid_utf8(name, fmt, data)
    if fmt == "json":
        ref = hf_raw_reference(name, raw, "exact")
    else:
        ref = tiktoken_raw_reference(tiktoken_enc(name, "exact"), raw, specials)
    ids, counts = encode_cpu(tok, [raw], allowed="all" if fmt == "json" else set(specials))
    check_row(ids, counts, 0, ref, raw)
    # Decoding gives the raw bytes back, invalid ones included.
    assert tok.decode_bytes(ids, counts) == [raw]


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(40)
@given(data=st.data())
def test_invalid_utf8_bytes_mode(name, fmt, data):
    specials, raw, tok = draw_invalid_utf8(name, fmt, data)
    # tokenizer.json vocabularies: every added token is always recognised (HF's rule).
    allowed, split_on = (set(specials), specials) if fmt == "tiktoken" else ("all", specials_of(name, fmt))
    ids, counts = encode_cpu(tok, [raw], allowed=allowed, mode="bytes")
    ref = tiktoken_raw_reference(tiktoken_enc(name, "bytes"), raw, split_on)
    check_row(ids, counts, 0, ref, raw)
    if fmt == "json":  # and HF's own BPE of each span between added tokens
        check_row(ids, counts, 0, hf_raw_reference(name, raw, "bytes"), raw)
