"""The Unicode version of each reference (issue 57, item 2): our tables follow the version of the
reference they must equal (unicode.py; scripts/gen_unicode_data.py), tested on every code point
against the installed reference; an installed reference of another Unicode version is named in
a warning. NFC: HF tokenizers 0.23's normalizer is Unicode 9.0.0 (it leaves the 21 canonical
pairs of Unicode 13-16 uncomposed); Lowercase: 17.0.0; the regex classes of tiktoken's
fancy-regex and of HF's Oniguruma: 16.0.0. GPU variants run the same rows through the kernels."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import pretok
from blockbpe_jax.pretok import normalizer as norm
from blockbpe_jax.pretok import unicode as uni
from blockbpe_jax.pretok import versions

from helpers import device_for, documented_over_report, encode_raw, gpu_devices
from synthetic import BYTE_LEVEL, gpt2_doc, pre_tokenizer, split

tiktoken = pytest.importorskip("tiktoken")
tokenizers = pytest.importorskip("tokenizers")
from tokenizers import Regex, normalizers, pre_tokenizers  # noqa: E402

CODE_POINTS = np.flatnonzero(uni.SCALAR_VALUES)
SEP = "\x00"  # a starter that never composes, lowercases or falls in a class below
GPU = pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX")


def installed_ucd():
    """The newest unicodedata installed (unicodedata2 if present): where the probe strings for
    marks and pairs that the references may or may not know come from."""
    try:
        import unicodedata2 as ucd
    except ImportError:  # pragma: no cover
        import unicodedata as ucd
    return ucd


def rows_of(cps, per_row: int = 256) -> list[str]:
    cps = [int(c) for c in cps if c != 0]
    return [SEP.join(map(chr, cps[i : i + per_row])) for i in range(0, len(cps), per_row)]


def hf_batch(fn, strings: list[str]) -> list[str]:
    return [fn(s) for s in strings]


# ---------------------------------------------------------------------------------------------
# The tables' versions


def test_table_versions_are_named():
    assert uni.unicode_version("regex") == "16.0.0"
    assert uni.unicode_version("nfc") == "9.0.0"
    assert uni.unicode_version("lowercase") == "17.0.0"
    for group in ("regex", "nfc", "lowercase"):
        meta = uni.table_meta(group)
        assert meta["sources"] and meta["references"]


def test_installed_references_match_the_tables():
    """The fingerprints tell the installed references' versions: the tables' (when a reference
    of another release is installed, test_warning_names_both_versions shows what happens)."""
    for package, group in [
        ("tiktoken", "regex"),
        ("tokenizers", "regex"),
        ("tokenizers", "nfc"),
        ("tokenizers", "lowercase"),
    ]:
        assert versions.probe(package, group) == uni.unicode_version(group), (package, group)


# ---------------------------------------------------------------------------------------------
# NFC: the reproducer, then every code point, every mark, every composition pair


PAIR_REPRO = "\U00016d67\U00016d67"  # Unicode 16 composes it to U+16D68; tokenizers 0.23 does not


@pytest.fixture(scope="module")
def nfc_gpt2(data_dir):
    """(ours, HF's): GPT-2's tokenizer.json with an NFC normalizer."""
    doc = gpt2_doc(data_dir)
    doc["normalizer"] = {"type": "NFC"}
    hf = tokenizers.Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


def encode_both(tok, hf, texts, kind="cpu"):
    """(ours from encode_batch, ours from the raw primitive (count -2: reported), HF's)."""
    longest = max(len(t.encode("utf-8")) for t in texts)
    ids, counts = tok.encode_batch(
        texts, device=device_for(kind), max_tokens=longest + 2, allowed_special="all"
    )
    ids, counts = np.asarray(ids), np.asarray(counts)
    host = [ids[i, : counts[i]].tolist() for i in range(len(texts))]
    raw_ids, raw_counts = encode_raw(tok, texts, (kind, 256))
    raw = [raw_ids[i, : raw_counts[i]].tolist() if raw_counts[i] >= 0 else None for i in range(len(texts))]
    want = [e.ids for e in hf.encode_batch(texts, add_special_tokens=False)]
    return host, raw, want


def check_rows(tok, hf, texts, kind="cpu", transform=None):
    """encode_batch equals HF on every row; the raw primitive equals HF or reports the row, and
    reports only rows the host path changes (or the documented NFC over-report)."""
    host, raw, want = encode_both(tok, hf, texts, kind)
    bad = [t for t, h, w in zip(texts, host, want) if h != w]
    assert not bad, f"{len(bad)} rows differ from HF, first {bad[0][:60]!r}"
    for t, r, w in zip(texts, raw, want):
        if r is None:
            assert transform(t) != t or documented_over_report(t), f"reported, but unchanged: {t[:60]!r}"
        else:
            assert r == w, f"primitive differs from HF on {t[:60]!r}"


def test_nfc_pair_repro(nfc_gpt2):
    tok, hf = nfc_gpt2
    host, raw, want = encode_both(tok, hf, [PAIR_REPRO, "\U000105d2\u0307", "\U00011935\U00011930"])
    assert len(want[0]) == 8
    assert host == raw == want


def test_nfc_host_every_code_point():
    """norm.nfc (the host path) equals tokenizers' NFC on every code point."""
    nfc = normalizers.NFC().normalize_str
    rows = rows_of(CODE_POINTS, 4096)
    assert hf_batch(nfc, rows) == [norm.nfc(r) for r in rows]


def mark_probes() -> list[str]:
    """Reordering probes for every code point with a combining class (in our tables or the
    installed unicodedata), and every composition pair (ours and the installed unicodedata's),
    including those of Unicode versions the reference does not know."""
    ucd = installed_ucd()
    ccc = uni.ccc().astype(int)
    theirs = np.array([ucd.combining(chr(c)) for c in range(0x110000)])
    marks = np.flatnonzero((ccc > 0) | (theirs > 0))
    probes = []
    for m in marks.tolist():
        high = max(ccc[m], theirs[m]) > 1
        probes.append("a" + chr(m) + "\u0334" if high else "a\u0334" + chr(m) + "\u0335")
        probes.append("\u0627" + chr(m) + "\u0651\u064e")  # Arabic shadda/fatha around it
    pairs = {tuple(p) for p in uni.nfc_pairs().tolist()}
    for c in range(0x110000):
        d = ucd.decomposition(chr(c)) if not 0xD800 <= c < 0xE000 else ""
        parts = d.split()
        if len(parts) == 2 and not d.startswith("<"):
            pairs.add((int(parts[0], 16), int(parts[1], 16)))
    probes += [chr(a) + chr(b) for a, b in sorted(pairs)]
    probes += [chr(a) + "\u0334" + chr(b) for a, b in sorted(pairs)]  # a blocked or an unblocked mark
    return probes


def test_nfc_host_marks_and_pairs():
    nfc = normalizers.NFC().normalize_str
    probes = mark_probes()
    assert hf_batch(nfc, probes) == [norm.nfc(p) for p in probes]


def test_nfc_quick_check_tables_every_code_point():
    """The kernels' check: a code point alone is flagged No exactly where the reference's NFC
    changes it, Maybe on every second code point of a pair it composes."""
    nfc = normalizers.NFC().normalize_str
    cps = [int(c) for c in CODE_POINTS if c]
    out = hf_batch(nfc, [chr(c) for c in cps])
    changed = np.zeros(0x110000, bool)
    changed[[c for c, o in zip(cps, out) if o != chr(c)]] = True
    assert np.array_equal(changed, uni.nfc_quick_check() == 2)
    seconds = {b for _, b in uni.nfc_pairs().tolist()}
    assert all(uni.nfc_quick_check()[b] == 1 for b in seconds)


def nfc_rows() -> list[str]:
    return rows_of(CODE_POINTS, 512) + mark_probes()


def test_nfc_tokenizer_every_code_point(nfc_gpt2):
    """Every code point (in rows), every mark and pair probe: ours = HF's ids, through the host
    path and the primitive's check (CPU kernels)."""
    tok, hf = nfc_gpt2
    check_rows(tok, hf, nfc_rows(), "cpu", norm.nfc)


@GPU
@pytest.mark.gpu
def test_nfc_tokenizer_every_code_point_gpu(nfc_gpt2):
    tok, hf = nfc_gpt2
    check_rows(tok, hf, nfc_rows(), "gpu", norm.nfc)


# ---------------------------------------------------------------------------------------------
# Lowercase


@pytest.fixture(scope="module")
def lower_gpt2(data_dir):
    doc = gpt2_doc(data_dir)
    doc["normalizer"] = {"type": "Lowercase"}
    hf = tokenizers.Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


def test_lowercase_host_every_code_point():
    lower = normalizers.Lowercase().normalize_str
    rows = rows_of(CODE_POINTS, 4096)
    assert hf_batch(lower, rows) == [norm.lowercase(r) for r in rows]


def test_lowercase_tokenizer_every_code_point(lower_gpt2):
    tok, hf = lower_gpt2
    check_rows(tok, hf, rows_of(CODE_POINTS, 512), "cpu", norm.lowercase)


@GPU
@pytest.mark.gpu
def test_lowercase_tokenizer_every_code_point_gpu(lower_gpt2):
    tok, hf = lower_gpt2
    check_rows(tok, hf, rows_of(CODE_POINTS, 512), "gpu", norm.lowercase)


# ---------------------------------------------------------------------------------------------
# The regex classes: every supported property, both engines, every code point

GC = "Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Co Cn".split()
GROUPS = ["L", "LC", "M", "N", "P", "S", "Z", "C"]
LONG = ["Letter", "Uppercase_Letter", "Decimal_Number", "Punctuation", "Combining_Mark", "Other"]
SCRIPTS = [str(s) for s in uni._data()["script_names"][1:]]
PROPERTIES = [rf"\p{{{p}}}" for p in GC + GROUPS + LONG + SCRIPTS] + [
    r"\p{White_Space}",
    r"\p{Any}",
    r"\s",
    r"\d",
    r"\h",
    r"\P{L}",
    r"\p{^N}",
]
BIG = "".join(map(chr, CODE_POINTS))


def ours_set(pattern: str, flavour: str) -> np.ndarray:
    from blockbpe_jax.pretok import regex_syntax as rs

    tree = rs.parse(pattern, flavour)
    return tree.cs.mask


def tiktoken_set(pattern: str) -> np.ndarray:
    ranks = {bytes([i]): i for i in range(256)}
    enc = tiktoken.Encoding("probe", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
    mask = np.zeros(0x110000, bool)
    mask[[ord(c) for c in bytes(enc.encode_ordinary(BIG)).decode("utf-8")]] = True
    return mask


def hf_set(pattern: str) -> np.ndarray:
    gaps = pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(BIG)
    mask = uni.SCALAR_VALUES.copy()
    for _, (s, e) in gaps:
        mask[CODE_POINTS[s:e]] = False
    return mask


@pytest.mark.parametrize("pattern", PROPERTIES)
def test_property_every_code_point_both_engines(pattern):
    """\\p{..} and the set escapes: ours = tiktoken's = HF Split's, on every code point."""
    for flavour, engine in (("tiktoken", tiktoken_set), ("hf", hf_set)):
        got, want = ours_set(pattern, flavour), engine(pattern)
        diff = np.flatnonzero(got != want)
        assert not len(diff), f"{pattern} ({flavour}): {[hex(c) for c in diff[:10]]}"


def case_candidates() -> list[int]:
    return sorted(set(uni._data()["fold"][:, 0].tolist()) | set(uni.multi_char_folds()))


def test_case_folding_every_cased_code_point_both_engines():
    """(?i) on every code point with a case relation: ours (the probed orbits) = tiktoken's =
    HF Split's, on single code points."""
    cands = case_candidates()
    text = SEP.join(map(chr, cands))
    ranks = {bytes([i]): i for i in range(256)}
    for c in cands:
        pattern = r"(?i)\x{%x}" % c
        want = set(np.flatnonzero(uni.case_fold_closure(_one(c)).mask).tolist())
        enc = tiktoken.Encoding("probe", pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
        tk = set(map(ord, bytes(enc.encode_ordinary(text)).decode("utf-8")))
        gaps = {o for _, o in pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)}
        hf = {
            ord(s)
            for s, o in pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
            if o not in gaps and len(s) == 1
        }
        assert tk == hf == want, f"U+{c:04X}: tiktoken {sorted(tk ^ want)} hf {sorted(hf ^ want)}"


def _one(cp: int):
    from blockbpe_jax.pretok import regex_syntax as rs

    return rs.chars(cp)


def test_multi_char_folds_are_oniguruma_s():
    """Oniguruma's (?i) matches each listed code point's multi-character fold (what the hf
    dialect refuses), and fancy-regex's does not."""
    for cp, fold in uni.multi_char_folds().items():
        pieces = [
            s for s, _ in pre_tokenizers.Split(Regex(r"(?i)\x{%x}" % cp), "isolated").pre_tokenize_str(fold)
        ]
        assert pieces == [fold], (hex(cp), fold, pieces)


@pytest.fixture(scope="module")
def class_gpt2(data_dir):
    """GPT-2's tokenizer.json with Split(\\p{L}+|\\p{N}+|\\p{M}+|\\p{P}+|\\s+) (Isolated) + ByteLevel."""
    doc = gpt2_doc(data_dir)
    doc["pre_tokenizer"] = pre_tokenizer(
        [split(r"\p{Lu}+|\p{L}+|\p{N}+|\p{M}+|\p{P}+|\s+|\p{Han}+"), BYTE_LEVEL]
    )
    hf = tokenizers.Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


def check_classes(tok, hf, kind):
    texts = [r.replace(SEP, "") for r in rows_of(CODE_POINTS, 512)]
    host, _, want = encode_both(tok, hf, texts, kind)
    bad = [t for t, h, w in zip(texts, host, want) if h != w]
    assert not bad, f"{len(bad)} rows differ, first {bad[0][:40]!r}"


def test_classes_tokenizer_every_code_point(class_gpt2):
    tok, hf = class_gpt2
    check_classes(tok, hf, "cpu")


@GPU
@pytest.mark.gpu
def test_classes_tokenizer_every_code_point_gpu(class_gpt2):
    tok, hf = class_gpt2
    check_classes(tok, hf, "gpu")


# ---------------------------------------------------------------------------------------------
# An installed reference of another Unicode version: a warning naming both versions


def _fresh():
    versions.check_reference.cache_clear()


def test_same_release_is_silent():
    _fresh()
    with warnings.catch_warnings():
        warnings.simplefilter("error", versions.UnicodeVersionWarning)
        pretok.from_hf(
            {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "Isolated", "invert": False}
        )
        pretok.from_tiktoken_pattern(r"\s+|\S+")
        pretok.normalizer_from_hf(
            {"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Lowercase"}]}
        )


def test_other_release_same_unicode_is_silent(monkeypatch):
    """Another release of the reference is probed; the same Unicode version: no warning."""
    _fresh()
    monkeypatch.setattr(versions, "installed_version", lambda package: "0.0.0-other")
    with warnings.catch_warnings():
        warnings.simplefilter("error", versions.UnicodeVersionWarning)
        assert versions.check_references("tokenizers") == []
        assert versions.check_references("tiktoken") == []
    _fresh()


@pytest.mark.parametrize(
    "package, group",
    [("tokenizers", "nfc"), ("tokenizers", "lowercase"), ("tiktoken", "regex"), ("tokenizers", "regex")],
)
def test_warning_names_both_versions(monkeypatch, package, group):
    """A reference whose Unicode differs from the table's (simulated: the table claims another
    version) is named with both versions when a tokenizer is loaded."""
    _fresh()
    theirs = uni.unicode_version(group)  # (the installed reference's: the real table's)
    monkeypatch.setattr(versions, "installed_version", lambda p: "0.0.0-other")
    real = uni.table_meta

    def claimed(g):
        meta = dict(real(g))
        if g == group:
            meta["unicode"] = "15.1.0"
        return meta

    monkeypatch.setattr(uni, "table_meta", claimed)
    with pytest.warns(versions.UnicodeVersionWarning) as record:
        if package == "tiktoken":
            pretok.from_tiktoken_pattern(r"\s+|\S+")
        elif group == "regex":
            pretok.from_hf(
                {"type": "Split", "pattern": {"Regex": r"\s+"}, "behavior": "Isolated", "invert": False}
            )
        else:
            pretok.normalizer_from_hf({"type": "NFC" if group == "nfc" else "Lowercase"})
    text = str(record[0].message)
    assert f"Unicode {theirs}" in text and "Unicode 15.1.0" in text and package in text
    _fresh()
