"""Special tokens and a normalizer, against HF tokenizers: HF extracts its added tokens
(normalized=false, as specials are) from the raw text and normalizes only the text between them,
so a combining mark after a special does not compose with its last byte (">" + U+0338 is not
U+226F there), and text that a normalizer turns into a special's spelling (U+212A KELVIN SIGN is
'K' in NFC, "<|ENDOFTEXT|>" lowercases to "<|endoftext|>") is not that special. Every path that
normalizes: the CPU executor's NFC (ffi/cpu/encode_cpu.h), the host's normalizer for Lowercase
and for the rows the executors report (Tokenizer._normalize_around_specials), the tiktoken view's
host encoder, and on a GPU the CUDA pre-pass (which reports such rows, ffi/cuda/nfc_prepass.cuh).
allowed_special "none" is HF on the same tokenizer.json without its added tokens."""

from __future__ import annotations

import json

import jax
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax.corpus.types import CorpusError
from blockbpe_jax.pretok import normalizer

from helpers import gpu_devices
from strategies import fuzz
from synthetic import BYTE_LEVEL, split

tokenizers = pytest.importorskip("tokenizers")

# A special added to Llama 3's that NFC can spell from other code points: U+212A is 'K' and
# U+037E is ';' in NFC.
SPELLED = "<|K;|>"
SPELLED_RAW = "<|\u212a\u037e|>"

NFC_TEXTS = [
    "<|reserved_special_token_188|>\u0338x a>\u0338b",  # the fuzz campaign's mismatch
    "<|begin_of_text|>\u0338",
    "a\u0301<|end_of_text|>\u0301b",
    "<|eot_id|>\u0338\u0301<|eot_id|>",  # marks between two specials, out of canonical order
    "<|eot_id|>\u0301\u0338<|start_header_id|>user<|end_header_id|>\u0338",
    "x>\u0338<|eot_id|>e\u0301",
    SPELLED_RAW,  # NFC spells the special: not one for HF
    f"{SPELLED} {SPELLED_RAW}\u0338",
    f"<|eot_id|>{SPELLED_RAW}<|eot_id|>\u0338",
    "caf\u00e9 plain text, already NFC",  # no specials: unchanged
    "cafe\u0301 not NFC, no specials",
    "",
]
LOWER_TEXTS = [
    "<|ENDOFTEXT|>x",  # lowercases to a special: not one for HF
    "<|ENDOFTEXT|>\u0130 a",  # U+0130 lowercases to 3 bytes: rewritten on the host
    "<|endoftext|>A<|EndOfText|>\u0130 B",
    "\u0130<|endoftext|>\u0130",
    "A<|endoftext|>B<|fim_prefix|>C",
    "<|ENDOFTEXT|\u0130>",
    "Hello World, no specials",
    "",
]


def _llama3_doc(data_dir, normalizer: dict) -> dict:
    path = data_dir / "vocab" / "llama3" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = normalizer
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(testing.QWEN2_PATTERN), BYTE_LEVEL]}
    top = max(t["id"] for t in doc["added_tokens"])
    entry = dict(doc["added_tokens"][-1], id=top + 1, content=SPELLED)
    doc["added_tokens"] = [*doc["added_tokens"], entry]
    return doc


def _pair(doc: dict):
    """(ours, HF's with its added tokens, HF's without them: allowed_special "none")."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(doc))
    hf_none = Tokenizer.from_str(json.dumps({**doc, "added_tokens": []}))
    return bb.Tokenizer.from_hf(hf), hf, hf_none


@pytest.fixture(scope="module", params=["nfc", "nfc_lowercase"])
def llama3_norm(request, data_dir):
    """Llama 3's vocabulary (and SPELLED) with Qwen2's split, and NFC, or NFC then Lowercase."""
    normalizer = {"type": "NFC"}
    if request.param == "nfc_lowercase":
        normalizer = {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}
    return _pair(_llama3_doc(data_dir, normalizer))


@pytest.fixture(scope="module")
def cl100k_lower(data_dir):
    """cl100k's tokenizer.json with a Lowercase normalizer (benchmarks/families.py's family)."""
    path = data_dir / "vocab" / "cl100k_hf" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = {"type": "Lowercase"}
    return _pair(doc)


def _reference(pair, texts, allowed):
    _, hf, hf_none = pair
    ref = hf if allowed == "all" else hf_none
    return [e.ids for e in ref.encode_batch(texts, add_special_tokens=False)]


def _encode_batch(tok, texts, allowed, device, max_len=None):
    out = tok.encode_batch(texts, allowed_special=allowed, mode="exact", device=device, max_len=max_len)
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    return [ids[i, : counts[i]].tolist() for i in range(len(texts))]


def check(pair, texts, device, allowed):
    """encode_batch (as a batch, and at a width that leaves a row's NFC no room to grow) and
    the tiktoken view's host encoder, against HF."""
    tok = pair[0]
    expected = _reference(pair, texts, allowed)
    assert _encode_batch(tok, texts, allowed, device) == expected
    for text, want in zip(texts, expected):
        raw = text.encode()
        # (a row of exactly max_len bytes, which the executors normalize: a host normalizer's
        # text must fit max_len as it comes out)
        if tok._device_normalizes and len(raw) and len(raw) % 16 == 0:
            assert _encode_batch(tok, [text], allowed, device, max_len=len(raw)) == [want], text
    if device.platform == "cpu":
        enc = tok.as_tiktoken()
        got = [
            enc.encode(t, allowed_special="all") if allowed == "all" else enc.encode_ordinary(t)
            for t in texts
        ]
        assert got == expected


CPU = jax.devices("cpu")[0]


@pytest.mark.parametrize("allowed", ["all", "none"])
def test_nfc_specials_cpu(llama3_norm, allowed):
    check(llama3_norm, NFC_TEXTS, CPU, allowed)


@pytest.mark.parametrize("allowed", ["all", "none"])
def test_lowercase_specials_cpu(cl100k_lower, allowed):
    check(cl100k_lower, LOWER_TEXTS, CPU, allowed)


@pytest.mark.parametrize("allowed", ["all", "none"])
def test_each_row_alone_cpu(llama3_norm, cl100k_lower, allowed):
    """A row alone: the CPU executor's rewrite (NFC) and the host's paths with nothing else in
    the batch."""
    for pair, texts in ((llama3_norm, NFC_TEXTS), (cl100k_lower, LOWER_TEXTS)):
        for text in texts:
            assert _encode_batch(pair[0], [text], allowed, CPU) == _reference(pair, [text], allowed), text


# U+1D15E is U+1D157 U+1D165 in NFC (a composition exclusion): 4 bytes to 8.
GROWS = "\U0001d15e" * 5
REPORTED = [
    "<|eot_id|>\u0338" + GROWS,  # (32 bytes, its NFC 52: over max_len 40)
    SPELLED_RAW + GROWS,  # (and NFC spells a special)
    "<|eot_id|>" + SPELLED_RAW + GROWS,
    "a>\u0338 short",  # (fits)
]


@pytest.mark.parametrize("allowed", ["all", "none"])
def test_reported_rows_cpu(llama3_norm, allowed):
    """Rows whose NFC outgrows max_len, which the executors report (count -2) and encode_batch
    encodes again normalized on the host around their specials: the rows encoded whole and
    those encoded in parts in one batch, the ids widened past max_len."""
    pair = llama3_norm
    if not pair[0]._device_normalizes:
        pytest.skip("the host normalizes first (its text must fit max_len)")
    assert max(len(t.encode()) for t in REPORTED) <= 40
    assert _encode_batch(pair[0], REPORTED, allowed, CPU, max_len=40) == _reference(pair, REPORTED, allowed)


def test_normalize_keeps_specials(llama3_norm, cl100k_lower):
    """Tokenizer.normalize with allowed specials: their bytes as they are, the rest normalized."""
    tok = llama3_norm[0]
    assert tok.normalize(["<|eot_id|>\u0338a>\u0338"], allowed_special="all") == ["<|eot_id|>\u0338a\u226f"]
    assert tok.normalize(["<|eot_id|>\u0338a>\u0338"]) == ["<|eot_id|\u226fa\u226f"]
    assert tok.normalize([SPELLED_RAW], allowed_special="all") == [
        SPELLED.lower() if tok.lowercase else SPELLED
    ]
    lower = cl100k_lower[0]
    assert lower.normalize([b"<|endoftext|>A<|ENDOFTEXT|>"], allowed_special="all") == [
        b"<|endoftext|>a<|endoftext|>"
    ]


def test_raw_nfc_rewrite_cpu(data_dir):
    """The CPU executor alone (encode on raw rows, no host normalizer): NFC of the text
    between the specials, and no special matched where NFC spells one."""
    pair = _pair(_llama3_doc(data_dir, {"type": "NFC"}))
    tok = pair[0]
    texts = [t for t in NFC_TEXTS if t]
    data, lengths = bb.pack_strings(texts)
    out = bb.encode(data, lengths, tok.tables("all", CPU), max_tokens=data.shape[1] + 1)
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    assert [ids[i, : counts[i]].tolist() for i in range(len(texts))] == _reference(pair, texts, "all")


def _corpus_ids(tok, docs, tmp_path, **options):
    from blockbpe_jax.corpus import job

    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs))
    ids, offsets = job.encode_files_to_arrays(
        tok, [path], jsonl_field="text", allowed_special="all", **options
    )
    return [ids[offsets[k] : offsets[k + 1]].tolist() for k in range(len(offsets) - 1)]


def _not_lowered_in_place(text: str) -> bool:
    """Whether text has a code point the executors do not lowercase in place (they report it)."""
    index = normalizer.lower_tables()[0]
    return any(index[ord(c)] == normalizer.LOWER_FLAG for c in text)


CORPUS_DEVICES = [pytest.param("cpu", id="cpu")] + [
    pytest.param("gpu", id="gpu", marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX"))
]


@pytest.mark.parametrize("kind", CORPUS_DEVICES)
@pytest.mark.parametrize("device_normalizer", [None, False])
def test_corpus_job(llama3_norm, cl100k_lower, tmp_path, kind, device_normalizer):
    """The corpus job normalizes documents around their specials (on the device, or the
    host's normalizer), and refuses a document whose normalized text spells a special its raw
    text does not have where the host normalizes it (it cannot encode it in parts): every
    document with device_normalizer=False, else those the executors report (on the GPU any
    that NFC may change next to a special; a code point whose lowercase is not in place)."""
    device = CPU if kind == "cpu" else gpu_devices()[0]
    for pair, texts in ((llama3_norm, NFC_TEXTS), (cl100k_lower, LOWER_TEXTS)):
        # (the texts whose normalized form spells a special that the raw text does not have)
        # (none with NFC then Lowercase: "<|K;|>" lowercases to no special)
        spelled = [t for t in texts if t and pair[0]._normalize_around_specials([t], "all")[1]]
        docs = [t for t in texts if t and t not in spelled]
        got = _corpus_ids(
            pair[0], docs, tmp_path, device=device, device_normalizer=device_normalizer, pack_width=0
        )
        assert got == _reference(pair, docs, "all")
        for text in spelled:  # (the CPU executor, normalizing, encodes it as HF does)
            reported = (kind == "gpu" and pair[0].nfc) or (pair[0].lowercase and _not_lowered_in_place(text))
            host = device_normalizer is False or not pair[0]._device_normalizes or reported
            try:
                got = _corpus_ids(
                    pair[0],
                    [text],
                    tmp_path,
                    device=device,
                    device_normalizer=device_normalizer,
                    pack_width=0,
                )
            except CorpusError as e:
                assert host and "spells a special" in str(e), e
            else:
                assert not host and got == _reference(pair, [text], "all")


ATOMS = [
    "<|eot_id|>",
    "<|begin_of_text|>",
    "<|reserved_special_token_188|>",
    SPELLED,
    "<|EOT_ID|>",
    "<|endoftext|>",
    "<|ENDOFTEXT|>",
    "<|",
    "|>",
    ">",
    "<",
    "|",
    "\u0338",
    "\u0301",
    "\u0327",
    "\u212a",
    "\u037e",
    "\u0130",
    "e",
    "A",
    " ",
    "\n",
    "\u00e9",
    "\u1e0a",
]
mixed_text = st.lists(st.sampled_from(ATOMS), max_size=12).map("".join)


@fuzz(40)
@given(texts=st.lists(mixed_text, min_size=1, max_size=6), allowed=st.sampled_from(["all", "none"]))
def test_fuzz_mixed_cpu(llama3_norm, cl100k_lower, texts, allowed):
    for pair in (llama3_norm, cl100k_lower):
        check(pair, texts, CPU, allowed)


GPU = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["block", "piece"])
@pytest.mark.parametrize("allowed", ["all", "none"])
def test_specials_gpu(llama3_norm, cl100k_lower, allowed, kernel, monkeypatch):
    """The CUDA pre-pass reports a row that may change in a call with specials (the host
    normalizes it around them), through both exact-mode kernels."""
    monkeypatch.setenv("BLOCKBPE_KERNEL", kernel)
    gpu = gpu_devices()[0]
    check(llama3_norm, NFC_TEXTS, gpu, allowed)
    check(cl100k_lower, LOWER_TEXTS, gpu, allowed)
    long_rows = [t * 40 for t in NFC_TEXTS if t]  # (the tile pipeline's rows)
    check(llama3_norm, long_rows, gpu, allowed)
    if llama3_norm[0]._device_normalizes:
        want = _reference(llama3_norm, REPORTED, allowed)
        assert _encode_batch(llama3_norm[0], REPORTED, allowed, gpu, max_len=40) == want


@GPU
@pytest.mark.gpu
@fuzz(40)
@given(texts=st.lists(mixed_text, min_size=1, max_size=6), allowed=st.sampled_from(["all", "none"]))
def test_fuzz_mixed_gpu(llama3_norm, cl100k_lower, texts, allowed):
    for pair in (llama3_norm, cl100k_lower):
        check(pair, texts, gpu_devices()[0], allowed)
