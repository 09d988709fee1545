"""Exactness of the pre-tokenizer (ffi/pretok/) against tiktoken and HF tokenizers.

Corpora and hand-picked cases. The C++ header is compiled into a tiny shared library
(tests/cpp/pretok_shim.cc, g++; tests/pretok_shim.py) and called through ctypes
with the tables blockbpe_jax/pretok compiles from each pattern. For every
pattern, pretokenize_sequential and pretokenize_chunked (chunk sizes 1, 3, 7, 16, 64) and the
compiler's Python reference must give exactly the piece starts of the oracles:

* piece oracle: Oniguruma (HF tokenizers' regex engine) running the tiktoken pattern through
  `pre_tokenizers.Split(..., "isolated")`. Two spellings differ between the engines and are
  translated: Rust's `$` (end of text) is Oniguruma's `\\z`, and Rust's possessive `{1,3}+` is
  plain `{1,3}` (Oniguruma reads `{1,3}+` as "one or more of {1,3}"; without anything after
  it, possessive and greedy match the same);
* tiktoken (Rust regex, the real oracle): BPE of each of our pieces, concatenated, equals
  `encode_ordinary` (and `encode` with specials allowed);
* HF tokenizer.json: the file's own pre-tokenizer gives our pieces (gpt2 -> r50k's pattern,
  cl100k_hf -> Llama 3's (test_cl100k_hf_is_llama3_regex), o200k_hf -> o200k, llama3 -> llama3).

Environment: BLOCKBPE_DATA (shared data dir, default <repo>/../shared/data); BLOCKBPE_FULL=1
runs every corpus whole and more generated examples (slow).
"""

from __future__ import annotations

import random

import pytest

from blockbpe_jax import testing

from helpers import FULL, hf_tokenizer
from pretok_shim import (
    CHUNKS,
    PATTERN_IDS,
    SPECIAL,
    check_hf_pieces,
    check_text,
    check_tiktoken_ids,
    hf_for,
    pieces_to_flags,
    tiktoken_enc,
)


# ---------------------------------------------------------------------------------------------
# Corpora


CORPORA = [
    "code_python_stdlib.py.txt.gz",
    "gsm8k_test.jsonl",
    "gsm8k_train.jsonl.gz",
    "war_and_peace_en.txt",
    "wikitext2_test.txt.gz",
]


def utf8_cut(data: bytes, i: int) -> int:
    while 0 < i < len(data) and (data[i] & 0xC0) == 0x80:
        i -= 1
    return i


def excerpts(data: bytes, count: int, seed: int):
    """`count` excerpts of 1..8192 bytes (log-uniform lengths) cut at UTF-8 boundaries."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = int(round(2 ** rng.uniform(0, 13)))
        start = utf8_cut(data, rng.randrange(max(1, len(data) - length)))
        end = utf8_cut(data, min(len(data), start + length))
        if end > start:
            out.append(data[start:end].decode("utf-8"))
    return out


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_corpus_excerpts(shim, data_dir, pattern, corpus):
    path = data_dir / "corpus" / corpus
    if not path.exists():
        pytest.skip(f"{corpus} not in {data_dir / 'corpus'}")
    data = testing.read_corpus(path)
    texts = excerpts(data, 400 if FULL else 30, seed=pattern * 1000 + CORPORA.index(corpus))
    if FULL:  # the whole corpus, in consecutive 8 KiB excerpts
        i = 0
        while i < len(data):
            j = utf8_cut(data, min(len(data), i + 8192))
            texts.append(data[i:j].decode("utf-8"))
            i = j
    enc = tiktoken_enc(pattern)
    hf = hf_for(pattern)
    for k, text in enumerate(texts):
        # long excerpts get fewer chunkings, the short ones all of them
        flags = check_text(shim, pattern, text, CHUNKS if len(text) < 2048 or FULL else (7, 64))
        if FULL or k % 3 == 0:
            check_tiktoken_ids(enc, text, flags)
            for tok in hf:
                check_hf_pieces(tok, text, flags)


def test_every_corpus_present(data_dir):
    names = {p.name for p in testing.corpus_paths(data_dir)}
    missing = set(CORPORA) - names
    extra = names - set(CORPORA)
    assert not missing, f"corpora missing: {missing}"
    assert not extra, f"new corpora: add them to CORPORA: {extra}"


# ---------------------------------------------------------------------------------------------
# Hand-picked cases: each alternative, its lookahead, and the chunk boundaries inside them.

CASES = [
    "Hello world",
    "it's I'LL don't 'sa 'S \u017f '\u017f 'Ll 'lL ''s ?'s '' x'",
    "DON'T Don'T dOn'T",
    "a  b\n\n  c  \n",
    "x\n  ",
    "x\n",
    "  ",
    " ",
    "\n",
    "a",
    "'",
    "'l",
    "'ll",
    "'rE",
    "'v",
    "'ver",
    "123456 7 89 \u0663\u0664\u0665\u0666 \u00b2\u00b3\u00b9\u00bc x1y22z333w4444",
    "\u4e2dAB's \u4e2dA ABc AB\u4e2dCD \u00e9 e\u0301 \u01c5x \u01c5 x\u01c5 \u02b0\u02b0A",
    "!!a !a ?'s '' ''s",
    "hello\r\n\r\nworld //\n/ x !\n/\n/ !/\r\n",
    "\u0301a \u0301AB x\u0301 \u0301\u0301",
    "a\tb \t\u3000c\u00a0d \u2028e\u2029 \u0085f \u000b\u000cg",
    "  5\n 'll",
    "$%^ &* ",
    "\U0001f600 \U0001f44d\U0001f3fd \U0001f468\u200d\U0001f469\u200d\U0001f467 a\ufe0f",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947",
    " \n \n  x",
    "\t\t\n",
    " \t x",
    "end  \t",
    "a<|endoftext|>b",
    "<|endoftext|>",
    "  <|endoftext|>  ",
    "x\n  <|endoftext|>\n  y",
    "it<|endoftext|>'s",
    "\u4e2d<|endoftext|>AB's",
]


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_cases(shim, data_dir, pattern):
    enc = tiktoken_enc(pattern)
    hf = hf_for(pattern)
    for text in CASES:
        flags = check_text(shim, pattern, text, range(1, 12))
        check_tiktoken_ids(enc, text, flags)
        if SPECIAL not in text:  # (pre_tokenize_str does not split added tokens)
            for tok in hf:
                check_hf_pieces(tok, text, flags)


def test_cl100k_hf_is_llama3_regex(shim, data_dir):
    """cl100k_hf's tokenizer.json uses the Llama-3 regex: its pieces differ from tiktoken's
    cl100k on a whitespace run with a newline at the end of the text (see ffi/pretok/automata.h). With
    the cl100k vocabulary the ids happen to agree (no token has spaces after a newline)."""
    tok = hf_tokenizer("cl100k")
    enc = tiktoken_enc(2)
    for text in ["x\n  ", "x \n\t", "a\r\n \u3000"]:
        hf = pieces_to_flags(tok.pre_tokenizer.pre_tokenize_str(text), text, len(text.encode()))
        assert hf.tolist() == shim.flags(4, text.encode()).tolist()
        assert hf.tolist() != shim.flags(2, text.encode()).tolist()
        check_tiktoken_ids(enc, text, shim.flags(2, text.encode()))
        assert enc.encode_ordinary(text) == tok.encode(text, add_special_tokens=False).ids
