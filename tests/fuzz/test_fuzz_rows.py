"""Differential fuzzing of the CPU encode path at the row limits: strings of exactly L bytes
(garbage after each row's length must be ignored) and of L+1 bytes (pack_strings / encode /
encode_batch must raise), and max_tokens smaller than the result (ids are the prefix, counts the
full count). Oracles: tests/fuzz_oracles.py.
"""

from __future__ import annotations

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

from fuzz_oracles import VOCABS, check_row, encode_cpu, reference
from helpers import CPU, is_utf8, load_tokenizer
from strategies import fuzz, runs_text, unicode_text

# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(25)
@given(
    length=st.sampled_from([1, 2, 3, 4, 7, 64, 255]),
    text=unicode_text | runs_text,
    filler=st.sampled_from(["a", " ", "1", "'", "\n"]),
    garbage=st.binary(min_size=1, max_size=8),
)
def test_exactly_L_bytes_and_one_more(name, fmt, length, text, filler, garbage):
    """A string of exactly L bytes fills its row (the next row starts right after it; bytes
    after a shorter row's length are garbage and must be ignored); L+1 bytes must raise."""
    tok = load_tokenizer(name, fmt)
    # Cut to at most L bytes on a character boundary, then pad at the FRONT, so that the
    # string ends exactly at the end of the row with whatever the text ends with.
    raw = text.encode("utf-8")
    raw = raw[max(0, len(raw) - length) :]
    while raw and (raw[0] & 0xC0) == 0x80:
        raw = raw[1:]
    exact = (filler.encode() * length)[: length - len(raw)] + raw
    assert len(exact) == length
    exact_text = exact.decode("utf-8")
    short = exact[: length // 2]
    while short and not is_utf8(short):
        short = short[:-1]
    data, lengths = bb.pack_strings([exact, short, exact], max_len=length)
    assert data.shape == (3, length) and lengths.tolist() == [length, len(short), length]
    data = data.copy()
    data[1, len(short) :] = np.frombuffer((garbage * length)[: length - len(short)], np.uint8)
    allowed = "all"
    out = bb.encode(data, lengths, tok, max_tokens=length, allowed_special=allowed)
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    for k, t in enumerate([exact_text, short.decode("utf-8"), exact_text]):
        check_row(ids, counts, k, reference(name, fmt, t, allowed), t)
    # One byte more than the row: every entry point refuses it, naming the problem.
    longer = exact + filler.encode()
    with pytest.raises(ValueError, match=f"string 1 has {length + 1} bytes, more than max_len={length}"):
        bb.pack_strings([exact, longer], max_len=length)
    with pytest.raises(ValueError, match=f"more than max_len={length}"):
        tok.encode_batch([longer], max_len=length, device=CPU)
    bad_lengths = lengths.copy()
    bad_lengths[2] = length + 1
    with pytest.raises(ValueError, match=rf"lengths\[2\] = {length + 1} is outside \[0, {length}\]"):
        bb.encode(data, bad_lengths, tok, max_tokens=length)
    # From the handler: JaxRuntimeError, or ValueError once jax's C++ fast path serves the call
    # (after a successful call with the same signature; see test_bad_inputs_encode.py).
    with pytest.raises(
        (jax.errors.JaxRuntimeError, ValueError),
        match=rf"INVALID_ARGUMENT.*lengths\[2\] = {length + 1} is outside \[0, {length}\]",
    ):
        bb.encode(
            jax.device_put(data, CPU), jax.device_put(bad_lengths, CPU), tok, max_tokens=length
        ).ids.block_until_ready()


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(30)
@given(
    text=unicode_text | runs_text, max_tokens=st.sampled_from([1, 2, 3, 5, 16]), pad_id=st.integers(-1, 2**20)
)
def test_max_tokens_smaller_than_the_result(name, fmt, text, max_tokens, pad_id):
    tok = load_tokenizer(name, fmt)
    allowed = "all" if fmt == "json" else "none"
    ref = reference(name, fmt, text, allowed)
    ids, counts = encode_cpu(tok, [text], allowed=allowed, max_tokens=max_tokens, pad_id=pad_id)
    assert ids.shape == (1, max_tokens)
    check_row(ids, counts, 0, ref, text, pad_id=pad_id)
    if len(ref) > max_tokens:
        assert counts[0] > ids.shape[1]  # truncation is visible
