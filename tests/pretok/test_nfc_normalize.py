"""NFC normalization as both executors do it (ffi/pretok/nfc_normalize.h; on the CPU through
the CPU module's nfc_normalize, blockbpe_jax/pretok/nfc_data.py) against the reference, HF
tokenizers' NFC (Unicode 9.0.0, the version the tables follow), and the host path
(normalizer.nfc): every code point alone and in contexts, every composition pair, and
hypothesis-generated text (combining marks, Hangul jamo, mixed scripts, invalid UTF-8)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbpe_jax.ops.primitive import TABLE_OPERANDS
from blockbpe_jax.pretok import nfc_data
from blockbpe_jax.pretok import normalizer as norm
from blockbpe_jax.pretok import unicode as uni
from blockbpe_jax.text_rows import without_surrogates

from helpers import corpus_texts, documented_over_report, gpu_devices, may_cross_special
from strategies import NFC_TEXT, fuzz, raw_bytes

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import normalizers  # noqa: E402

CODE_POINTS = [int(c) for c in np.flatnonzero(uni.SCALAR_VALUES) if c]
SEP = "\x00"  # a starter that neither decomposes nor composes: rows normalize piece by piece


def hf_nfc(texts: list[str]) -> list[str]:
    """The reference on many short texts at once (SEP-joined: each normalizes on its own)."""
    return normalizers.NFC().normalize_str(SEP.join(texts)).split(SEP)


def ours(texts: list[str]) -> list[str]:
    return nfc_data.normalize_strings(texts)


# Part sizes for the rows rewritten in parts, as the CUDA pre-pass's threads do
# (nfc_part_start): a part of one byte starts at nearly every boundary.
PARTS = (1, 3, 16)


def check(texts: list[str], host_per_text: bool = True):
    """Ours (whole rows and in parts) equals the reference and the host path. host_per_text=False
    gives the host path the texts SEP-joined, as hf_nfc does (the same result: SEP is inert);
    its per-text branches (ASCII, no newer code point) are test_every_code_point_alone's, and a
    call per text is most of the time of a 1.1M-text check."""
    want = hf_nfc(texts)
    got = ours(texts)
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, f"{len(bad)} differ from tokenizers' NFC, first {[ascii(x) for x in bad[0]]}"
    host = [norm.nfc(t) for t in texts] if host_per_text else norm.nfc(SEP.join(texts)).split(SEP)
    assert got == host
    for part in PARTS:
        assert nfc_data.normalize_strings(texts, part) == got, f"in parts of {part} bytes"


def test_reference_is_the_tables_version():
    from blockbpe_jax.pretok import versions

    if versions.probe("tokenizers", "nfc") != uni.unicode_version("nfc"):
        pytest.skip("the installed tokenizers' NFC is another Unicode version than the tables'")


def test_every_code_point_alone():
    """Each code point its own row (the batch entry) and all in one SEP-joined row."""
    texts = [chr(c) for c in CODE_POINTS]
    check(texts)
    assert ours([SEP.join(texts)]) == [SEP.join(hf_nfc(texts))]


@pytest.mark.parametrize(
    "before, after",
    [
        ("a", ""),  # after a starter
        ("a", "\u0334"),  # before a mark of class 1
        ("a\u0334", ""),  # after a mark of class 1
        ("a\u0301", "\u0323"),  # between marks of classes 230 and 220
        ("\u0627", "\u0651\u064e"),  # Arabic shadda and fatha after it
        ("\u1100", "\u1161"),  # after an L jamo, before a V jamo
        ("\uac00", "\u11a8"),  # after an LV syllable, before a T jamo
        ("", "\u0301"),  # at the start of a row, before a mark
        ("\u00e9", "\u0300\u0327"),  # after a precomposed letter, before marks out of order
    ],
)
def test_every_code_point_in_context(before, after):
    check([before + chr(c) + after for c in CODE_POINTS], host_per_text=False)


def test_every_composition_pair():
    """Every pair of the tables and of the installed unicodedata (newer pairs the reference
    leaves alone), adjacent and with a blocking or non-blocking mark between."""
    try:
        import unicodedata2 as ucd
    except ImportError:  # pragma: no cover - depends on the environment
        import unicodedata as ucd
    pairs = {tuple(p) for p in uni.nfc_pairs().tolist()}
    for c in CODE_POINTS:
        d = ucd.decomposition(chr(c)) if not 0xD800 <= c < 0xE000 else ""
        if d and not d.startswith("<") and len(d.split()) == 2:
            pairs.add(tuple(int(x, 16) for x in d.split()))
    texts = []
    for a, b in sorted(pairs):
        texts += [
            chr(a) + chr(b),
            chr(a) + "\u0334" + chr(b),
            chr(a) + "\u0316" + chr(b),
            chr(b) + chr(a) + chr(b),
        ]
    check(texts)


def test_output_bound():
    """The bound nfc_normalize.h relies on: NFC of a code point alone is at most 3 times its
    UTF-8 length, and no composite is longer in UTF-8 than its pair."""
    texts = [chr(c) for c in CODE_POINTS]
    growth = [len(n.encode("utf-8")) / len(t.encode("utf-8")) for t, n in zip(texts, ours(texts))]
    assert max(growth) == 3  # (U+1D160 and others: the bound is reached)
    for (a, b), c in zip(uni.nfc_pairs().tolist(), uni.nfc_composites().tolist()):
        assert len(chr(c).encode("utf-8")) <= len((chr(a) + chr(b)).encode("utf-8")), (a, b)


def test_unchanged_rows_are_copied():
    """A row without a code point that may change comes back byte for byte (the fast path),
    and the unsafe code points are a superset of those that change alone."""
    unsafe = nfc_data.unsafe_code_points()
    texts = [chr(c) for c in CODE_POINTS]
    changed = [ord(t) for t, n in zip(texts, ours(texts)) if n != t]
    assert unsafe[changed].all()
    safe = "".join(chr(c) for c in CODE_POINTS if not unsafe[c])
    assert ours([safe]) == [safe]


def expected_bytes(raw: bytes) -> bytes:
    """The reference on raw bytes: each byte not in a valid UTF-8 sequence stays as it is and
    is a starter (a lone surrogate under surrogateescape), the valid text between such bytes
    normalized by tokenizers' NFC; the host path the same way."""
    text = raw.decode("utf-8", "surrogateescape")
    parts, piece = [], []
    for ch in text:
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            parts += [normalizers.NFC().normalize_str("".join(piece)), ch]
            piece = []
        else:
            piece.append(ch)
    parts.append(normalizers.NFC().normalize_str("".join(piece)))
    out = "".join(parts).encode("utf-8", "surrogateescape")
    assert out == norm.nfc(text).encode("utf-8", "surrogateescape")
    return out


def ours_bytes(rows: list[bytes]) -> list[bytes]:
    return nfc_data.normalize_strings(rows)


nfc_text = NFC_TEXT.map(lambda s: s.replace(SEP, ""))


@fuzz(300)
@given(texts=st.lists(nfc_text, min_size=1, max_size=12))
def test_fuzz_text(texts):
    check(texts)


@fuzz(300)
@given(
    rows=st.lists(
        st.lists(
            nfc_text.map(lambda s: s.encode("utf-8")) | raw_bytes() | st.binary(min_size=1, max_size=3),
            max_size=6,
        ).map(b"".join),
        min_size=1,
        max_size=8,
    )
)
def test_fuzz_invalid_utf8(rows):
    want = [expected_bytes(r) for r in rows]
    assert ours_bytes(rows) == want
    for part in PARTS:
        assert nfc_data.normalize_strings(rows, part) == want, f"in parts of {part} bytes"


def test_first_unsafe_lead():
    """The checks skip bytes below kNfcFirstUnsafeLead (nfc_normalize.h): it must be the lead
    byte of the first code point that is not a normalization boundary."""
    import re
    from pathlib import Path

    header = (Path(__file__).resolve().parents[2] / "ffi/pretok/nfc_normalize.h").read_text()
    lead = int(re.search(r"kNfcFirstUnsafeLead = (0x[0-9A-Fa-f]+);", header).group(1), 16)
    first = int(np.flatnonzero(nfc_data.unsafe_code_points())[0])
    assert chr(first).encode("utf-8")[0] == lead, hex(first)
    operand = nfc_data.operand()
    stage1 = operand[4 : 4 + nfc_data.STAGE1_LEN]
    props = operand[4 + nfc_data.STAGE1_LEN :]
    below = [props[stage1[c >> 8] * 256 + (c & 255)] for c in range(first)]
    assert not any(p & nfc_data.UNSAFE for p in below)


def test_long_rows_and_empty_rows():
    rows = ["", "e\u0301" * 5000, "a" + "\u0301\u0323" * 3000, "\u1100\u1161\u11a8" * 2000, ""]
    check(rows)


def test_bad_offsets_are_refused():
    with pytest.raises(ValueError, match="offsets"):
        nfc_data.normalize_batch(b"abc", np.array([0, 2], np.int64))
    with pytest.raises(ValueError, match="non-decreasing"):
        nfc_data.normalize_batch(b"abc", np.array([0, 2, 1, 3], np.int64))


def test_bad_operand_is_refused():
    from blockbpe_jax import native

    bad = nfc_data.operand().copy()
    bad[1] += 1  # n_blocks no longer fits the size
    with pytest.raises(ValueError, match="operand"):
        native.cpu.nfc_normalize(np.zeros(1, np.uint8), np.array([0, 1], np.int64), bad)


# ---------------------------------------------------------------------------------------------
# The encode on text not in NFC: the executors normalize each row (CPU executor here, the CUDA
# pre-pass where a GPU is visible), the ids HF tokenizers' on the same tokenizer.json.

NOT_NFC = [
    "cafe\u0301 na\u0308ive re\u0301sume\u0301",
    "a\u0301\u0323 q\u0307\u0323 \u1e0a\u0323",
    "\u1100\u1161\u11a8 \u1112\u1175 \uac00\u11a8 \u1100\u1161",
    "\u212b \u2126 \u212a \u0344 \u0958\u0959 \uf900",
    "\u0627\u064e\u0651 \u09c7\u09be \u0b47\u0b3e \u0e4d\u0e32",
    "\u03b1\u0313\u0300\u0345 \u1f00\u0300 \u03c9\u0342\u0345",
    "x<|end_of_text|>e\u0301 <|end_of_text|>",
    "x<|end_of_text|>\u0338 <|end_of_text|>\u0301e\u0301",
    "\U000105d2\u0307 \U0001d15e\U0001d165 \U000110a5\U000110ba",
    "plain ascii, then e\u0301 at the end e\u0301",
]


@fuzz(100)
@given(
    texts=st.lists(
        nfc_text | nfc_text.map(lambda s: s.encode("utf-8")) | raw_bytes() | st.just("a\ud800e\u0301"),
        max_size=8,
    )
)
def test_tokenizer_normalize(nfc_tok, texts):
    """Tokenizer.normalize (encode_batch's host step for reported rows, and the corpus job's):
    str and bytes, valid or not, lone surrogates, equal to the host path; NFC alone runs the
    native batch unless a str holds a lone surrogate."""
    want = [
        norm.nfc(t)
        if isinstance(t, str)
        else norm.nfc(t.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
        for t in texts
    ]
    assert nfc_tok[0].normalize(texts) == want


def hf_ids(hf, texts, allowed="all"):
    """HF's ids; with allowed "none", specials' text encoded as text (encode_special_tokens)."""
    hf.encode_special_tokens = allowed == "none"
    try:
        return [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    finally:
        hf.encode_special_tokens = False


def raw_ids(tok, texts, device, max_len, allowed="all"):
    """The primitive on the raw UTF-8 (no host normalization), T = max_len + 2."""
    import jax

    import blockbpe_jax as bb

    data, lengths = bb.pack_strings(texts, max_len=max_len)
    out = bb.encode(
        jax.device_put(data, device),
        jax.device_put(lengths, device),
        tok,
        max_tokens=max_len + 2,
        allowed_special=allowed,
    )
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    return [ids[i, : counts[i]].tolist() if counts[i] >= 0 else int(counts[i]) for i in range(len(texts))]


def check_raw(tok, hf, texts, device, allowed="all"):
    """Every row HF's ids; a row is reported (-2) only where its NFC is wider than the rows, or
    on a GPU in a call with specials where it may change and its rewrite may cross a special
    (the CUDA pre-pass reports such a row rather than rewrite it before the specials are
    matched: cuda/nfc_prepass.cuh)."""
    width = max(16, max(len(t.encode()) for t in texts))
    got, want = raw_ids(tok, texts, device, width, allowed), hf_ids(hf, texts, allowed)
    for t, g, w in zip(texts, got, want):
        if g == -2:
            may_change = norm.nfc(t) != t or documented_over_report(t)
            may_cross = device.platform == "gpu" and may_change and may_cross_special(tok, t, allowed)
            assert len(norm.nfc(t).encode()) > width or may_cross, f"reported, but its NFC fits: {t!r}"
        else:
            assert g == w, f"differs from HF on {t!r}"


def check_encode_batch(tok, hf, texts, device):
    ids, counts = tok.encode_batch(texts, device=device, allowed_special="all")
    ids, counts = np.asarray(ids), np.asarray(counts)
    got = [ids[i, : counts[i]].tolist() for i in range(len(texts))]
    assert got == hf_ids(hf, texts)


def test_encode_leaves_nfc_to_the_executors(nfc_tok):
    """encode_batch sends the raw text (the tables carry the normalization operand)."""
    tok, _ = nfc_tok
    assert tok._normalized(["e\u0301"], "exact")[:2] == (["e\u0301"], False)
    nfc_pairs = tok.host_tables()[TABLE_OPERANDS.index("nfc_pairs")]
    assert nfc_pairs.size % 2 == 1  # (the operand's odd count)


def test_raw_bytes_cpu(nfc_tok, data_dir):
    import jax

    tok, hf = nfc_tok
    texts = NOT_NFC + [norm.nfc(t) for t in NOT_NFC] + corpus_texts(data_dir, 2, seed=5)
    check_raw(tok, hf, texts, jax.devices("cpu")[0])


def test_encode_batch_cpu(nfc_tok):
    import jax

    tok, hf = nfc_tok
    check_encode_batch(tok, hf, NOT_NFC, jax.devices("cpu")[0])


# Rows the executors report (their NFC outgrows the packed width; a segment of hundreds of
# marks), which encode_batch encodes again after normalizing them on the host.
REPORTED = ["\u0958" * 5 + "a", "a" + "\u0301" * 300 + " b", "short"]


def test_reported_rows_cpu(nfc_tok):
    import jax

    tok, hf = nfc_tok
    cpu = jax.devices("cpu")[0]
    got = raw_ids(tok, [REPORTED[0], REPORTED[2]], cpu, 16)
    assert got[0] == -2 and got[1] == hf_ids(hf, REPORTED[2:])[0]  # 16 bytes -> 31
    assert raw_ids(tok, REPORTED[1:2], cpu, 1024) == [-2]  # 301 marks in one segment
    check_encode_batch(tok, hf, REPORTED, cpu)
    check_encode_batch(tok, hf, REPORTED[:1], cpu)  # its NFC outgrows the batch's width
    check_encode_batch(tok, hf, ["x" * 3000, REPORTED[1]], cpu)  # reported rows packed narrower


def test_reported_rows_with_surrogates_cpu(nfc_tok):
    """Reported rows and others holding surrogates: encoded as tiktoken reads such strs (a
    pair joined into its code point, a lone one U+FFFD), the reported ones normalized on the
    host from their raw text."""
    import jax

    tok, hf = nfc_tok
    texts = [
        "\u0958" * 5 + "a\ud83d",
        "\ud83d\udc4da" + "\u0301" * 300 + " b\ud800",
        "short \udfff",
        "\ud83d\udc4d e\u0301",
    ]
    ids, counts = tok.encode_batch(texts, device=jax.devices("cpu")[0], max_len=16 * 1024)
    ids, counts = np.asarray(ids), np.asarray(counts)
    assert [ids[i, : counts[i]].tolist() for i in range(len(texts))] == hf_ids(hf, without_surrogates(texts))
    assert raw_ids(tok, [without_surrogates(texts)[1]], jax.devices("cpu")[0], 2048) == [-2]


def check_encode_stream(tok, hf, batches, device):
    """encode_stream (each batch's reported rows fixed once the next is dispatched) gives
    HF's ids for every batch, in order."""
    outs = list(tok.encode_stream(batches, device=device, allowed_special="all"))
    assert len(outs) == len(batches)
    for texts, (ids, counts) in zip(batches, outs):
        ids, counts = np.asarray(ids), np.asarray(counts)
        assert [ids[i, : counts[i]].tolist() for i in range(len(texts))] == hf_ids(hf, texts)


def test_encode_stream_cpu(nfc_tok):
    import jax

    tok, hf = nfc_tok
    batches = [NOT_NFC, REPORTED, REPORTED[:1], ["plain"], ["x" * 3000, REPORTED[1]]]
    check_encode_stream(tok, hf, batches, jax.devices("cpu")[0])


# Rows of each kind the CUDA pre-pass tells apart: in NFC (read where they are), rewritten by
# the block's threads in parts, rewritten whole by one thread (a segment longer than a thread's
# scratch: 100 marks on a letter), reported (a segment of 300 marks; NFC wider than the row).
MIXED_ROWS = (
    ["plain ascii", "caf\u00e9 \u201cquoted\u201d na\u00efve", "\u4e2d\u6587 \u0416 \U0001f600"]
    + NOT_NFC
    + ["a" + "\u0301" * 100 + " b e\u0301", "x" * 40 + "e\u0301" * 30, REPORTED[1], "\u0958 " * 100]
)


@fuzz(40)
@given(texts=st.lists(nfc_text, min_size=1, max_size=8))
def test_fuzz_encode_cpu(nfc_tok, texts):
    import jax

    tok, hf = nfc_tok
    texts = [t for t in texts if t] or ["x"]
    check_raw(tok, hf, texts, jax.devices("cpu")[0])
    check_encode_batch(tok, hf, texts, jax.devices("cpu")[0])


GPU = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


@GPU
@pytest.mark.gpu
def test_raw_bytes_gpu(nfc_tok, data_dir):
    """The CUDA pre-pass (ffi/cuda/nfc_prepass.cuh): raw bytes not in NFC give HF's ids, short
    rows and long rows (the tile pipeline) alike, and the same counts as the CPU executor."""
    import jax

    tok, hf = nfc_tok
    gpu = gpu_devices()[0]
    texts = NOT_NFC + [norm.nfc(t) for t in NOT_NFC] + corpus_texts(data_dir, 2, seed=5)
    long_rows = [" ".join(NOT_NFC) * 40, ("e\u0301 " * 3000) + "end"]  # > 8 KiB: tiles
    for allowed in ("none", "all"):  # (with specials, rows that may change are reported)
        check_raw(tok, hf, texts, gpu, allowed)
        check_raw(tok, hf, long_rows, gpu, allowed)
    for rows, width in (([REPORTED[0], REPORTED[2]], 16), (REPORTED[1:2], 1024), (NOT_NFC, 256)):
        cpu = jax.devices("cpu")[0]
        assert raw_ids(tok, rows, gpu, width, "none") == raw_ids(tok, rows, cpu, width, "none")


@GPU
@pytest.mark.gpu
@pytest.mark.parametrize("kernel", ["block", "piece"])
def test_mixed_rows_gpu(nfc_tok, data_dir, kernel, monkeypatch):
    """Rows in NFC, rewritten in parts, rewritten whole, reported and of a bad length in one
    batch: the same ids and counts as the CPU executor at widths that are and are not
    multiples of 16 (the pre-pass's word and byte paths), through the block kernel and the
    piece kernel (both read rows in NFC where they are; the rewritten ones go to encode_kernel's
    second launch), and HF's ids for the rows that fit."""
    import jax

    import blockbpe_jax as bb

    monkeypatch.setenv("BLOCKBPE_KERNEL", kernel)
    tok, hf = nfc_tok
    gpu, cpu = gpu_devices()[0], jax.devices("cpu")[0]
    excerpts = corpus_texts(data_dir, 2, seed=7)
    rows = MIXED_ROWS + [t.encode()[:600].decode("utf-8", "ignore") for t in excerpts]
    for width in (608, 1000, 1024):  # (the longest row has 603 bytes; one's NFC 700)
        # (no specials: with them the pre-pass reports the rows it would rewrite)
        assert raw_ids(tok, rows, gpu, width, "none") == raw_ids(tok, rows, cpu, width, "none"), width
        # no specials (the piece kernel's calls), a bad length in an unchecked call
        data, lengths = bb.pack_strings(rows, max_len=width)
        bad = lengths.copy()
        bad[1] = -1
        got = bb.encode(*jax.device_put((data, bad), gpu), tok, max_tokens=width + 2, check_lengths=False)
        want = bb.encode(*jax.device_put((data, lengths), cpu), tok, max_tokens=width + 2)
        (ids, counts), (want_ids, want_counts) = got.numpy(), want.numpy()
        assert counts[1] == -1
        keep = np.arange(len(rows)) != 1
        np.testing.assert_array_equal(counts[keep], want_counts[keep])
        np.testing.assert_array_equal(ids[keep], want_ids[keep])
    check_raw(tok, hf, [r for r in rows + excerpts if r != REPORTED[1]], gpu, "none")  # (it: 300 marks)


@GPU
@pytest.mark.gpu
def test_encode_stream_gpu(nfc_tok, data_dir):
    tok, hf = nfc_tok
    texts = corpus_texts(data_dir, 2, seed=8)
    batches = [NOT_NFC, texts, REPORTED, REPORTED[:1], MIXED_ROWS, ["x" * 3000, REPORTED[1]], texts]
    check_encode_stream(tok, hf, batches, gpu_devices()[0])


@GPU
@pytest.mark.gpu
def test_encode_batch_gpu(nfc_tok, data_dir):
    tok, hf = nfc_tok
    gpu = gpu_devices()[0]
    check_encode_batch(tok, hf, NOT_NFC + REPORTED + corpus_texts(data_dir, 2, seed=6), gpu)
    check_encode_batch(tok, hf, REPORTED[:1], gpu)
    check_encode_batch(tok, hf, ["x" * 3000, REPORTED[1]], gpu)


@GPU
@pytest.mark.gpu
@fuzz(60)
@given(texts=st.lists(nfc_text, min_size=1, max_size=8))
def test_fuzz_encode_gpu(nfc_tok, texts):
    tok, hf = nfc_tok
    texts = [t for t in texts if t] or ["x"]
    check_raw(tok, hf, texts, gpu_devices()[0])
    check_encode_batch(tok, hf, texts, gpu_devices()[0])
