"""The SentencePiece BPE models of test_sentencepiece.py as HF tokenizer.json (BPE with
byte_fallback, written as HF's converters write them, in four normalizer / pre-tokenizer
styles) == HF `tokenizers` on that JSON: corpora, spaces, edges, runs, specials, hypothesis
text; and the tokenizer.json variants the loader refuses, each with its message.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

import families
import synthetic
from helpers import BACKENDS, MIXED, assert_same, corpus_texts, ours
from strategies import fuzz, runs_text, unicode_text

pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")
from sentencepiece import sentencepiece_model_pb2 as model_pb2  # noqa: E402
from helpers import EDGES, RUNS, SPACES  # noqa: E402
from strategies import spaces_text  # noqa: E402


HF_STYLES = {
    # Llama 2 / Mistral on the Hub (legacy): normalize each segment, no pre-tokenizer
    "prepend": (
        {
            "type": "Sequence",
            "normalizers": [
                {"type": "Prepend", "prepend": "\u2581"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"},
            ],
        },
        None,
    ),
    "metaspace_first": (
        None,
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "first", "split": False},
    ),
    "metaspace_always": (
        None,
        {"type": "Metaspace", "replacement": "\u2581", "prepend_scheme": "always", "split": False},
    ),
    "replace_only": ({"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}, None),
}


def hf_json_from_model(path, style: str) -> dict:
    """tokenizer.json of a SentencePiece BPE model as HF's converters write it: merges from the
    pieces, ranked by the merged piece's score (ties by ids), the specials as added tokens."""
    m = model_pb2.ModelProto()
    m.ParseFromString(path.read_bytes())
    vocab = {p.piece: i for i, p in enumerate(m.pieces)}
    merges = sorted(
        (-p.score, vocab[p.piece[:k]], vocab[p.piece[k:]], p.piece[:k], p.piece[k:])
        for p in m.pieces
        if p.type == 1
        for k in range(1, len(p.piece))
        if p.piece[:k] in vocab and p.piece[k:] in vocab
    )
    normalizer, pre_tokenizer = HF_STYLES[style]
    added = [
        {
            "id": i,
            "content": p.piece,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, p in enumerate(m.pieces)
        if p.type in (2, 3)
    ]
    return synthetic.bpe_json_doc(
        vocab,
        [[a, b] for *_, a, b in merges],
        pre_tokenizer,
        added_tokens=added,
        normalizer=normalizer,
        unk_token="<unk>",
        fuse_unk=True,
        byte_fallback=True,
    )


@pytest.fixture(scope="module", params=list(HF_STYLES))
def hf_model(request, tmp_path_factory):
    tokenizers = pytest.importorskip("tokenizers")
    doc = hf_json_from_model(families.require("mistral-v1-spm"), request.param)
    path = tmp_path_factory.mktemp(request.param) / "tokenizer.json"
    path.write_text(json.dumps(doc))
    return bb.Tokenizer.from_file(path), tokenizers.Tokenizer.from_file(str(path))


@pytest.mark.parametrize("backend", BACKENDS)
def test_hf_json(hf_model, data_dir, backend):
    tok, hf = hf_model
    texts = corpus_texts(data_dir, 6, seed=43) + MIXED + SPACES + EDGES + RUNS
    # (HF matches its added tokens in text: all allowed; wikitext spells "<unk>")
    assert_same(
        tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids, backend, allowed_special="all"
    )
    with_specials = ["<s>hello</s>", "<s> x", "a<s>b", "<s><s> </s>", "</s>", "  <s>\u2581y"]
    assert ours(tok, with_specials, backend=backend, allowed_special="all") == [
        hf.encode(t, add_special_tokens=False).ids for t in with_specials
    ]


@fuzz(30)
@given(
    texts=st.lists(unicode_text | runs_text | spaces_text | st.sampled_from(MIXED), min_size=1, max_size=6)
)
def test_fuzz_hf_json(hf_model, texts):
    tok, hf = hf_model
    assert_same(tok, texts, lambda t: hf.encode(t, add_special_tokens=False).ids, allowed_special="all")


HF_REFUSALS = {
    "split": (
        lambda d: d.update(normalizer=None, pre_tokenizer={"type": "Metaspace", "split": True}),
        "pre_tokenizer: Metaspace with split=true is not supported",
    ),
    "nfkc": (
        lambda d: d.update(normalizer={"type": "NFKC"}),
        "is not supported with byte_fallback BPE (only Prepend('\u2581') and Replace(' ', '\u2581'))",
    ),
    "no_normalizer": (
        lambda d: d.update(normalizer=None),
        "byte_fallback BPE without a Replace(' ', '\u2581') normalizer or a Metaspace",
    ),
    "bytelevel": (
        lambda d: d.update(normalizer=None, pre_tokenizer={"type": "ByteLevel"}),
        "pre_tokenizer 'ByteLevel' is not supported with byte_fallback BPE (only Metaspace)",
    ),
    "one_byte_added": (
        lambda d: d["added_tokens"].append(
            {"id": 500, "content": "\n", "special": True, "normalized": False}
        ),
        "one-byte added token '\\n' is not supported with a prefix per segment",
    ),
    "no_bytes": (
        lambda d: d["model"]["vocab"].pop("<0x41>"),
        "byte_fallback needs the 256 tokens <0x00>..<0xFF>",
    ),
}


@pytest.mark.parametrize("name", list(HF_REFUSALS))
def test_hf_refusals(name, tmp_path):
    doc = hf_json_from_model(families.require("mistral-v1-spm"), "prepend")
    edit, message = HF_REFUSALS[name]
    edit(doc)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(bb.VocabError) as e:
        bb.Tokenizer.from_file(path)
    assert str(e.value).startswith(f"{path}: ") and message in str(e.value)
