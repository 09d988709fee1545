"""The host's normalizer over a batch (tables.sets.normalize_texts: NFC and Lowercase natively,
pretok/nfc_data.py and pretok/lower_data.py, the executors' rules of ffi/pretok/nfc_normalize.h
and lowercase.h) against the host path per text (normalizer.apply) and the reference, HF
tokenizers' normalizers, in every step order: every code point, hypothesis-generated text of
every kind of code point Lowercase and NFC treat differently (final sigma, the code points
whose lowercase the executors do not rewrite in place, combining marks, astral letters),
invalid UTF-8, empty rows, mixed str and bytes, lone surrogates."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbpe_jax.pretok import lower_data
from blockbpe_jax.pretok import normalizer as norm
from blockbpe_jax.pretok import unicode as uni
from blockbpe_jax.tables import sets

from strategies import ANY_CHAR, NFC_CHARS, fuzz, raw_bytes

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import normalizers  # noqa: E402

CODE_POINTS = [int(c) for c in np.flatnonzero(uni.SCALAR_VALUES) if c]
SEP = "\x00"  # inert to both steps: rows joined by it normalize each on its own
FLAGGED = [int(c) for c in np.flatnonzero(norm.lower_tables()[0] == norm.LOWER_FLAG)]
ORDERS = [("lowercase",), ("nfc", "lowercase"), ("lowercase", "nfc"), ("nfc",)]
_HF_STEP = {"nfc": normalizers.NFC, "lowercase": normalizers.Lowercase}


def hf_normalizer(steps: tuple[str, ...]):
    return normalizers.Sequence([_HF_STEP[s]() for s in steps])


def hf_batch(steps: tuple[str, ...], texts: list[str]) -> list[str]:
    """The reference on many texts at once (SEP-joined)."""
    return hf_normalizer(steps).normalize_str(SEP.join(texts)).split(SEP)


def host(steps: tuple[str, ...], t):
    """normalizer.apply on one text; bytes as normalize_texts reads them (surrogateescape)."""
    n = norm.Normalizer(steps)
    if isinstance(t, bytes):
        return norm.apply(n, t.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
    return norm.apply(n, t) if isinstance(t, str) else t


def ours(steps: tuple[str, ...], texts: list) -> list:
    return sets.normalize_texts(norm.Normalizer(steps), texts)


def check(steps: tuple[str, ...], texts: list):
    """Ours equals the host path per text, and the reference on every valid text."""
    got = ours(steps, texts)
    assert [type(g) for g in got] == [type(t) for t in texts]
    want = [host(steps, t) for t in texts]
    bad = [(t, g, w) for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, f"{len(bad)} differ from normalizer.apply, first {[ascii(x) for x in bad[0]]}"
    valid = [k for k, t in enumerate(texts) if _valid_text(t) is not None and SEP not in _valid_text(t)]
    ref = hf_batch(steps, [_valid_text(texts[k]) for k in valid])
    for k, r in zip(valid, ref):
        g = got[k] if isinstance(got[k], str) else got[k].decode("utf-8")
        assert g == r, f"differs from tokenizers' {steps}: {ascii(texts[k])}"


def _valid_text(t) -> str | None:
    if isinstance(t, bytes):
        try:
            return t.decode("utf-8")
        except UnicodeDecodeError:
            return None
    if isinstance(t, str) and not any(0xD800 <= ord(c) < 0xE000 for c in t):
        return t
    return None


@pytest.mark.parametrize("steps", ORDERS, ids=",".join)
def test_every_code_point(steps):
    """Every code point in rows of 64, each row as str and as bytes."""
    texts = ["".join(map(chr, CODE_POINTS[k : k + 64])) for k in range(0, len(CODE_POINTS), 64)]
    got = ours(steps, texts)
    assert got == hf_batch(steps, texts)
    assert got == [host(steps, t) for t in texts]
    assert ours(steps, [t.encode("utf-8") for t in texts]) == [g.encode("utf-8") for g in got]


@pytest.mark.parametrize("steps", ORDERS, ids=",".join)
def test_flagged_code_points_in_context(steps):
    """Each code point whose lowercase the executors do not rewrite in place, alone, between
    cased letters and before a mark (U+212B's NFC is U+00C5, whose lowercase composes)."""
    assert len(FLAGGED) == 27 and {0x130, 0x2126, 0x212A, 0x212B} <= set(FLAGGED)
    texts = [f(chr(c)) for c in FLAGGED for f in (str, "ABC{}Σ".format, "{}\u0301x".format)]
    check(steps, texts)
    check(steps, [t.encode("utf-8") for t in texts])


def test_lowercase_batch_flags_exactly():
    """lowercase_batch rewrites a row in place unless it holds a flagged code point, and then
    leaves it as it came; the rows it rewrites are normalizer.lowercase's."""
    rows = [chr(c) for c in CODE_POINTS[::7]] + ["AÀ" + chr(c) + "ΣZ" for c in FLAGGED] + ["", "AbC"]
    raw = [r.encode("utf-8") for r in rows]
    offsets = np.cumsum([0] + [len(r) for r in raw])
    data, flagged = lower_data.lowercase_batch(b"".join(raw), offsets)
    assert flagged.tolist() == [any(ord(c) in FLAGGED for c in r) for r in rows]
    for k, r in enumerate(rows):
        got = data[offsets[k] : offsets[k + 1]].tobytes()
        assert got == (raw[k] if flagged[k] else norm.lowercase(r).encode("utf-8")), ascii(r)


def test_flagged_rows_take_the_fallback(monkeypatch):
    """Only the flagged rows go through normalizer.lowercase, once per Lowercase step (after
    NFC, U+2126 and U+212A are U+03A9 and "K", which lowercase in place)."""
    calls = []

    def counted(row: bytes) -> bytes:
        calls.append(row)
        return fallback(row)

    fallback = sets._lowercase_row
    monkeypatch.setattr(sets, "_lowercase_row", counted)
    texts = ["Hello ΣΑΣ", "İSTANBUL", b"\xff\xe2\x84\xa6 OHM", "Kelvin \u212a", "plain", b""]
    for steps, fallbacks in zip(ORDERS, (3, 1, 3, 0)):
        calls.clear()
        check(steps, texts)
        assert len(calls) == fallbacks, steps


def test_rows_over_host_threads():
    """A batch of MBs (split over the host's threads) equals the host path per text."""
    rng = np.random.default_rng(5)
    pool = "AbΣσςÀÉЖжΩ中 \u0301e\U00010400\U0001d400" + "".join(chr(c) for c in FLAGGED[:4])
    texts = ["".join(rng.choice(list(pool), size=int(n))) for n in rng.integers(0, 3000, size=800)]
    for steps in ORDERS:
        assert ours(steps, texts) == [host(steps, t) for t in texts], steps


def test_non_text_items_and_lone_surrogates():
    """A str with a lone surrogate goes through normalizer.apply; an item neither str nor
    bytes comes back as it is; the other rows still normalize natively, in their order."""
    texts = ["A\ud800É\u0301", 7, "ÀB", b"\xc3\x80\xff", None, "", "İ\udcff"]
    for steps in ORDERS:
        got = ours(steps, texts)
        assert got == [host(steps, t) for t in texts]
        assert got[1] == 7 and got[4] is None


@pytest.mark.parametrize("steps", ORDERS + [()], ids=lambda s: ",".join(s) or "none")
def test_empty(steps):
    assert ours(steps, []) == []
    assert ours(steps, ["", b""]) == ["", b""]


def test_bad_operand_is_refused():
    from blockbpe_jax import native

    with pytest.raises(ValueError, match="operand"):
        native.cpu.lowercase_batch(
            np.frombuffer(b"A", np.uint8), np.array([0, 1], np.int64), lower_data.operand()[:-1]
        )
    with pytest.raises(ValueError, match="offsets"):
        lower_data.lowercase_batch(b"abc", np.array([0, 2, 1, 3], np.int64))
    with pytest.raises(ValueError, match="offsets"):
        lower_data.lowercase_batch(b"abc", np.array([0, 2], np.int64))


# Code points the two steps treat differently: ASCII, Latin-1, Greek (final sigma: Lowercase
# has no context), Cyrillic, CJK, the flagged ones, combining marks (and NFC's), astral cased
# letters (Deseret, Adlam) and astral uncased ones.
CASE_CHARS = st.sampled_from(
    list("AZaz09 '\n\t.ÀÉÖØÞßÿµ")
    + list("ΑΣσςΟΔΆΐΰϴϐ")
    + list("ЖжЁЀЯѠ")
    + list("中日本語")
    + [chr(c) for c in FLAGGED]
    + list("\u0301\u0307\u0308\u030a\u0345")
    + ["\U00010400", "\U00010428", "\U0001e900", "\U0001d400", "\U0001f600"]
)
case_text = (
    st.lists(CASE_CHARS | NFC_CHARS | ANY_CHAR, max_size=40).map("".join).map(lambda s: s.replace(SEP, ""))
)
items = (
    case_text
    | case_text.map(lambda s: s.encode("utf-8"))
    | st.lists(case_text.map(lambda s: s.encode("utf-8")) | raw_bytes(), max_size=4).map(b"".join)
    | st.just("")
    | st.just(b"")
)


@fuzz(300)
@given(steps=st.sampled_from(ORDERS), texts=st.lists(items, max_size=10))
def test_fuzz(steps, texts):
    check(steps, texts)


@fuzz(100)
@given(
    steps=st.sampled_from(ORDERS),
    texts=st.lists(items | st.just("a\ud800E\u0301") | st.just(3), max_size=8),
)
def test_fuzz_with_items_not_native(steps, texts):
    check(steps, texts)
