"""Differential fuzzing of the CPU encode path on valid text against tiktoken and HF tokenizers.

Every vocabulary (r50k, cl100k, o200k, Llama 3) is fuzzed twice: loaded from its `.tiktoken`
file (oracle: tiktoken with the real pattern) and from its `tokenizer.json` (oracle: HF
`tokenizers` with the file's own pipeline). Each hypothesis example is checked on its own, so a
failure shrinks to a minimal string. Inputs: random Unicode (every category except surrogates,
Cs) and mixed fragments; long runs of whitespace (every Unicode White_Space character and some
near misses), digits (ASCII, other Nd, No, Nl) and apostrophes (thousands of them, contraction
chains); strings made only of special tokens, with all / none / a subset of the specials
allowed; batches holding empty strings (counts 0, rows all pad_id, other rows unaffected).

The fuzz tests together (tests/fuzz/test_fuzz_*.py) are bounded for CI (about 2 minutes on 2 cores);
BLOCKBPE_FUZZ_EXAMPLES=N runs N examples per hypothesis test (tests/strategies.py).
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fuzz_oracles import VOCABS, check_row, check_text, encode_cpu, reference
from helpers import hf_tokenizer, load_tokenizer, specials_of
from strategies import WORDS, fragment_text, fuzz, runs_text, unicode_text

# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(120)
@given(text=unicode_text)
def test_random_unicode(name, fmt, text):
    check_text(name, fmt, text)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(30)
@given(text=runs_text)
def test_long_whitespace_digit_apostrophe_runs(name, fmt, text):
    check_text(name, fmt, text)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(12)
@given(
    prefix=st.sampled_from(WORDS + [""]),
    k=st.integers(1000, 6000),
    unit=st.sampled_from(["'", "'s", "'ll", "''S", "'\u017f", "\u2019s"]),
    suffix=st.sampled_from(["", "s", "S", "ll", "ve", "re", "t", "x", " ", "\n", "1", "'"]),
)
def test_thousands_of_apostrophes(name, fmt, prefix, k, unit, suffix):
    check_text(name, fmt, prefix + unit * k + suffix)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(30)
@given(data=st.data())
def test_strings_of_only_special_tokens(name, fmt, data):
    specials = specials_of(name, fmt)
    seq = data.draw(st.lists(st.sampled_from(specials), max_size=40), label="specials")
    text = "".join(seq)
    tok = load_tokenizer(name, fmt)
    ids, counts = encode_cpu(tok, [text], allowed="all")
    expected = [tok.vocab.special_tokens[s] for s in seq]  # each special is its one id
    check_row(ids, counts, 0, expected, text)
    if fmt == "json":
        assert hf_tokenizer(name).encode(text, add_special_tokens=False).ids == expected
        return
    assert reference(name, fmt, text, "all") == expected
    # None allowed: the specials' text is ordinary text.
    check_text(name, fmt, text, allowed="none")
    subset = data.draw(st.sets(st.sampled_from(specials), max_size=4), label="allowed")
    ids, counts = encode_cpu(tok, [text], allowed=subset)
    check_row(ids, counts, 0, reference(name, fmt, text, subset), text)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(25)
@given(
    texts=st.lists(st.sampled_from(["", "", " ", "a", "\n"]) | fragment_text, min_size=1, max_size=8),
    pad_id=st.integers(-(2**31), 2**31 - 1),
)
def test_batches_with_empty_strings(name, fmt, texts, pad_id):
    tok = load_tokenizer(name, fmt)
    ids, counts = encode_cpu(tok, texts, allowed="all", pad_id=pad_id)
    for k, text in enumerate(texts):
        check_row(ids, counts, k, reference(name, fmt, text, "all"), text, pad_id=pad_id)
        if not text:
            assert counts[k] == 0 and (ids[k] == pad_id).all()
