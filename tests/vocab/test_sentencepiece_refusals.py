"""SentencePiece `.model` files the loader refuses, each with its message: edits of Mistral's
v7 (or v1) model that turn on what the kernels do not implement (UNIGRAM, no byte fallback,
whitespace as suffix, normalizations, UNUSED pieces, ties in the run of '▁', missing characters
or BYTE pieces, user-defined pieces with '▁'), a truncated file and protobuf's defaults.
"""

from __future__ import annotations

import pytest

import blockbpe_jax as bb

import families

pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402


def edited(path, edit) -> bytes:
    m = model_pb2.ModelProto()
    m.ParseFromString(path.read_bytes())
    edit(m)
    return m.SerializeToString()


def _piece(m, text):
    return next(p for p in m.pieces if p.piece == text)


def _set(obj, **fields):
    for k, v in fields.items():
        setattr(obj, k, v)


REFUSALS = {
    "unigram": (
        lambda m: _set(m.trainer_spec, model_type=1),
        "trainer_spec.model_type: UNIGRAM models are not supported (only BPE)",
    ),
    "no_byte_fallback": (
        lambda m: _set(m.trainer_spec, byte_fallback=False),
        "trainer_spec.byte_fallback is false: models without byte fallback",
    ),
    "suffix": (
        lambda m: _set(m.trainer_spec, treat_whitespace_as_suffix=True),
        "trainer_spec.treat_whitespace_as_suffix is not supported",
    ),
    "nfkc": (
        lambda m: _set(m.normalizer_spec, name="nmt_nfkc", precompiled_charsmap=b"\x00" * 8),
        "normalizer_spec: the 'nmt_nfkc' normalization is not supported (only 'identity')",
    ),
    "collapse": (
        lambda m: _set(m.normalizer_spec, remove_extra_whitespaces=True),
        "normalizer_spec.remove_extra_whitespaces is not supported",
    ),
    "unused": (
        lambda m: _set(_piece(m, "▁the"), type=5),
        "('▁the'): UNUSED pieces (merged, then split again by sentencepiece) are not supported",
    ),
    "run_tie": (
        lambda m: [_set(_piece(m, "▁" * k), score=_piece(m, "▁the").score) for k in (2, 3)],
        "runs of '▁' share one rank",
    ),
    "lost_char": (lambda m: _set(_piece(m, "q"), type=3), "its character 'q' is not a piece"),
    "no_byte": (
        lambda m: _set(_piece(m, "<0x41>"), piece="<0xGG>"),
        "the 256 BYTE pieces <0x00>..<0xFF> are not all there",
    ),
    # user-defined pieces are matched in the normalized text, dummy prefix included; the
    # prefix is a token here (Gemma's GGUFs, which have such pieces, have no prefix)
    "spaced_user_defined": (
        lambda m: _set(_piece(m, "▁▁"), type=4),
        "user-defined piece '▁▁': user-defined pieces with '▁' together with "
        "add_dummy_prefix are not supported",
    ),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals(name, tmp_path):
    path = families.require("mistral-v7-spm")
    edit, message = REFUSALS[name]
    bad = tmp_path / "bad.model"
    bad.write_bytes(edited(path, edit))
    with pytest.raises(bb.VocabError) as e:
        bb.Tokenizer.from_file(bad)
    assert str(e.value).startswith(f"{bad}: ") and message in str(e.value)


def test_truncated_file(tmp_path):
    path = families.require("mistral-v1-spm")
    bad = tmp_path / "cut.model"
    bad.write_bytes(path.read_bytes()[:1001])
    with pytest.raises(bb.VocabError, match=r"truncated"):
        bb.Tokenizer.from_file(bad)


def test_protobuf_defaults():
    """Fields a model leaves out take protobuf's defaults: no trainer_spec means UNIGRAM."""
    m = model_pb2.ModelProto()
    for k, piece in enumerate(["<unk>", "a", "b", "ab"]):
        m.pieces.add(piece=piece, score=-1.5 * k, type=2 if k == 0 else 1)
    with pytest.raises(bb.VocabError, match="^<mem>: trainer_spec.model_type: UNIGRAM"):
        bb.vocab.sentencepiece.vocab_from_sentencepiece(m.SerializeToString(), "<mem>")
