#!/usr/bin/env python3
"""Generate the Unicode tables of blockbpe_jax/pretok, each at the Unicode version of the
reference it must equal (tiktoken and HF tokenizers do not use one version throughout):

  unicode_regex16.npz   the pre-tokenizer regexes' classes: Unicode 16.0.0, what tiktoken 0.14.0
                        (fancy-regex over Rust's regex crate) and HF tokenizers 0.23.3 (Oniguruma)
                        both use
      gc      uint8[0x110000]  General_Category, an index into gc_names (unicodedata2 16.0.0)
      ws      bool[0x110000]   White_Space (what `\\s` means in both engines)
      scripts uint8[0x110000]  Script, an index into script_names (0 = any other script), from
                               the `regex` module restricted to code points assigned in 16.0.0
      fold    int32[K, 2]      (code point, the smallest code point of its (?i) orbit) for every
                               code point whose orbit is not itself: simple case folding as
                               both engines apply it, probed through tiktoken (Python's own
                               str.casefold is 14.0.0 and misses 60 relations, e.g. U+1C89)
      multi_fold int32[K, 4]   (code point, its multi-character case fold, -1 padded): what
                               Oniguruma's (?i) also matches (`(?i)ß` matches "ss"; not in
                               fancy-regex), probed through tokenizers
  unicode_nfc9.npz      NFC: Unicode 9.0.0, what tokenizers 0.23.3's NFC normalizer uses (its
                        unicode-normalization-alignments crate; it leaves the 21 canonical pairs
                        of Unicode 13.0-16.0 uncomposed and knows no combining class assigned
                        since 9.0), from unicodedata2 9.0.0
      ccc, nfc_qc, nfc_pairs, nfc_composites, nfc_decomp, nfc_trail (see below), assigned bool[0x110000] (code points
      assigned in 9.0.0: the host NFC leaves newer ones alone, as the reference does)
  unicode_lower17.npz   HF's Lowercase normalizer (Rust's char::to_lowercase, per code point,
                        no final-sigma rule): Unicode 17.0.0 in tokenizers 0.23.3, probed
                        through tokenizers itself
      lowercase int32[K, 3]    (code point, its lowercase as 1 or 2 code points, -1 for none)

  nfc_qc    NFC_Quick_Check: 0 Yes, 1 Maybe, 2 No (No = the code point alone is not NFC; Maybe =
            the second code point of a primary composite, and the Hangul V and T jamo)
  nfc_pairs the (first, second) code points of every primary composite, sorted
  nfc_composites  the composite of each row of nfc_pairs
  nfc_decomp      int32[K, 5]: (code point, its full canonical decomposition, -1 padded) for
            every code point with one, Hangul syllables aside (the normalizer decomposes those
            by their arithmetic): what ffi/pretok/nfc_normalize.h decomposes by
  nfc_trail starters whose canonical decomposition ends in a non-starter

Each file has `meta` (JSON: the Unicode version, the sources, the reference versions it was
checked against) and fingerprints: code points new in each Unicode version (assigned, with a
combining class, a composition pair, an uppercase letter), from which blockbpe_jax/pretok/
unicode.py tells the Unicode version of an installed reference of another release and warns
when it differs from the table's.

The Unicode versions come from unicodedata2 releases (PyPI): the installed one, wheels, or an
sdist built here (9.0.0.post4 needs two one-line fixes for Python 3.11, applied on the fly).
The probes need tiktoken==0.14.0 and tokenizers==0.23.3 (their Unicode versions are the point),
the scripts regex==2026.5.9 (a later release may know another Unicode version's scripts).

Usage: pip install unicodedata2==16.0.0 regex==2026.5.9 tiktoken==0.14.0 tokenizers==0.23.3
       python scripts/gen_unicode_data.py [--check] [--cache DIR]
(The other unicodedata2 releases are fetched with pip into the cache, ~/.cache/blockbpe_jax/
unicodedata2 by default; the first run takes about a minute.)
"""

from __future__ import annotations

import argparse
import io
import json
import os
import pathlib
import subprocess
import sys

import numpy as np

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from unicodedata_releases import unicode_data  # noqa: E402

GC_NAMES = (
    "Cn Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co"
).split()
# Scripts a pre-tokenizer pattern may name (\p{Han}, \p{Hiragana}, ...).
SCRIPT_NAMES = (
    "Other Latin Greek Cyrillic Armenian Hebrew Arabic Devanagari Bengali Thai "
    "Hangul Hiragana Katakana Han Common Inherited"
).split()
WHITE_SPACE = (
    list(range(0x09, 0x0E))
    + [0x20, 0x85, 0xA0, 0x1680]
    + list(range(0x2000, 0x200B))
    + [0x2028, 0x2029, 0x202F, 0x205F, 0x3000]
)
PRETOK = pathlib.Path(__file__).resolve().parent.parent / "blockbpe_jax" / "pretok"
REGEX_VERSION, NFC_VERSION = "16.0.0", "9.0.0"
REFERENCES = {"tiktoken": "0.14.0", "tokenizers": "0.23.3", "regex": "2026.5.9"}  # (regex: the scripts)
# Unicode versions whose data the fingerprints come from (pip spec of each unicodedata2).
VERSIONS = {
    "9.0.0": "9.0.0.post4",
    "14.0.0": "14.0.0",
    "15.0.0": "15.0.0",
    "15.1.0": "15.1.0",
    "16.0.0": "16.0.0",
    "17.0.0": "17.0.1",
    "18.0.0": "18.0.0",
}
FINGERPRINTS_PER_VERSION = 6
EXIT_WRONG_VERSION = 3  # (--check cannot tell here: the tests skip)
DEFAULT_CACHE = (
    pathlib.Path(os.environ.get("BLOCKBPE_CACHE_DIR") or pathlib.Path.home() / ".cache" / "blockbpe_jax")
    / "unicodedata2"
)


def wrong_version(message: str):
    print(message, file=sys.stderr)
    sys.exit(EXIT_WRONG_VERSION)


# ---------------------------------------------------------------------------------------------
# Probes through the references

RANKS = {bytes([i]): i for i in range(256)}


def tiktoken_matches(pattern: str, text: str) -> set[int]:
    import tiktoken

    enc = tiktoken.Encoding("probe", pat_str=pattern, mergeable_ranks=RANKS, special_tokens={})
    return set(map(ord, bytes(enc.encode_ordinary(text)).decode("utf-8")))


def hf_matches(pattern: str, text: str) -> list[str]:
    """The texts of HF Split's matches of `pattern` in `text` (the gaps are what Removed keeps)."""
    from tokenizers import Regex, pre_tokenizers

    iso = pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
    gaps = {o for _, o in pre_tokenizers.Split(Regex(pattern), "removed").pre_tokenize_str(text)}
    return [s for s, o in iso if o not in gaps]


def case_candidates() -> list[int]:
    """Code points whose case mapping changes them (Unicode 17 by the `regex` module: a superset
    of those of Unicode 16)."""
    import regex

    text = "".join(chr(c) for c in range(0x110000) if not 0xD800 <= c < 0xE000)
    return sorted({ord(m) for m in regex.findall(r"\p{Changes_When_Casemapped}", text)})


def fold_tables(cands: list[int]) -> tuple[np.ndarray, np.ndarray]:
    """(fold, multi_fold) as probed: tiktoken's (?i) orbit of every candidate (tokenizers' is
    checked equal on single code points), and the multi-character strings tokenizers' (?i)
    matches for each."""
    text = "\x00".join(chr(c) for c in cands)
    orbit_of = {}
    for c in cands:
        got = tiktoken_matches(r"(?i)\x{%x}" % c, text) | {c}
        hf = {ord(s) for s in hf_matches(r"(?i)\x{%x}" % c, text) if len(s) == 1} | {c}
        assert got == hf, f"(?i) U+{c:04X}: tiktoken {sorted(got)} tokenizers {sorted(hf)}"
        orbit_of[c] = min(got)
    # every member of a non-trivial orbit, with its orbit's smallest member
    members: dict[int, set[int]] = {}
    for c, r in orbit_of.items():
        members.setdefault(r, set()).add(c)
    rows = sorted((c, r) for r, ms in members.items() if len(ms) > 1 for c in ms)
    fold = np.array(rows, np.int32).reshape(-1, 2)
    # multi-character folds: Python's str.casefold (Unicode 14) proposes, tokenizers decides
    strings = sorted({chr(c).casefold() for c in cands if len(chr(c).casefold()) > 1})
    variants = sorted({v for s in strings for v in (s, s.upper(), s.title())})
    probe = "\x00".join(variants)
    multi = []
    for c in cands:
        hits = {s.casefold() for s in hf_matches(r"(?i)\x{%x}" % c, probe) if len(s) > 1}
        if hits:
            assert len(hits) == 1, (hex(c), hits)
            (s,) = hits
            assert len(s) <= 3, (hex(c), s)
            multi.append([c] + [ord(x) for x in s] + [-1] * (3 - len(s)))
    return fold, np.array(multi, np.int32).reshape(-1, 4)


def lowercase_table() -> np.ndarray:
    from tokenizers import normalizers

    lower = normalizers.Lowercase()
    rows = []
    for cp in range(0x110000):
        if not 0xD800 <= cp < 0xE000 and (low := lower.normalize_str(chr(cp))) != chr(cp):
            assert len(low) <= 2, (cp, low)
            rows.append([cp, ord(low[0]), ord(low[1]) if len(low) > 1 else -1])
    return np.array(rows, np.int32).reshape(-1, 3)


# ---------------------------------------------------------------------------------------------
# Fingerprints: what is new in each version


def fingerprints(data: dict[str, dict[str, np.ndarray]]) -> dict[str, np.ndarray]:
    """Per version (an index into fp_versions): code points first assigned then (fp_assigned),
    first given a combining class > 1 (fp_marks), composition pairs first composed (fp_pairs),
    uppercase or titlecase letters first assigned (fp_upper)."""
    versions = list(data)
    assigned, marks, pairs, upper = [], [], [], []
    k = FINGERPRINTS_PER_VERSION
    for v, version in enumerate(versions):
        d = data[version]
        prev = data[versions[v - 1]] if v else None
        is_new = d["gc"] != 0 if prev is None else (d["gc"] != 0) & (prev["gc"] == 0)
        is_new[0xD800:0xE000] = False
        new = np.flatnonzero(is_new)
        if prev is None:  # the oldest: a spread of what any later reference knows too
            new = new[np.linspace(0, len(new) - 1, 50).astype(int)]
        assigned += [(v, int(c)) for c in new[np.linspace(0, len(new) - 1, min(k, len(new))).astype(int)]]
        m = np.flatnonzero(is_new & (d["ccc"] > 1))
        if prev is None:
            m = np.flatnonzero(d["ccc"] > 1)
        marks += [(v, int(c)) for c in m[np.linspace(0, len(m) - 1, min(k, len(m))).astype(int)]]
        old_pairs = set() if prev is None else set(map(tuple, prev["nfc_pairs"].tolist()))
        new_pairs = [tuple(p) for p in d["nfc_pairs"].tolist() if tuple(p) not in old_pairs]
        pairs += [(v, a, b) for a, b in new_pairs[:: max(1, len(new_pairs) // k)][:k]]
        u = np.flatnonzero(is_new & np.isin(d["gc"], [GC_NAMES.index("Lu"), GC_NAMES.index("Lt")]))
        upper += [(v, int(c)) for c in u[np.linspace(0, len(u) - 1, min(k, len(u))).astype(int)]]
    return {
        "fp_versions": np.array(versions),
        "fp_assigned": np.array(assigned, np.int32).reshape(-1, 2),
        "fp_marks": np.array(marks, np.int32).reshape(-1, 2),
        "fp_pairs": np.array(pairs, np.int32).reshape(-1, 3),
        "fp_upper": np.array(upper, np.int32).reshape(-1, 2),
    }


def newest_known(fp_versions, rows, known) -> str:
    """The newest version all of whose fingerprint rows `known(row)` accepts (the oldest if none)."""
    best = str(fp_versions[0])
    for v, version in enumerate(fp_versions):
        mine = [r for r in rows if r[0] == v]
        if mine and all(known(r) for r in mine):
            best = str(version)
    return best


def meta_array(unicode: str, sources: str, references: dict) -> np.ndarray:
    """A table's "meta" entry: its Unicode version, where its data came from and the reference
    versions it was checked against, as JSON (blockbpe_jax/pretok/versions.py reads it)."""
    return np.array(
        json.dumps({"unicode": unicode, "sources": sources, "references": references}, sort_keys=True)
    )


def build(cache: pathlib.Path) -> dict[str, dict[str, np.ndarray]]:
    import regex
    import tiktoken
    import tokenizers

    for name, module in (("tiktoken", tiktoken), ("tokenizers", tokenizers), ("regex", regex)):
        if module.__version__ != REFERENCES[name]:
            wrong_version(f"{name} is {module.__version__}, need {REFERENCES[name]}")
    data = {v: unicode_data(v, spec, cache, GC_NAMES) for v, spec in VERSIONS.items()}
    fp = fingerprints(data)
    u16, u9 = data[REGEX_VERSION], data[NFC_VERSION]

    # The regex classes
    ws = np.zeros(0x110000, bool)
    ws[WHITE_SPACE] = True
    scripts = np.zeros(0x110000, np.uint8)
    text = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000)
    cps = np.array([ord(ch) for ch in text], np.int64)
    for k, name in enumerate(SCRIPT_NAMES[1:], start=1):
        for m in regex.finditer(rf"\p{{Script={name}}}+", text):
            scripts[cps[m.start() : m.end()]] = k
    scripts[u16["gc"] == 0] = 0
    fold, multi = fold_tables(case_candidates())
    # the engines' Unicode version, from which fingerprint code points they call assigned
    fp_text = "\x00".join(chr(c) for _, c in fp["fp_assigned"])
    tk = tiktoken_matches(r"\P{Cn}", fp_text)
    hf = {ord(s) for s in hf_matches(r"\P{Cn}", fp_text)}
    for name, got in (("tiktoken", tk), ("tokenizers", hf)):
        version = newest_known(fp["fp_versions"], fp["fp_assigned"].tolist(), lambda r: r[1] in got)
        if version != REGEX_VERSION:
            wrong_version(f"{name}'s regex engine is Unicode {version}, expected {REGEX_VERSION}")
    regex_meta = {
        "unicode": REGEX_VERSION,
        "sources": f"unicodedata2 {REGEX_VERSION} (categories); regex {regex.__version__} (scripts); "
        f"case folding probed through tiktoken {tiktoken.__version__} and tokenizers "
        f"{tokenizers.__version__}",
        "references": {"tiktoken": tiktoken.__version__, "tokenizers": tokenizers.__version__},
    }
    out = {
        "unicode_regex16.npz": {
            "gc": u16["gc"],
            "ws": ws,
            "scripts": scripts,
            "fold": fold,
            "multi_fold": multi,
            "gc_names": np.array(GC_NAMES),
            "script_names": np.array(SCRIPT_NAMES),
            "meta": meta_array(**regex_meta),
            "fp_versions": fp["fp_versions"],
            "fp_assigned": fp["fp_assigned"],
        }
    }

    # NFC, at tokenizers' version
    from tokenizers import normalizers

    nfc = normalizers.NFC()
    probes = [("a" + chr(m) + "\u0334", "a\u0334" + chr(m)) for _, m in fp["fp_marks"]]
    got = nfc.normalize_str("\x00".join(p for p, _ in probes)).split("\x00")
    reordered = {int(m) for (_, m), g, (_, r) in zip(fp["fp_marks"], got, probes) if g == r}
    version_marks = newest_known(fp["fp_versions"], fp["fp_marks"].tolist(), lambda r: r[1] in reordered)
    if version_marks != NFC_VERSION:
        wrong_version(
            f"tokenizers' NFC knows combining classes of Unicode {version_marks}, expected {NFC_VERSION}"
        )
    out["unicode_nfc9.npz"] = {
        "ccc": u9["ccc"],
        "nfc_qc": u9["nfc_qc"],
        "nfc_pairs": u9["nfc_pairs"],
        "nfc_trail": u9["nfc_trail"],
        "nfc_composites": u9["nfc_composites"],
        "nfc_decomp": u9["nfc_decomp"],
        "assigned": u9["gc"] != 0,
        "meta": meta_array(
            unicode=NFC_VERSION,
            sources=f"unicodedata2 {VERSIONS[NFC_VERSION]}",
            references={"tokenizers": tokenizers.__version__},
        ),
        "fp_versions": fp["fp_versions"],
        "fp_marks": fp["fp_marks"],
        "fp_pairs": fp["fp_pairs"],
    }

    # Lowercase, probed; its version from which new uppercase letters it lowercases
    lowercase = lowercase_table()
    changed = set(lowercase[:, 0].tolist())
    lower_version = newest_known(fp["fp_versions"], fp["fp_upper"].tolist(), lambda r: r[1] in changed)
    out[f"unicode_lower{lower_version.split('.')[0]}.npz"] = {
        "lowercase": lowercase,
        "meta": meta_array(
            unicode=lower_version,
            sources=f"tokenizers {tokenizers.__version__} Lowercase, probed per code point",
            references={"tokenizers": tokenizers.__version__},
        ),
        "fp_versions": fp["fp_versions"],
        "fp_upper": fp["fp_upper"],
    }
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if a file on disk differs (3: the pinned versions are not installed)",
    )
    ap.add_argument(
        "--cache",
        default=str(DEFAULT_CACHE),
        help=f"where to keep the unicodedata2 builds and dumps (default {DEFAULT_CACHE})",
    )
    args = ap.parse_args()
    cache = pathlib.Path(args.cache)
    cache.mkdir(parents=True, exist_ok=True)
    try:
        files = build(cache)
    except subprocess.CalledProcessError as e:
        wrong_version(f"could not get a unicodedata2 release ({e}); PyPI and a C compiler are needed")
    if args.check:
        same = True
        for name, data in files.items():
            path = PRETOK / name
            if not path.exists():
                print(f"{name}: missing")
                same = False
                continue
            with np.load(path) as old:
                ok = set(old.files) == set(data) and all(np.array_equal(old[k], v) for k, v in data.items())
            print(f"{name}: {'up to date' if ok else 'differs'}")
            same &= ok
        sys.exit(0 if same else 1)
    for name, data in files.items():
        buf = io.BytesIO()
        np.savez_compressed(buf, **data)
        (PRETOK / name).write_bytes(buf.getvalue())
        print(f"wrote {PRETOK / name} ({len(buf.getvalue())} bytes)")


if __name__ == "__main__":
    main()
