"""SentencePiece BPE models (`.model`, merges over characters) == the `sentencepiece` library.

Files: Mistral's v1 (Llama-2 style, 32000 pieces), v2, v3 and v7 (32768, with control and
user-defined pieces), shipped in the PyPI package mistral-common (tests/families.py finds them
and checks their sha256; docs/families.md). Texts: every shared corpus cut into 1-8192-byte
excerpts, whitespace runs (the tie group sentencepiece breaks by position), raw bytes that are
not valid UTF-8 (sentencepiece makes each such byte U+FFFD), and hypothesis text. Specials:
user-defined pieces are always matched (as sentencepiece does); control pieces, when allowed,
are matched like user-defined ones, checked against sentencepiece on a copy of the model whose
control pieces are made user-defined. CPU here; GPU at 256/512/1024 threads where one is visible.
What a model may not hold: test_sentencepiece_refusals.py; the same models as HF tokenizer.json:
test_sentencepiece_hf_json.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

import families
from helpers import BACKENDS, CPU, EDGES, FULL, MIXED, RUNS, SPACES, assert_same, corpus_texts, ours
from strategies import fuzz, raw_bytes, runs_text, spaces_text, unicode_text

spm = pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402

MODELS = ["mistral-v1-spm", "mistral-v2-spm", "mistral-v3-spm", "mistral-v7-spm"]


@pytest.fixture(scope="module", params=MODELS)
def model(request):
    path = families.require(request.param)
    return bb.Tokenizer.from_file(path), spm.SentencePieceProcessor(model_file=str(path))


def reference(sp):
    return lambda text: sp.encode(text)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora(model, data_dir, backend):
    tok, sp = model
    texts = corpus_texts(data_dir, 20 if FULL else 6, seed=41) + MIXED + SPACES + EDGES
    assert_same(tok, texts, reference(sp), backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_utf8(model, backend):
    """Raw bytes: each byte outside valid UTF-8 is one U+FFFD, as sentencepiece's normalizer
    makes it (these vocabularies have a U+FFFD piece)."""
    tok, sp = model
    texts = [
        b"ab\xffcd",
        b"\xff\xfe",
        b"\xe2\x96",
        b"\xe2\x96x",
        b"\xc0\x80",
        b"\xed\xa0\x80",
        b"\xf4\x90\x80\x80",
        b"\x80",
        b"x\xe2\x96\x81y",
        b" \xe4\xb8 \xe4\xb8\xad",
    ]
    assert ours(tok, texts, backend=backend) == [sp.encode(t) for t in texts]


@pytest.mark.parametrize("backend", BACKENDS)
def test_runs(model, backend):
    """Runs of one character: the pieces of runs outrank each other in ways merge passes would
    get wrong unless handled (the run rule for `▁`)."""
    tok, sp = model
    assert_same(tok, RUNS, reference(sp), backend)


def test_model_properties(model):
    """What the kernel relies on, as loaded: byte fallback, word segments, the run group."""
    tok, sp = model
    cl = tok.vocab.char_level
    assert cl.prefix_id == cl.word_start_id == sp.piece_to_id("\u2581")
    assert cl.char_ids[" "] == sp.piece_to_id("\u2581")
    assert cl.replacement_id == sp.piece_to_id("\ufffd")
    # the tie sentencepiece breaks by position: runs of `▁` split off 16 at a time
    assert sp.id_to_piece(cl.runs.run_id) == "\u2581"
    assert (cl.runs.step, sp.id_to_piece(cl.runs.long_id)) == (16, "\u2581" * 16)
    assert tok.vocab.byte_ids == tuple(sp.piece_to_id(f"<0x{b:02X}>") for b in range(256))


def test_decode(model, data_dir):
    tok, sp = model
    texts = corpus_texts(data_dir, 3, seed=5) + MIXED + SPACES[:6]
    ids, counts = tok.encode_batch(texts, device=CPU)
    decoded = tok.decode(ids, counts)
    for text, row, n, got in zip(texts, np.asarray(ids), np.asarray(counts), decoded):
        assert got == sp.decode(row[:n].tolist())
        assert got == text


def with_user_defined(path, names) -> spm.SentencePieceProcessor:
    """The model with the named control pieces made user-defined (matched in text)."""
    m = model_pb2.ModelProto()
    m.ParseFromString(path.read_bytes())
    for p in m.pieces:
        if p.piece in names:
            p.type = model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


@pytest.mark.parametrize("backend", BACKENDS)
def test_specials(backend):
    """v7's user-defined pieces are matched whatever is allowed; allowed control pieces are
    matched as sentencepiece matches user-defined ones."""
    path = families.require("mistral-v7-spm")
    tok, sp = bb.Tokenizer.from_file(path), spm.SentencePieceProcessor(model_file=str(path))
    texts = [
        "[REF]x",
        "x [REF] y[/REF]",
        "[INST] hi [/INST]",
        "<s>[INST]a</s>",
        " [INST]",
        "a[REFERENCE_DOC_1]b [INST][INST]",
    ]
    assert ours(tok, texts, backend=backend) == [sp.encode(t) for t in texts]
    allowed = ["[INST]", "[/INST]", "<s>", "</s>"]
    sp2 = with_user_defined(path, allowed)
    assert ours(tok, texts, backend=backend, allowed_special=allowed) == [sp2.encode(t) for t in texts]
    assert ours(tok, texts, backend=backend, allowed_special="all")[2] == sp2.encode(texts[2])


def test_bytes_mode_refused(model):
    tok, _ = model
    with pytest.raises(
        ValueError,
        match=r"is a SentencePiece BPE model \(merges over characters\): "
        r"use mode='exact'",
    ):
        tok.encode_batch(["x"], device=CPU, mode="bytes")


def test_from_processor(model):
    tok, sp = model
    again = bb.Tokenizer.from_sentencepiece(sp)
    assert again.vocab.merges == tok.vocab.merges and again.vocab.byte_ids == tok.vocab.byte_ids


# ---------------------------------------------------------------------------------------------
# Hypothesis


@pytest.fixture(scope="module", params=["mistral-v1-spm", "mistral-v7-spm"])
def fuzz_model(request):
    path = families.require(request.param)
    return bb.Tokenizer.from_file(path), spm.SentencePieceProcessor(model_file=str(path))


@fuzz(40)
@given(
    texts=st.lists(unicode_text | runs_text | spaces_text | st.sampled_from(MIXED), min_size=1, max_size=6)
)
def test_fuzz_text(fuzz_model, texts):
    tok, sp = fuzz_model
    assert_same(tok, texts, reference(sp))


@fuzz(40)
@given(texts=st.lists(raw_bytes(), min_size=1, max_size=6))
def test_fuzz_bytes(fuzz_model, texts):
    tok, sp = fuzz_model
    assert ours(tok, texts) == [sp.encode(t) for t in texts]
