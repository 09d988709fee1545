"""SentencePiece BPE's word bounds (blockbpe_jax/tables/word_bounds.py, ffi/core/char_symbols.h
"Word bounds"): byte-fallback pieces and isolated characters cut the text into words where no
merge can cross. Differential: our ids against sentencepiece's on small models whose texts are
full of bounds, with the bounds on and forced off, and the load-time rules' own conditions on
every family file present.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.tables import build, word_bounds

import families
from helpers import BACKENDS, assert_same, ours
from synthetic import spm_model

pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")

SPACE = "\u2581"
# '1' and '\t' are isolated (every piece holding them is a run of them); '2' is not ("2b"); '\n'
# and '\x01' have no piece (byte pieces).
PIECES = [SPACE, "a", "b", "1", "2", "\t", "ab", SPACE + "a", "11", "2b", "\t\t", SPACE + "ab", "ba", "111"]
ALPHABET = "ab12 \t\n\x01\u2581\u00e9"


@pytest.fixture(scope="module")
def model():
    sp = spm_model(PIECES)
    return sp, bb.Tokenizer.from_sentencepiece(sp)


def texts_over(alphabet: str, seed: int, count=300, longest=14) -> list[str]:
    rng = np.random.default_rng(seed)
    return ["".join(rng.choice(list(alphabet), size=rng.integers(0, longest))) for _ in range(count)]


EXAMPLES = [
    "\nab",
    "\n\nab\n",
    "1\n2",
    "a1b",
    "111112",
    "12 1\t\ta2b",
    "\t\tab\t1",
    "\x01\x01a",
    " \nx",
    "\u2581\n1",
    "\u00e9\n\u00e9",
    "ab" * 40 + "\n" + "ba" * 40,
]


def test_rules_on_the_model(model):
    sp, tok = model
    vocab = tok.vocab
    assert word_bounds.bounds_base(vocab) == vocab.byte_ids[0] == sp.piece_to_id("<0x00>")
    assert sorted(word_bounds.isolated_ids(vocab)) == sorted(sp.piece_to_id(x) for x in ("1", "\t"))
    table = build.build_vocab_tables(vocab).char_table
    assert table[build.CHAR_TABLE_BOUNDS] == vocab.byte_ids[0]
    assert set(table[build.CHAR_TABLE_ISOLATED : build.CHAR_TABLE_HEADER].tolist()) - {-1} == set(
        word_bounds.isolated_ids(vocab)
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("bounds", ["on", "bytes_off", "isolated_off"])
def test_same_ids_with_and_without_bounds(model, monkeypatch, backend, bounds):
    """The bounds change how the text is cut, never the ids."""
    sp, tok = model
    if bounds == "bytes_off":
        monkeypatch.setattr(word_bounds, "bounds_base", lambda vocab: -1)
    if bounds == "isolated_off":
        monkeypatch.setattr(word_bounds, "isolated_ids", lambda vocab: ())
    tok = bb.Tokenizer.from_sentencepiece(sp)  # (tables built under the patch)
    assert_same(tok, EXAMPLES + texts_over(ALPHABET, 7), sp.encode, backend)


@given(st.text(alphabet=st.sampled_from(ALPHABET), max_size=60))
@settings(max_examples=150, deadline=None)
def test_generated_texts(model, text):
    sp, tok = model
    assert_same(tok, [text], sp.encode)


def test_a_wrong_rule_is_caught(model, monkeypatch):
    """'2' is no isolated character ("2b" is a piece): listed as one, the text "a2b" is cut
    between its characters and encodes wrong, which the comparisons above would catch."""
    sp, _ = model
    monkeypatch.setattr(word_bounds, "isolated_ids", lambda vocab: (sp.piece_to_id("2"),))
    assert ours(bb.Tokenizer.from_sentencepiece(sp), ["a2b"]) != [sp.encode("a2b")]


def test_bounds_off_where_a_merge_holds_a_byte_piece(model):
    _, tok = model
    vocab = tok.vocab
    a, nl = vocab.char_level.char_ids["a"], vocab.byte_ids[ord("\n")]
    merges = dict(vocab.merges)
    merges[(a, nl)] = (len(merges), a)
    assert word_bounds.bounds_base(dataclasses.replace(vocab, merges=merges)) == -1
    swapped = list(vocab.byte_ids)
    swapped[1], swapped[2] = swapped[2], swapped[1]
    assert word_bounds.bounds_base(dataclasses.replace(vocab, byte_ids=tuple(swapped))) == -1


def test_isolated_off_where_a_piece_mixes_the_character(model):
    """A piece "1a" makes '1' no isolated character; a second character sharing '\t''s piece
    makes '\t' none."""
    _, tok = model
    vocab = tok.vocab
    token_bytes = list(vocab.token_bytes)
    token_bytes[vocab.token_bytes.index(b"11")] = b"1a"
    mixed = dataclasses.replace(vocab, token_bytes=tuple(token_bytes))
    ones = vocab.char_level.char_ids["1"]
    assert ones in word_bounds.isolated_ids(vocab) and ones not in word_bounds.isolated_ids(mixed)
    tab = vocab.char_level.char_ids["\t"]
    shared = dataclasses.replace(
        vocab,
        char_level=dataclasses.replace(
            vocab.char_level, char_ids={**vocab.char_level.char_ids, "\u00e7": tab}
        ),
    )
    assert tab not in word_bounds.isolated_ids(shared)


SP_FAMILIES = ["mistral-v1-spm", "mistral-v7-spm", "llama2-gguf", "gemma3-gguf", "gemma4-gguf"]


@pytest.mark.parametrize("key", SP_FAMILIES)
def test_families(key):
    """Every SentencePiece-style family has the byte bounds on, and each isolated character's
    pieces (every token, merged or not, holding it) are runs of it."""
    families.require(key)
    tok, why = families.tokenizer(key)
    assert tok is not None, why
    vocab = tok.vocab
    assert word_bounds.bounds_base(vocab) == vocab.byte_ids[0] >= 0
    specials = set(vocab.special_tokens.values())
    for i in word_bounds.isolated_ids(vocab):
        (code,) = vocab.token_bytes[i]
        holding = [
            b
            for j, b in enumerate(vocab.token_bytes)
            if b and code in b and j not in specials and len(set(b)) > 1
        ]
        assert holding == [], f"{key}: {chr(code)!r} is in {holding[:3]}"
    if key == "gemma4-gguf":
        ids = word_bounds.isolated_ids(vocab)
        assert {vocab.char_level.char_ids[ch] for ch in "\n\t"} <= set(ids)
    if key == "llama2-gguf":
        assert {vocab.char_level.char_ids[ch] for ch in "0123456789"} <= set(word_bounds.isolated_ids(vocab))
