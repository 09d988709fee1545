"""The HF-style call (`tok(texts, ...)`), checked against HF `tokenizers` (enable_padding /
enable_truncation / a TemplateProcessing post-processor for BOS/EOS) on the shared
tokenizer.json files."""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb

from helpers import hf_tokenizer, load_tokenizer
from strategies import fuzz, unicode_text

# Every test here needs the shared vocabularies (the fixture skips when absent).
pytestmark = pytest.mark.usefixtures("data_dir")


# ----------------------------------------------------------------------------------------------
# HF-style call, against HF tokenizers
# ----------------------------------------------------------------------------------------------

HF_NAMES = ["r50k", "cl100k"]  # gpt2/tokenizer.json, cl100k_hf/tokenizer.json
HF_TEXTS = [
    "hello world",
    "",
    "The quick brown fox jumps over the lazy dog. " * 3,
    "<|endoftext|> again",
    "日本語のテキスト 🎉 and more",
    "a",
]


@functools.lru_cache(maxsize=None)
def hf_reference(name: str):
    """A copy of the shared HF tokenizer, its own: hf_expected reconfigures it."""
    tokenizers = pytest.importorskip("tokenizers")
    return tokenizers.Tokenizer.from_str(hf_tokenizer(name).to_str())


def hf_expected(
    name,
    texts,
    *,
    padding,
    truncation,
    max_length,
    pad_to_multiple_of=None,
    padding_side="right",
    truncation_side="right",
    bos=False,
    eos=False,
    pad_id=0,
):
    from tokenizers import processors

    hf = hf_reference(name)
    hf.no_padding()
    hf.no_truncation()
    eot = "<|endoftext|>"
    eot_id = hf.token_to_id(eot)
    template = " ".join(([eot] if bos else []) + ["$A"] + ([eot] if eos else []))
    hf.post_processor = processors.TemplateProcessing(single=template, special_tokens=[(eot, eot_id)])
    if truncation:
        hf.enable_truncation(max_length, direction=truncation_side)
    if padding:
        hf.enable_padding(
            direction=padding_side,
            pad_id=pad_id,
            pad_token="<pad>",
            length=max_length if padding == "max_length" else None,
            pad_to_multiple_of=pad_to_multiple_of,
        )
    out = hf.encode_batch(texts)
    return [e.ids for e in out], [e.attention_mask for e in out], eot_id


HF_CASES = [
    dict(padding="longest", truncation=False, max_length=None),
    dict(padding=True, truncation=True, max_length=8),
    dict(padding="max_length", truncation=True, max_length=12),
    dict(padding="max_length", truncation=True, max_length=30, padding_side="left"),
    dict(padding="longest", truncation=True, max_length=10, truncation_side="left"),
    dict(
        padding="longest",
        truncation=True,
        max_length=7,
        padding_side="left",
        truncation_side="left",
        bos=True,
        eos=True,
        pad_id=5,
    ),
    dict(padding="longest", truncation=False, max_length=None, pad_to_multiple_of=8, bos=True),
    dict(padding="max_length", truncation=True, max_length=10, pad_to_multiple_of=8, eos=True),
]


@pytest.mark.parametrize("name", HF_NAMES)
@pytest.mark.parametrize("case", HF_CASES, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_hf_call_equals_tokenizers(name, case):
    tok = load_tokenizer(name, "json")
    ids, mask, eot_id = hf_expected(name, HF_TEXTS, **case)
    kwargs = {k: v for k, v in case.items() if k not in ("bos", "eos")}
    out = tok(
        HF_TEXTS,
        bos_id=eot_id if case.get("bos") else None,
        eos_id=eot_id if case.get("eos") else None,
        **kwargs,
    )
    assert isinstance(out["input_ids"], jax.Array)
    assert np.asarray(out["input_ids"]).tolist() == ids
    assert np.asarray(out["attention_mask"]).tolist() == mask


@pytest.mark.parametrize("name", HF_NAMES)
@fuzz(15)
@given(
    texts=st.lists(unicode_text, min_size=1, max_size=4),
    max_length=st.integers(2, 24),
    padding=st.sampled_from(["longest", "max_length"]),
    sides=st.sampled_from([("right", "right"), ("left", "left"), ("left", "right"), ("right", "left")]),
    bos=st.booleans(),
)
def test_hyp_hf_call_equals_tokenizers(name, texts, max_length, padding, sides, bos):
    tok = load_tokenizer(name, "json")
    case = dict(
        padding=padding,
        truncation=True,
        max_length=max_length,
        padding_side=sides[0],
        truncation_side=sides[1],
    )
    ids, mask, eot_id = hf_expected(name, texts, bos=bos, **case)
    out = tok(texts, bos_id=eot_id if bos else None, **case)
    assert np.asarray(out["input_ids"]).tolist() == ids
    assert np.asarray(out["attention_mask"]).tolist() == mask


def test_hf_call_shapes_and_errors():
    tok = load_tokenizer("cl100k", "tiktoken")
    one = tok("hello world")  # a single string: a batch of one
    assert np.asarray(one["input_ids"]).tolist() == [[15339, 1917]]
    assert np.asarray(one["attention_mask"]).tolist() == [[1, 1]]
    same_len = bb.hf_call(tok, ["hello world", "hello world"], return_attention_mask=False)
    assert set(same_len) == {"input_ids"} and same_len["input_ids"].shape == (2, 2)
    assert tok([""], padding=True)["input_ids"].shape == (1, 0)
    with pytest.raises(ValueError, match="Unable to create tensor"):
        tok(["hello world", "a"])  # ragged without padding
    with pytest.raises(ValueError, match="max_length is required"):
        tok(["a"], truncation=True)
    with pytest.raises(ValueError, match="Unable to create tensor"):  # rows past max_length
        tok(["a b c d e f", "a"], padding="max_length", max_length=2)
