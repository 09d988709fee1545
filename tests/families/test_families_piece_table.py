"""tokenizer.json vocabularies without the whole-piece rule (HF tokenizers' BPE, no
`ignore_merges`) look every piece up in their piece table, which holds only the tokens the
merges make from their own bytes (blockbpe_jax/tables/build.py, `whole_piece_ids`): ids ==
HF tokenizers on the shared corpora and hypothesis text, on every backend (on a GPU, run with
BLOCKBPE_KERNEL=piece too: scripts/gpu_check.sh piece_test).

Where a token is not what its own bytes merge into, a table holding every token would give
that token and HF would not: Llama 3's tokenizer.json with `ignore_merges` turned off (588 such
tokens, Vietnamese and Czech words among them) and a small constructed vocabulary. Each test
checks first that its texts reach such a token, so it fails if the table held every token.
The shared GPT-2, cl100k and o200k ports (every token self-encoding) are checked by
test_exact_mode.py, whose tokenizer.json cases now take the table too.
"""

from __future__ import annotations

import functools
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.vocab import bytes_to_unicode
from blockbpe_jax.vocab.hf_json import vocab_from_tokenizer_json

from helpers import BACKENDS, FULL, MIXED, assert_same, corpus_texts, ours
from strategies import family_texts, fuzz
from synthetic import BYTE_LEVEL_REGEX, bpe_json_doc

# Llama 3 tokens that its merges do not make from their bytes, in text.
NOT_SELF_ENCODING_TEXT = [
    "Tôi có nhiều việc phải làm, hợp đồng này.",
    "Pan jeho bratr řekl, že jeho dům je tam.",
    " việc việc  nhiều\n hợp",
]

NOT_SELF_ENCODING_WORDS = [" việc", " nhiều", " hợp", " jeho", "\n", "  ", " x"]


@functools.lru_cache(maxsize=None)
def _llama3_merges_only_json(path) -> str:
    doc = json.loads(path.read_bytes())
    assert doc["model"]["ignore_merges"] is True
    doc["model"]["ignore_merges"] = False
    return json.dumps(doc)


@pytest.fixture(scope="module")
def llama3_merges_only(data_dir):
    """(ours, HF's, ours with the whole-piece rule) for Llama 3's tokenizer.json without
    ignore_merges."""
    tokenizers = pytest.importorskip("tokenizers")
    path = data_dir / "vocab" / "llama3" / "tokenizer.json"
    if not path.is_file():
        pytest.skip(f"vocabulary file absent from the shared data: {path}")
    text = _llama3_merges_only_json(path)
    hf = tokenizers.Tokenizer.from_str(text)
    tok = bb.Tokenizer(vocab_from_tokenizer_json(json.loads(text), path))
    with_rule = bb.Tokenizer.from_file(path)
    assert not tok.vocab.whole_piece_shortcut and with_rule.vocab.whole_piece_shortcut
    return tok, hf, with_rule


def _reference(hf):
    return lambda text: hf.encode(text, add_special_tokens=False).ids


def test_llama3_texts_reach_tokens_that_are_not_self_encoding(llama3_merges_only):
    """The texts below hold pieces that are tokens the merges do not make: the whole-piece
    rule gives other ids there (a table of every token would fail the tests below)."""
    tok, hf, with_rule = llama3_merges_only
    assert tok.max_piece_len > 0  # (the table is consulted)
    for text in NOT_SELF_ENCODING_TEXT:
        assert ours(with_rule, [text], backend=("cpu", 256)) != [_reference(hf)(text)], text


@pytest.mark.parametrize("backend", BACKENDS)
def test_llama3_merges_only_corpora(llama3_merges_only, data_dir, backend):
    tok, hf, _ = llama3_merges_only
    texts = corpus_texts(data_dir, 60 if FULL else 12, seed=31) + MIXED + NOT_SELF_ENCODING_TEXT
    assert_same(tok, texts, _reference(hf), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_llama3_merges_only_fuzz(llama3_merges_only, backend):
    tok, hf, _ = llama3_merges_only

    words = st.lists(st.sampled_from(NOT_SELF_ENCODING_WORDS), max_size=4).map("".join)

    @given(family_texts(), words)
    @fuzz(40)
    def check(texts, tail):
        assert_same(tok, [t + tail for t in texts], _reference(hf), backend)

    check()


# A small vocabulary: "abc" (258) is made by ("ab", "c"), but its bytes merge ("b", "c") first
# and stop at [a, bc]; " abc" (260, spelled "Ġabc") likewise stops at [" a", bc]; "ca" (259) no
# merge makes.
SMALL_TOKENS = ["bc", "ab", "abc", "ca", "Ġabc", "Ġa", "Ġab"]
SMALL_MERGES = ["b c", "a b", "ab c", "Ġ a", "Ġ ab", "Ġab c"]


@pytest.fixture(scope="module")
def small():
    """(ours, HF's, ours with the whole-piece rule) for the small vocabulary."""
    tokenizers = pytest.importorskip("tokenizers")
    u = bytes_to_unicode()
    vocab = {u[b]: b for b in range(256)} | {t: 256 + k for k, t in enumerate(SMALL_TOKENS)}
    merges_only, with_rule = (
        bpe_json_doc(vocab, SMALL_MERGES, BYTE_LEVEL_REGEX, ignore_merges=rule) for rule in (False, True)
    )
    hf = tokenizers.Tokenizer.from_str(json.dumps(merges_only))
    return (
        bb.Tokenizer(vocab_from_tokenizer_json(merges_only, "small.json")),
        hf,
        bb.Tokenizer(vocab_from_tokenizer_json(with_rule, "small.json")),
    )


SMALL_TEXTS = ["abc", " abc", "abc abc cab ca bca", "xabc abcabc  abc", "ab c bc a b c"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_vocab(small, backend):
    tok, hf, with_rule = small
    hf_ids = [_reference(hf)(t) for t in SMALL_TEXTS]
    # (what the whole-piece rule would give: "abc" -> 258, " abc" -> 260)
    assert hf_ids[:2] == [[ord("a"), 256], [261, 256]]
    assert ours(with_rule, SMALL_TEXTS[:2], backend=backend) == [[258], [260]]
    assert ours(tok, SMALL_TEXTS, backend=backend) == hf_ids


@pytest.mark.parametrize("backend", BACKENDS)
def test_small_vocab_fuzz(small, backend):
    tok, hf, _ = small

    @given(st.lists(st.text(alphabet="abc \n", max_size=40), min_size=1, max_size=8))
    @fuzz(100)
    def check(texts):
        assert ours(tok, texts, backend=backend) == [_reference(hf)(t) for t in texts]

    check()
