"""A Lowercase normalizer (alone, NFC then Lowercase, Lowercase then NFC) on a byte-level
tokenizer.json, against HF tokenizers on the same JSON: encode_batch (the executors normalize,
the host only the rows they report; Lowercase then NFC on the host) and the raw primitive (NFC first: normalized by the executors; lowercased on the device; a row
it cannot lowercase in place, or (Lowercase then NFC) that may not be in NFC, gets count -2,
never other ids)."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.pretok import normalizer as norm
from blockbpe_jax.pretok import unicode as uni

from helpers import (
    BACKENDS,
    CPU,
    MIXED,
    assert_same,
    corpus_texts,
    encode_raw,
    gpu_devices,
    may_cross_special,
    unicodedata16,
)
from strategies import fuzz

NFC, LOWER = {"type": "NFC"}, {"type": "Lowercase"}
NORMALIZERS = {
    "lower": LOWER,
    "nfc_lower": {"type": "Sequence", "normalizers": [NFC, LOWER]},
    "lower_nfc": {"type": "Sequence", "normalizers": [LOWER, NFC]},
}
EOT = "<|endoftext|>"
CASED = [
    "HELLO World ΟΔΟΣ Σίσυφος ΣΑΣ",
    "İstanbul ISTANBUL ıi Iİ",
    "ДОБРЫЙ день Привет",
    "ԱՐԵՎ Արև ႠႡႢ ᲐᲑᲒ",
    "𐐀𐐁𐐂 DESERET Ꭰ Ꭱ ꭰ",
    "ǅ ǄǆǇǈǉ ǲ ǱǳFFI ﬁ ﬀ",
    "KELVIN \u212a OHM \u2126 ANGSTROM \u212b ẞ",
    "W\u030a Y\u030a J\u030c H\u0331 T\u0308 w\u030a",
    "E\u0301 É e\u0301 Å A\u030a",
    f"ABC{EOT}DEF {EOT}Ω",
    "\u023a\u023e \u2c62 \ua78d",
]


def _doc(data_dir, normalizer):
    path = data_dir / "vocab" / "cl100k_hf" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = normalizer
    return doc


def _tokenizers(data_dir, name):
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(_doc(data_dir, NORMALIZERS[name])))
    return bb.Tokenizer.from_hf(hf), hf


@pytest.fixture(scope="module", params=list(NORMALIZERS))
def lower_tok(request, data_dir):
    return _tokenizers(data_dir, request.param)


@pytest.fixture(scope="module")
def lowercase_only_tok(data_dir):
    """Lowercase alone (no NFC): what the piece kernel runs itself."""
    return _tokenizers(data_dir, "lower")


def reference(hf):
    return lambda t: hf.encode(t, add_special_tokens=False).ids


def in_place(tok, text: str, reports_nfc: bool = False) -> bool:
    """Whether the device may tokenize text itself: no code point the kernels do not lowercase
    in place, and (Lowercase then NFC) the text and its lowercase both in NFC. With NFC first
    the executors normalize the text (ffi/pretok/nfc_normalize.h), then lowercase it; but a
    text that NFC changes is reported where reports_nfc (the CUDA pre-pass, in a call with
    specials, on a row whose rewrite may cross one: nfc_reported)."""
    index = norm.lower_tables()[0]
    nfc_first = tok.vocab.pretokenizer.normalizer.steps[0] == "nfc"
    if nfc_first:
        if reports_nfc and norm.nfc(text) != text:
            return False
        text = norm.nfc(text)
    if any(index[ord(c)] == norm.LOWER_FLAG for c in text):
        return False
    if not tok.nfc or nfc_first:
        return True
    return all(unicodedata16().normalize("NFC", s) == s for s in (text, norm.lowercase(text)))


def nfc_reported(tok, text: str, backend) -> bool:
    """Whether the CUDA pre-pass reports the row text if NFC changes it (encode_raw's "all")."""
    return backend[0] == "gpu" and may_cross_special(tok, text, "all")


def check_primitive(tok, hf, texts, backend=("cpu", 256)):
    """The raw primitive: HF's ids, or count -2 (and -2 exactly where the text is not one the
    device lowercases in place; with NFC also where the widened check is conservative)."""
    ids, counts = encode_raw(tok, texts, backend)
    reported = 0
    for i, t in enumerate(texts):
        parts = t.split(EOT)  # HF normalizes each piece between added tokens
        reports_nfc = nfc_reported(tok, t, backend)
        if counts[i] == -2:
            reported += 1
            assert not all(in_place(tok, p, reports_nfc) for p in parts) or (tok.nfc and _has_mark(t)), t
        else:
            assert all(in_place(tok, p, reports_nfc) for p in parts), f"tokenized though not in place: {t!r}"
            assert ids[i, : counts[i]].tolist() == hf.encode(t, add_special_tokens=False).ids, t
    return reported


def _has_mark(text: str) -> bool:
    qc, ccc = uni.nfc_quick_check(), uni.ccc()
    return any(qc[ord(c)] == 1 or ccc[ord(c)] for c in text)


def test_lowercase_data_is_hf():
    """unicode16.npz's lowercase (the host's and the tables' rule) equals tokenizers' Lowercase
    on every code point, and the kernels' table agrees with it where it rewrites."""
    from tokenizers.normalizers import Lowercase

    hf = Lowercase()
    cps = [cp for cp in range(0x110000) if not 0xD800 <= cp < 0xE000]
    text = "".join(map(chr, cps))
    assert norm.lowercase(text) == "".join(hf.normalize_str(c) for c in text)
    assert hf.normalize_str("ΟΔΟΣ") == norm.lowercase("ΟΔΟΣ") == "οδοσ"  # no final sigma
    index, deltas, lower = norm.lower_tables()
    for cp, a, b in uni.lowercase():
        if index[cp] == norm.LOWER_FLAG:
            assert b >= 0 or len(chr(a).encode()) != len(chr(cp).encode()), hex(cp)
        else:
            assert cp + deltas[index[cp]] == a == lower[cp] and b < 0
    assert int((index == norm.LOWER_FLAG).sum()) == 27


@pytest.mark.parametrize("backend", BACKENDS)
def test_lowercase_tokenizer(lower_tok, data_dir, backend):
    tok, hf = lower_tok
    assert tok.tables(device=CPU).lowercase
    texts = corpus_texts(data_dir, 4, seed=21) + MIXED + CASED
    texts += [t.upper() for t in corpus_texts(data_dir, 2, seed=22)]
    assert_same(tok, texts, reference(hf), backend, "all")  # encode_batch
    check_primitive(tok, hf, texts, backend)  # raw bytes: lowercased on the device


@pytest.mark.parametrize("backend", BACKENDS)
def test_every_changed_code_point(lower_tok, backend):
    """Every code point Lowercase changes, alone and between letters and marks."""
    tok, hf = lower_tok
    cps = uni.lowercase()[:, 0]
    plain = [f"{chr(cp)}x {chr(cp)}{chr(cp)} A{chr(cp)}" for cp in cps]
    marked = [f"{chr(cp)}\u0301 {chr(cp)}\u0308x" for cp in cps]
    assert_same(tok, plain + marked, reference(hf), backend, "all")
    # Without marks exactly the rows the kernels cannot lowercase in place are reported.
    assert check_primitive(tok, hf, plain, backend) == sum(
        not in_place(tok, t, nfc_reported(tok, t, backend)) for t in plain
    )
    check_primitive(tok, hf, marked, backend)


_chars = st.sampled_from(
    list("aAzZ iIıİ '\n.9")
    + list("ΣσςΟΔΆάΐ ДдЖжЁё ԱաՒւ ႠⴀᲐა 𐐀𐐨 Ꭰꭰ ǅǄǆǲ ﬁﬀ ẞß ΩΩKK ÅÅ")
    + ["\u0301", "\u0308", "\u030a", "\u030c", "\u0331", "\u0307", "\u0345", EOT]
)


@fuzz(60)
@given(texts=st.lists(st.lists(_chars, max_size=14).map("".join), min_size=1, max_size=8))
def test_fuzz_lowercase(lower_tok, texts):
    tok, hf = lower_tok
    texts = [t for t in texts if t] or ["x"]
    assert_same(tok, texts, reference(hf), allowed_special="all")
    check_primitive(tok, hf, texts)


@pytest.mark.gpu
@pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")
@pytest.mark.parametrize("chunk", ["2", "4", "8", "16"])
def test_piece_kernel_lowercases_in_place(lowercase_only_tok, data_dir, monkeypatch, chunk):
    """Lowercase alone, in a call without specials: the piece kernel (ffi/cuda/piece_kernel.cuh)
    lowercases the rows itself. With no second launch (BLOCKBPE_PIECE_FILL=0) every row it can
    lowercase in place has HF's ids and the others are left pending (count -3); with it,
    encode_kernel reports those (-2)."""
    tok, hf = lowercase_only_tok
    assert not tok.nfc
    monkeypatch.setenv("BLOCKBPE_KERNEL", "piece")
    monkeypatch.setenv("BLOCKBPE_PIECE_CHUNK", chunk)
    texts = [t.encode()[:900].decode("utf-8", "ignore") for t in corpus_texts(data_dir, 2, seed=23)]
    texts += [t.upper() for t in texts] + MIXED + [t.replace(EOT, " ") for t in CASED]
    plain = [in_place(tok, t) for t in texts]
    assert any(plain) and not all(plain)
    want = [hf.encode(t, add_special_tokens=False).ids for t in texts]
    for fill, left in (("0", -3), ("1", -2)):
        monkeypatch.setenv("BLOCKBPE_PIECE_FILL", fill)
        ids, counts = encode_raw(tok, texts, ("gpu", 256), allowed_special="none")
        for i, t in enumerate(texts):
            if plain[i]:
                assert ids[i, : counts[i]].tolist() == want[i], t[:80]
            else:
                assert counts[i] == left, t[:80]


def test_assume_normalized_skips_the_device_rewrite(lower_tok):
    tok, hf = lower_tok
    data, lengths = bb.pack_strings(["Hello WORLD"], max_len=32)
    raw = bb.encode(data, lengths, tok, max_tokens=32)
    trusted = bb.encode(data, lengths, tok, max_tokens=32, assume_normalized=True)
    n, m = int(raw.counts[0]), int(trusted.counts[0])
    assert np.asarray(raw.ids[0, :n]).tolist() == hf.encode("Hello WORLD").ids
    assert np.asarray(trusted.ids[0, :m]).tolist() != hf.encode("Hello WORLD").ids  # as it is


@pytest.mark.parametrize(
    "normalizer, message",
    [
        ({"type": "NFKC"}, "normalizer: normalizer NFKC is not supported"),
        (
            {
                "type": "Sequence",
                "normalizers": [LOWER, {"type": "Replace", "pattern": {"String": " "}, "content": "_"}],
            },
            "normalizer.normalizers[1]: normalizer Replace is not supported",
        ),
        (
            {"type": "Sequence", "normalizers": [NFC, LOWER, NFC]},
            "normalizer.normalizers[2]: NFC twice is not supported",
        ),
        (
            {"type": "Sequence", "normalizers": [{"type": "Sequence", "normalizers": [LOWER]}]},
            "normalizer.normalizers[0]: a nested Sequence is not supported",
        ),
        ({"type": "Prepend", "prepend": "_"}, "normalizer: normalizer Prepend is not supported"),
    ],
)
def test_refusals(data_dir, tmp_path, normalizer, message):
    doc = _doc(data_dir, normalizer)
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=re.escape(message)):
        bb.Tokenizer.from_file(path).encode_batch(["abc"], device=CPU)


def test_refuses_normalized_added_token_with_cased_letters(data_dir, tmp_path):
    doc = _doc(data_dir, LOWER)
    doc["added_tokens"][0]["normalized"] = True
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps(doc))
    message = (
        "added_tokens[0] '<|endoftext|>' is normalized (matched in the lowercased text) and has cased"
        " letters, which is not supported"
    )
    with pytest.raises(ValueError, match=re.escape(message)):
        bb.Tokenizer.from_file(path).encode_batch(["abc"], device=CPU)


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.id in ("cpu", "gpu256", "gpu1024")])
def test_long_rows(data_dir, backend):
    """Rows past one block's shared memory (the tile pipeline on the GPU: each tile writes its
    own bytes' lowercase, code points across tile edges included)."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(_doc(data_dir, NORMALIZERS["nfc_lower"])))
    tok = bb.Tokenizer.from_hf(hf)
    prose = corpus_texts(data_dir, 8, seed=23)
    body = " ".join(prose).upper()[:20000]
    rows = [body]
    for at in (4095, 4096, 8191, 12287):
        for insert in ("ΑΣ", "𐐀Ꭰ", "\u0130"):  # two, four and two bytes; the last is reported
            rows.append(body[:at] + insert + body[at:])
    assert_same(tok, rows, reference(hf), backend, "all")
    assert (
        check_primitive(tok, hf, rows, backend)
        == sum(not in_place(tok, r, nfc_reported(tok, r, backend)) for r in rows)
        == 4
    )


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.id in ("cpu", "gpu256", "gpu1024")])
def test_huge_pieces(data_dir, backend):
    """One letter piece longer than a tile (on the GPU: windows stitched across tiles, or the
    piece merged whole) is merged from the lowercased text, as every other piece is."""
    from tokenizers import Tokenizer

    hf = Tokenizer.from_str(json.dumps(_doc(data_dir, NORMALIZERS["lower"])))
    tok = bb.Tokenizer.from_hf(hf)
    rng = np.random.default_rng(29)
    latin = "".join(rng.choice(list("ABCDEFGHIJabcdefghij"), 20000))
    greek = "".join(rng.choice(list("ΑΒΓΔΕΖαβγδε"), 7000))
    rows = [latin, "x " + latin + " y", greek, latin[:9000] + greek + latin[:5000]]
    assert_same(tok, rows, reference(hf), backend, "all")
    assert check_primitive(tok, hf, rows, backend) == 0
