"""An NFC normalizer (Qwen-style tokenizer.json) against HF tokenizers on the same JSON."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from helpers import (
    BACKENDS,
    CPU,
    MIXED,
    assert_same,
    corpus_texts,
    documented_over_report,
    encode_raw,
)
from blockbpe_jax.pretok import normalizer as norm
from strategies import fuzz


# ---------------------------------------------------------------------------------------------
# NFC normalizer (Qwen-style tokenizer.json): a shared vocabulary with an NFC normalizer and
# Qwen2's single-digit split, against HF tokenizers on the same JSON. encode_batch and the
# primitive on raw bytes both leave NFC to the executors, which normalize each row first.

NFC_TEXTS = [
    "cafe\u0301 e\u0301",
    "café",
    "plain ascii 123",
    "\u0958 hindi \u0915\u093c",
    "x\u0301",
    "\u0627\u0651\u064e",
    "\u0627\u064e\u0651",
    "\ud55c\uad6d\uc5b4 \u1100\u1161 \uac00\u11a8",
    "A\u030a \u212b \u00c5",
    "\u09c7\u09be \u09cb",
    "a\u0328\u0301 a\u0301\u0328",
    "\uf900 \u2126 \u0344",
    "<|end_of_text|>\u0301x",
    "x<|end_of_text|>\u0301",
]


def nfc_reference(hf):
    return lambda t: hf.encode(t, add_special_tokens=False).ids


def check_nfc_primitive(tok, hf, texts, backend=("cpu", 256)):
    """Raw bytes (allowed_special "all"): normalized by the executors
    (ffi/pretok/nfc_normalize.h), HF's ids; a row is reported (count -2) only where its NFC is
    longer than the packed width, or on a GPU where it may change: with specials in the call
    the CUDA pre-pass reports such a row rather than rewrite it before they are matched
    (cuda/nfc_prepass.cuh)."""
    width = max(16, max(len(t.encode()) for t in texts))  # (encode_raw's)
    ids, counts = encode_raw(tok, texts, backend)
    for i, t in enumerate(texts):
        if counts[i] == -2:
            may_change = backend[0] == "gpu" and (norm.nfc(t) != t or documented_over_report(t))
            assert len(norm.nfc(t).encode()) > width or may_change, f"reported, but its NFC fits: {t!r}"
        else:
            assert ids[i, : counts[i]].tolist() == hf.encode(t, add_special_tokens=False).ids, t


@pytest.mark.parametrize("backend", BACKENDS)
def test_nfc_tokenizer(nfc_tok, data_dir, backend):
    tok, hf = nfc_tok
    assert tok.tables(device=CPU).nfc
    texts = corpus_texts(data_dir, 4, seed=15) + MIXED + NFC_TEXTS
    assert_same(tok, texts, nfc_reference(hf), backend, "all")  # encode_batch
    check_nfc_primitive(tok, hf, texts, backend)  # raw bytes


def test_nfc_corpus_job(nfc_tok, data_dir, tmp_path):
    """The corpus job normalizes each window on the host (the rows it gathers on the device are
    the normalized bytes, whose lengths may differ from the input's): HF's ids per line."""
    from blockbpe_jax.corpus import job as corpus

    tok, hf = nfc_tok
    lines = [t.replace("\n", " ") for t in corpus_texts(data_dir, 4, seed=3) + NFC_TEXTS * 3]
    lines = [t for t in lines if t.strip(" \t\r")]
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in lines), encoding="utf-8")
    kw = dict(jsonl_field="text", batch_bytes=4096, allowed_special="all")
    corpus.encode_files(tok, [src], tmp_path / "o" / "s", **kw)
    got = [a.tolist() for a in corpus.read_shards(tmp_path / "o" / "s")]
    assert got == [nfc_reference(hf)(t) for t in lines]


_nfc_chars = st.sampled_from(
    list("aeiouAEOxyz '\n")
    + [
        "\u0301",
        "\u0300",
        "\u0328",
        "\u0327",
        "\u0308",
        "\u093c",
        "\u0915",
        "\u0958",
        "\u1100",
        "\u1161",
        "\u11a8",
        "\uac00",
        "\u09c7",
        "\u09be",
        "\u0651",
        "\u064e",
        "\u0627",
        "\u212b",
        "\u00c5",
        "\u0344",
        "\u1e0a",
        "\u0323",
        "\u0307",
        "<|end_of_text|>",
    ]
)


@fuzz(60)
@given(texts=st.lists(st.lists(_nfc_chars, max_size=12).map("".join), min_size=1, max_size=8))
def test_fuzz_nfc(nfc_tok, texts):
    tok, hf = nfc_tok
    texts = [t for t in texts if t] or ["x"]
    assert_same(tok, texts, nfc_reference(hf), allowed_special="all")
    check_nfc_primitive(tok, hf, texts)
