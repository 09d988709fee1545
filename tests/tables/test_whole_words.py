"""SentencePiece BPE's whole words (ffi/core/char_symbols.h; blockbpe_jax/tables/build.py,
`whole_word_ids`): a segment whose symbols spell a self-encoding piece is that one piece, looked
up in the piece table instead of merged.

Checked against the `sentencepiece` library: the table's words are exactly the pieces that
sentencepiece encodes to themselves as a whole text without the dummy prefix (every piece of
two or more characters of Mistral's v1 and v7 models); ids with the words == sentencepiece on
the shared corpora, on texts made of vocabulary pieces and on raw bytes (hypothesis), and == the
ids with the words merged instead (the char table's whole-word entry off). Constructed models:
a piece that its characters do not merge back into (never in the table), a piece holding `▁`
inside (a joiner: no word starts after it), more joiners than the table holds (no word split:
a segment is the text between specials, looked up whole), and a vocabulary whose token bytes do
not spell its symbols (the rule off; forced on, it gives a wrong id). CPU here; the same on a
GPU (test ids with `gpu`) where one is visible.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.ops import primitive
from blockbpe_jax.tables import build

import families
from helpers import BACKENDS, EDGES, MIXED, SPACES, assert_same, corpus_texts, ours
from strategies import fuzz, raw_bytes, spaces_text, unicode_text

spm = pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402

SPACE = "\u2581"
MODELS = ["mistral-v1-spm", "mistral-v7-spm"]
NORMAL, BYTE = 1, 6  # SentencePiece piece types


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    path = families.require(request.param)
    return bb.Tokenizer.from_file(path), spm.SentencePieceProcessor(model_file=str(path)), path


def without_dummy_prefix(path) -> spm.SentencePieceProcessor:
    """The model with add_dummy_prefix off: a piece's text encodes as one segment of its own."""
    m = model_pb2.ModelProto()
    m.ParseFromString(path.read_bytes())
    m.normalizer_spec.add_dummy_prefix = False
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def word_ids(tables) -> set[int]:
    """The ids of the piece table's whole words (its keys of two or more characters)."""
    rows = tables.piece_table[tables.piece_table[:, 1] >= 0]
    keys = (bytes(tables.token_data[o : o + n]) for o, n in zip(rows[:, 3], rows[:, 2]))
    return {int(i) for i, k in zip(rows[:, 1], keys) if len(k.decode("utf-8")) >= 2}


def test_words_are_the_self_encoding_pieces(model):
    """Every piece of 2+ characters is in the table exactly when sentencepiece encodes its text,
    as a whole text without the dummy prefix, to that one piece."""
    tok, _, path = model
    tables = build.build_vocab_tables(tok.vocab)
    assert tables.char_table[build.CHAR_TABLE_WHOLE_WORDS] == 1
    m = model_pb2.ModelProto()
    m.ParseFromString(path.read_bytes())
    user_defined = [p.piece for p in m.pieces if p.type == p.USER_DEFINED]
    candidates = [
        (i, p.piece)
        for i, p in enumerate(m.pieces)
        if p.type == NORMAL and len(p.piece) >= 2 and not any(u in p.piece for u in user_defined)
    ]
    plain = without_dummy_prefix(path)
    encoded = plain.encode([text for _, text in candidates])
    expected = {i for (i, _), ids in zip(candidates, encoded) if ids == [i]}
    got = word_ids(tables)
    assert got & {i for i, _ in candidates} == expected
    assert got <= {i for i, _ in candidates}
    assert expected


def piece_texts(sp) -> list[str]:
    """Every normal piece's text, `▁` as a space (and, for some, as itself)."""
    texts = []
    for i in range(sp.get_piece_size()):
        if sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i):
            continue
        piece = sp.id_to_piece(i)
        texts.append(piece.replace(SPACE, " ") if i % 7 else piece)
    return texts


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora(model, data_dir, backend):
    tok, sp, _ = model
    texts = corpus_texts(data_dir, 6, seed=57) + MIXED + SPACES + EDGES
    assert_same(tok, texts, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_piece_texts(model, backend):
    """Texts made of the vocabulary's own pieces, each alone and run together (most words hit)."""
    tok, sp, _ = model
    texts = piece_texts(sp)
    rng = np.random.default_rng(3)
    runs = ["".join(rng.choice(texts, size=12)) for _ in range(200)]
    assert_same(tok, texts[::5] + runs, sp.encode, backend)


def test_same_ids_as_merged(model, data_dir):
    """The host encoder with the words looked up == with every word merged (the entry off)."""
    tok, sp, _ = model
    tables = tok.tables(host=True)
    off = np.array(tables.char_table)
    off[build.CHAR_TABLE_WHOLE_WORDS] = 0
    texts = corpus_texts(data_dir, 6, seed=58) + piece_texts(sp)[::3] + MIXED + SPACES + EDGES
    merged = primitive.host_encoder(dataclasses.replace(tables, char_table=off)).encode(texts)
    assert primitive.host_encoder(tables).encode(texts) == merged


@fuzz(40)
@given(texts=st.lists(st.lists(st.integers(0, 31999), min_size=1, max_size=10), min_size=1, max_size=4))
def test_fuzz_pieces(model, texts):
    tok, sp, _ = model
    pieces = piece_texts(sp)
    strings = ["".join(pieces[k % len(pieces)] for k in row) for row in texts]
    assert_same(tok, strings, sp.encode)


@fuzz(40)
@given(texts=st.lists(unicode_text | spaces_text, min_size=1, max_size=6))
def test_fuzz_text(model, texts):
    tok, sp, _ = model
    assert_same(tok, texts, sp.encode)


@fuzz(30)
@given(texts=st.lists(raw_bytes(), min_size=1, max_size=6))
def test_fuzz_bytes(model, texts):
    tok, sp, _ = model
    assert ours(tok, texts) == [sp.encode(t) for t in texts]


# ---------------------------------------------------------------------------------------------
# Constructed models


def spm_model(pieces: list[str]) -> spm.SentencePieceProcessor:
    """A SentencePiece BPE model with byte fallback: <unk>, <s>, </s>, the 256 byte pieces, then
    `pieces` (normal), each scoring above the ones after it; the dummy prefix, spaces as `▁`."""
    m = model_pb2.ModelProto()
    m.trainer_spec.model_type = model_pb2.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    kinds = model_pb2.ModelProto.SentencePiece
    for text, kind in [("<unk>", kinds.UNKNOWN), ("<s>", kinds.CONTROL), ("</s>", kinds.CONTROL)]:
        m.pieces.add(piece=text, score=0.0, type=kind)
    for b in range(256):
        m.pieces.add(piece=f"<0x{b:02X}>", score=0.0, type=kinds.BYTE)
    for k, text in enumerate(pieces):
        m.pieces.add(piece=text, score=-float(k), type=kinds.NORMAL)
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


def texts_over(alphabet: str, rng, count=300, longest=12) -> list[str]:
    return ["".join(rng.choice(list(alphabet), size=rng.integers(0, longest))) for _ in range(count)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_piece_that_does_not_merge_back(backend):
    """`▁abc`'s characters merge to `▁` `a` `bc` (bc outranks ab, no piece is `abc` or `▁a`):
    not in the table, so a word `▁abc` is merged, as sentencepiece does; `▁ab` is there."""
    sp = spm_model([SPACE, "a", "b", "c", "bc", "ab", SPACE + "ab", SPACE + "abc"])
    tok = bb.Tokenizer.from_sentencepiece(sp)
    words = word_ids(build.build_vocab_tables(tok.vocab))
    assert sp.piece_to_id(SPACE + "abc") not in words and sp.piece_to_id(SPACE + "ab") in words
    texts = ["abc", "ab abc", " abc", "abcabc abc", "\u2581abc"] + texts_over(
        "abc \u2581x", np.random.default_rng(1)
    )
    assert_same(tok, texts, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_space_inside_pieces(backend):
    """`a▁b` holds `▁` after `a`: a `▁` after `a` starts no word, and `a▁b` spans two of the
    text's words."""
    sp = spm_model(
        [SPACE, "a", "b", "c", "a" + SPACE, "a" + SPACE + "b", SPACE + "a", "ab", SPACE + "b", "bc"]
    )
    tok = bb.Tokenizer.from_sentencepiece(sp)
    assert tok.vocab.char_level.joiners == (sp.piece_to_id("a"),)
    assert sp.piece_to_id("a" + SPACE + "b") in word_ids(build.build_vocab_tables(tok.vocab))
    texts = ["a b", "ca b", "a bc", " a b "] + texts_over("abc \u2581", np.random.default_rng(2))
    assert_same(tok, texts, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_more_joiners_than_the_table_holds(backend):
    """Nine characters precede `▁` in pieces: no word split, so the segment is the whole text
    (between specials), still looked up whole first."""
    letters = "abcdefghi"
    sp = spm_model(
        [SPACE, *letters]
        + [ch + SPACE for ch in letters]
        + [SPACE + ch for ch in letters]
        + ["a" + SPACE + "b"]
    )
    tok = bb.Tokenizer.from_sentencepiece(sp)
    assert tok.vocab.char_level.word_start_id == -1
    tables = build.build_vocab_tables(tok.vocab)
    assert tables.char_table[build.CHAR_TABLE_WHOLE_WORDS] == 1 and sp.piece_to_id(SPACE + "a") in word_ids(
        tables
    )
    texts = ["a", "b ", "a b", "i"] + texts_over(letters + " \u2581z", np.random.default_rng(3))
    assert_same(tok, texts, sp.encode, backend)


def test_rule_off_where_bytes_do_not_spell_symbols(monkeypatch):
    """A vocabulary whose byte piece <0x63> ('c', no piece here) reads as b"b": a word `▁a` +
    <0x63> spells `▁ab`. The rule is off there (no words in the table); forced on, it would
    give `▁ab` where sentencepiece gives `▁a` <0x63>."""
    sp = spm_model([SPACE, "a", "b", SPACE + "a", "ab", SPACE + "ab"])
    vocab = bb.Tokenizer.from_sentencepiece(sp).vocab
    token_bytes = list(vocab.token_bytes)
    token_bytes[vocab.byte_ids[ord("c")]] = b"b"
    edited = dataclasses.replace(vocab, token_bytes=tuple(token_bytes))
    assert not build.bytes_spell_symbols(edited)
    tables = build.build_vocab_tables(edited)
    assert tables.char_table[build.CHAR_TABLE_WHOLE_WORDS] == 0 and not word_ids(tables)
    assert ours(bb.Tokenizer(edited), ["ac"]) == [sp.encode("ac")]
    monkeypatch.setattr(build, "bytes_spell_symbols", lambda vocab: True)
    assert ours(bb.Tokenizer(edited), ["ac"]) == [[sp.piece_to_id(SPACE + "ab")]] != [sp.encode("ac")]
