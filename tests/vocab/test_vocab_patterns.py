"""The known pre-tokenizer patterns (blockbpe_jax.vocab) and their recognition: spellings
claimed equivalent split random text identically, others are refused."""

from __future__ import annotations

import pytest
import regex
from hypothesis import given, settings
from hypothesis import strategies as st

from blockbpe_jax.vocab import (
    HF_BYTELEVEL_PATTERN,
    KNOWN_PATTERNS,
    known_tiktoken_file_defaults,
    recognise_pattern,
)


# --------------------------------------------------------------------------------------------
# Known patterns and their recognition
# --------------------------------------------------------------------------------------------


def test_known_patterns_match_tiktoken_ext(monkeypatch):
    openai_public = pytest.importorskip("tiktoken_ext.openai_public")
    # The constructors only download ranks; stub that out to read their pattern and specials.
    monkeypatch.setattr(openai_public, "load_tiktoken_bpe", lambda *a, **k: {})
    for ctor, name in [
        ("r50k_base", "r50k"),
        ("p50k_base", "r50k"),
        ("cl100k_base", "cl100k"),
        ("o200k_base", "o200k"),
    ]:
        spec = getattr(openai_public, ctor)()
        assert spec["pat_str"] == KNOWN_PATTERNS[name]
        file_name, pattern, specials = known_tiktoken_file_defaults(f"/x/{ctor}.tiktoken")
        assert (file_name, pattern, specials) == (ctor, spec["pat_str"], spec["special_tokens"])


def test_known_file_defaults_for_unknown_file():
    assert known_tiktoken_file_defaults("some/dir/mine.tiktoken") == ("mine", None, {})


# Spellings that recognise_pattern claims are equivalent to a known pattern, and a few that it
# must refuse. The hypothesis test below checks the claimed equivalences on random text.
EQUIVALENT_SPELLINGS = [
    (HF_BYTELEVEL_PATTERN, "r50k"),
    (r"""'d|'s|'t|'re|'ve|'m|'ll| ?\p{L}++| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s++$|\s+(?!\S)|\s""", "r50k"),
    (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]++[\r\n]*|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
        "cl100k",
    ),
    (
        r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]+[\r\n]*+|\s*[\r\n]++|\s+(?!\S)|\s+""",
        "llama3",
    ),
    (KNOWN_PATTERNS["o200k"].replace(r"\s*[\r\n]+|", r"\s*[\r\n]++|"), "o200k"),
]
NOT_RECOGNISED = [
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s+$|\s+(?!\S)|\s""",  # greedy `\s+$`
    r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s++(?!\S)|\s""",  # possessive lookahead
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",  # r50k is case-sensitive
    r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+?| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",  # lazy
    r"""'s|'t|'re|'ve|'m|'ll| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+""",  # lost 'd
    r"""\w+|\s+""",
    r"""(?s:.+)""",
    "",
]


@pytest.mark.parametrize("pattern, name", EQUIVALENT_SPELLINGS)
def test_equivalent_spellings_are_recognised(pattern, name):
    assert recognise_pattern(pattern) == name


@pytest.mark.parametrize("pattern", NOT_RECOGNISED)
def test_other_spellings_are_not_recognised(pattern):
    assert recognise_pattern(pattern) is None


def test_known_patterns_recognise_themselves():
    for name, pattern in KNOWN_PATTERNS.items():
        assert recognise_pattern(pattern) == name
    assert recognise_pattern(None) is None


def test_llama3_spelling_is_not_cl100k():
    # Why cl100k_hf gets "llama3": trailing whitespace with a newline at the end of the text.
    assert regex.findall(KNOWN_PATTERNS["cl100k"], "x\n ") == ["x", "\n "]
    assert regex.findall(KNOWN_PATTERNS["llama3"], "x\n ") == ["x", "\n", " "]


# Characters that exercise every alternative: letters of both cases (and ſ, which folds to s),
# contractions, digits, punctuation, slash, every kind of whitespace.
_EDGE_ALPHABET = list("aAsStTdDmMlLvVeErR'’ \t\n\r\x0b\u00a0\u20031234٣.,!?/-_ſ中é😀")


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet=_EDGE_ALPHABET, max_size=24))
def test_equivalent_spellings_split_text_identically(text):
    for pattern, name in EQUIVALENT_SPELLINGS:
        assert regex.findall(pattern, text) == regex.findall(KNOWN_PATTERNS[name], text), (pattern, text)
