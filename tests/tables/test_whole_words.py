"""SentencePiece BPE's whole words (ffi/core/char_symbols.h; blockbpe_jax/tables/whole_words.py):
a segment whose symbols spell a self-encoding piece is that one piece, looked up in the piece
table instead of merged.

Checked against the `sentencepiece` library: the table's words are exactly the pieces that
sentencepiece encodes to themselves as a whole text without the dummy prefix (every piece of
two or more characters of Mistral v1 and v7, Llama 2 and Gemma 3); ids with the words == sentencepiece on
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
from blockbpe_jax.tables import build, probe, whole_words, word_bounds

import families
from helpers import BACKENDS, EDGES, MIXED, SPACES, assert_same, corpus_texts, ours
from strategies import fuzz, raw_bytes, spaces_text, unicode_text
from synthetic import spm_model

spm = pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402

SPACE = "\u2581"
# Mistral's `.model` files and llama.cpp's GGUFs against sentencepiece on the same pieces
# (families.spm_from_gguf, with llama.cpp's dummy-prefix flag; Gemma 3: `>` joins `▁`); Gemma 4
# (`▁` and `>` join) against HF tokenizers (families.hf_bpe_from_gguf), its added tokens matched.
MODELS = ["mistral-v1-spm", "mistral-v7-spm", "llama2-gguf", "gemma3-gguf", "gemma4-gguf"]
NORMAL, CONTROL, USER_DEFINED = 1, 3, 4  # SentencePiece and GGUF piece types


@dataclasses.dataclass
class Family:
    tok: bb.Tokenizer
    encode: object  # text -> the reference's ids
    raw: object  # bytes -> the reference's ids, each byte outside valid UTF-8 one U+FFFD
    plain: object  # list of texts -> the reference's ids, each text one segment (no dummy prefix)
    pieces: list  # (id, text) of every normal piece of 2+ characters holding no special's text
    allowed: str  # the specials the reference matches in text


def normal_pieces(texts, types) -> list[tuple[int, str]]:
    specials = [t for t, k in zip(texts, types) if k in (CONTROL, USER_DEFINED)]
    return [
        (i, t)
        for i, (t, k) in enumerate(zip(texts, types))
        if k == NORMAL and len(t) >= 2 and not any(u in t for u in specials)
    ]


def spm_family(tok, proto: bytes) -> Family:
    m = model_pb2.ModelProto()
    m.ParseFromString(proto)
    pieces = normal_pieces([p.piece for p in m.pieces], [p.type for p in m.pieces])
    m.normalizer_spec.add_dummy_prefix = False
    sp = spm.SentencePieceProcessor(model_proto=proto)
    plain = spm.SentencePieceProcessor(model_proto=m.SerializeToString())
    return Family(tok, sp.encode, sp.encode, plain.encode, pieces, "none")


def per_byte_text(raw: bytes) -> str:
    """The text of `raw` with each byte outside valid UTF-8 one U+FFFD (as sentencepiece reads it)."""
    escaped = raw.decode("utf-8", "surrogateescape")
    return "".join("\ufffd" if "\udc80" <= ch <= "\udcff" else ch for ch in escaped)


@pytest.fixture(scope="module", params=MODELS)
def model(request) -> Family:
    path = families.require(request.param)
    tok = bb.Tokenizer.from_file(path)
    if not request.param.endswith("-gguf"):
        return spm_family(tok, path.read_bytes())
    meta = families.gguf_metadata(path)
    if request.param != "gemma4-gguf":
        return spm_family(tok, families.spm_from_gguf(meta, add_dummy_prefix=request.param == "llama2-gguf"))
    pytest.importorskip("tokenizers", reason="the reference library `tokenizers` is not installed")
    hf = families.hf_bpe_from_gguf(meta)
    pieces = normal_pieces(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"])
    encode = lambda text: hf.encode(text, add_special_tokens=False).ids  # noqa: E731
    return Family(
        tok,
        encode,
        lambda raw: encode(per_byte_text(raw)),
        lambda texts: [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)],
        pieces,
        "all",
    )


def word_ids(tables) -> set[int]:
    """The ids of the piece table's whole words (its keys of two or more characters)."""
    return {i for i, k in probe.piece_keys(tables).items() if len(k.decode("utf-8")) >= 2}


def test_words_are_the_self_encoding_pieces(model):
    """Every piece of 2+ characters is in the table exactly when the reference encodes its text,
    as one segment (no dummy prefix), to that one piece."""
    tables = build.build_vocab_tables(model.tok.vocab)
    assert tables.char_table[build.CHAR_TABLE_WHOLE_WORDS] == 1
    encoded = model.plain([text for _, text in model.pieces])
    expected = {i for (i, _), ids in zip(model.pieces, encoded) if ids == [i]}
    candidates = {i for i, _ in model.pieces}
    got = word_ids(tables)
    assert got & candidates == expected
    assert expected


def piece_texts(model: Family) -> list[str]:
    """Every normal piece's text, `▁` as a space (and, for some, as itself)."""
    return [t.replace(SPACE, " ") if i % 7 else t for i, t in model.pieces]


def check(model: Family, texts, backend=BACKENDS[0].values[0]):
    assert_same(model.tok, texts, model.encode, backend, allowed_special=model.allowed)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora(model, data_dir, backend):
    check(model, corpus_texts(data_dir, 6, seed=57) + MIXED + SPACES + EDGES, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_piece_texts(model, backend):
    """Texts made of the vocabulary's own pieces, each alone and run together (most words hit)."""
    texts = piece_texts(model)
    rng = np.random.default_rng(3)
    runs = ["".join(rng.choice(texts, size=12)) for _ in range(200)]
    check(model, list(rng.choice(texts, size=3000)) + runs, backend)


def test_same_ids_as_merged(model, data_dir):
    """The host encoder with the words looked up == with every word merged (the entry off)."""
    tables = model.tok.tables(model.allowed, host=True)
    off = np.array(tables.char_table)
    off[build.CHAR_TABLE_WHOLE_WORDS] = 0
    pieces = piece_texts(model)
    texts = (
        corpus_texts(data_dir, 6, seed=58) + pieces[:: max(1, len(pieces) // 5000)] + MIXED + SPACES + EDGES
    )
    merged = primitive.host_encoder(dataclasses.replace(tables, char_table=off)).encode(texts)
    assert primitive.host_encoder(tables).encode(texts) == merged


@fuzz(40)
@given(texts=st.lists(st.lists(st.integers(0, 1 << 20), min_size=1, max_size=10), min_size=1, max_size=4))
def test_fuzz_pieces(model, texts):
    pieces = piece_texts(model)
    check(model, ["".join(pieces[k % len(pieces)] for k in row) for row in texts])


@fuzz(40)
@given(texts=st.lists(unicode_text | spaces_text, min_size=1, max_size=6))
def test_fuzz_text(model, texts):
    check(model, texts)


@fuzz(30)
@given(texts=st.lists(raw_bytes(), min_size=1, max_size=6))
def test_fuzz_bytes(model, texts):
    assert ours(model.tok, texts, allowed_special=model.allowed) == [model.raw(t) for t in texts]


# ---------------------------------------------------------------------------------------------
# Constructed models


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
    give `▁ab` where sentencepiece gives `▁a` <0x63> (with the byte bounds off: they make
    <0x63> a word of its own, which would hide the gate's work)."""
    sp = spm_model([SPACE, "a", "b", SPACE + "a", "ab", SPACE + "ab"])
    vocab = bb.Tokenizer.from_sentencepiece(sp).vocab
    token_bytes = list(vocab.token_bytes)
    token_bytes[vocab.byte_ids[ord("c")]] = b"b"
    edited = dataclasses.replace(vocab, token_bytes=tuple(token_bytes))
    assert not whole_words.bytes_spell_symbols(edited)
    tables = build.build_vocab_tables(edited)
    assert tables.char_table[build.CHAR_TABLE_WHOLE_WORDS] == 0 and not word_ids(tables)
    assert ours(bb.Tokenizer(edited), ["ac"]) == [sp.encode("ac")]
    monkeypatch.setattr(whole_words, "bytes_spell_symbols", lambda vocab: True)
    monkeypatch.setattr(word_bounds, "bounds_base", lambda vocab: -1)
    assert ours(bb.Tokenizer(edited), ["ac"]) == [[sp.piece_to_id(SPACE + "ab")]] != [sp.encode("ac")]
