"""tiktoken-format tokenizers with their own regex: the pattern of each family on a shared rank
file, against tiktoken with the same pattern and ranks."""

from __future__ import annotations

import pytest
from hypothesis import given

import blockbpe_jax as bb
from blockbpe_jax import testing

from helpers import BACKENDS, FULL, MIXED, assert_same, corpus_texts
from strategies import family_texts, fuzz

QWEN2 = testing.QWEN2_PATTERN


# ---------------------------------------------------------------------------------------------
# tiktoken-format tokenizers with their own regex (item 5): the pattern of each family on a
# shared rank file, against tiktoken with the same pattern and ranks. Kimi K2 uses class
# intersections and the Han script; Qwen2 single digits; Tekken digits and [\r\n/]*.

TIKTOKEN_PATTERNS = {
    "kimi_k2": "|".join(
        [
            r"[\p{Han}]+",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]+[\p{Ll}\p{Lm}\p{Lo}\p{M}&&[^\p{Han}]]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?",
            r"\p{N}{1,3}",
            r" ?[^\s\p{L}\p{N}]+[\r\n]*",
            r"\s*[\r\n]+",
            r"\s+(?!\S)",
            r"\s+",
        ]
    ),
    "qwen2": QWEN2,
    "tekken": (
        r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}"
        r"\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+"
        r"[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
    ),
}


@pytest.fixture(scope="module", params=list(TIKTOKEN_PATTERNS))
def pattern_family(request, data_dir):
    path = data_dir / "vocab" / "tiktoken" / "o200k_base.tiktoken"
    if not path.exists():
        pytest.skip(f"{path} not found")
    pattern = TIKTOKEN_PATTERNS[request.param]
    tok = bb.Tokenizer.from_file(path, name=request.param, pattern=pattern, special_tokens={})
    enc = testing.tiktoken_oracle("o200k", tok, pattern)
    return tok, enc.encode_ordinary


@pytest.mark.parametrize("backend", BACKENDS)
def test_tiktoken_patterns(pattern_family, data_dir, backend):
    tok, reference = pattern_family
    assert_same(tok, corpus_texts(data_dir, 20 if FULL else 4, seed=14) + MIXED, reference, backend)


@fuzz(30)
@given(texts=family_texts())
def test_fuzz_tiktoken_patterns(pattern_family, texts):
    tok, reference = pattern_family
    assert_same(tok, texts, reference)
