#!/usr/bin/env python3
"""Generate blockbpe_jax/pretok/unicode16.npz: the Unicode properties the pre-tokenizer
compiler (blockbpe_jax/pretok) derives character classes from.

  gc      uint8[0x110000]  General_Category, an index into GC_NAMES (Cn for surrogates too)
  ws      bool[0x110000]   White_Space (what `\\s` means in Rust's regex and in Oniguruma)
  scripts uint8[0x110000]  Script, an index into SCRIPT_NAMES (0 = any other script)
  ccc     uint8[0x110000]  Canonical_Combining_Class
  nfc_qc  uint8[0x110000]  NFC_Quick_Check: 0 Yes, 1 Maybe, 2 No (derived: No = the code point
                           alone is not NFC; Maybe = the second code point of a primary
                           composite, and the Hangul V and T jamo)
  nfc_pairs int32[K, 2]    the (first, second) code points of every primary composite (the
                           pairs NFC composes; Hangul syllables are algorithmic), sorted
  nfc_trail bool[0x110000] starters whose canonical decomposition ends in a non-starter (a mark
                           after one may be reordered into it)
  lowercase int32[K, 3]    (code point, its lowercase as 1 or 2 code points, -1 for none) for
                           every code point that HF tokenizers' Lowercase normalizer changes
                           (Rust's char::to_lowercase, per code point: no final-sigma rule).
                           Probed through tokenizers itself: Python 3.11's str.lower is Unicode
                           14.0.0 and applies the final-sigma context.

Why Unicode 16.0.0: the oracles use it. Checked by probing every code point through the engines
themselves (tests/pretok/test_pretokenize_unicode.py::test_unicode_properties_match_tiktoken does it for
tiktoken): tiktoken 0.14.0 (Rust regex) and HF tokenizers 0.23.3 (Oniguruma) are Unicode
16.0.0; Python's `regex` 2026.5.9 is 17.0.0 (e.g. U+0295 Ll -> Lo) and Python 3.11's
`unicodedata` 14.0.0. General categories come from
`unicodedata2==16.0.0`. Scripts come from the `regex` module, which is one version ahead
(17.0.0), restricted to code points assigned in 16.0.0 (a script never changes for an assigned
code point between these versions; new code points stay "other").

Usage: pip install unicodedata2==16.0.0 regex tokenizers==0.23.3 && python scripts/gen_unicode_data.py [--check]
"""

from __future__ import annotations

import argparse
import io
import pathlib
import sys

import numpy as np

GC_NAMES = (
    "Cn Lu Ll Lt Lm Lo Mn Mc Me Nd Nl No Pc Pd Ps Pe Pi Pf Po Sm Sc Sk So Zs Zl Zp Cc Cf Cs Co"
).split()
# Scripts a pre-tokenizer pattern may name (\p{Han}, \p{Script=Hiragana}, ...).
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
OUT = pathlib.Path(__file__).resolve().parent.parent / "blockbpe_jax" / "pretok" / "unicode16.npz"


EXIT_WRONG_VERSION = 3  # (--check cannot tell here: tests/pretok/test_pretokenize_unicode.py skips)


def wrong_version(message: str):
    print(message, file=sys.stderr)
    sys.exit(EXIT_WRONG_VERSION)


def build() -> dict[str, np.ndarray]:
    import regex
    import tokenizers
    import unicodedata2 as ucd

    if ucd.unidata_version != "16.0.0":
        wrong_version(f"unicodedata2 is Unicode {ucd.unidata_version}, need 16.0.0")
    if tokenizers.__version__ != "0.23.3":
        wrong_version(f"tokenizers is {tokenizers.__version__}, need 0.23.3 (Unicode 16.0.0)")
    index = {name: i for i, name in enumerate(GC_NAMES)}
    gc = np.zeros(0x110000, np.uint8)
    for cp in range(0x110000):
        gc[cp] = index[ucd.category(chr(cp))]
    ws = np.zeros(0x110000, bool)
    ws[WHITE_SPACE] = True
    scripts = np.zeros(0x110000, np.uint8)
    text = "".join(chr(cp) for cp in range(0x110000) if not 0xD800 <= cp < 0xE000)
    cps = np.array([ord(ch) for ch in text], np.int64)
    for k, name in enumerate(SCRIPT_NAMES[1:], start=1):
        for m in regex.finditer(rf"\p{{Script={name}}}+", text):
            scripts[cps[m.start() : m.end()]] = k
    scripts[gc == index["Cn"]] = 0
    ccc = np.zeros(0x110000, np.uint8)
    nfc_qc = np.zeros(0x110000, np.uint8)
    pairs = []
    for cp in range(0x110000):
        if 0xD800 <= cp < 0xE000:
            continue
        ch = chr(cp)
        ccc[cp] = ucd.combining(ch)
        if ucd.normalize("NFC", ch) != ch:
            nfc_qc[cp] = 2
        d = ucd.decomposition(ch)
        if d and not d.startswith("<"):
            parts = [int(x, 16) for x in d.split()]
            if len(parts) == 2 and ucd.normalize("NFC", "".join(map(chr, parts))) == ch:
                nfc_qc[parts[1]] = max(nfc_qc[parts[1]], 1)
                pairs.append(parts)
    nfc_trail = np.zeros(0x110000, bool)
    for cp in range(0x110000):
        if not 0xD800 <= cp < 0xE000 and ccc[cp] == 0:
            nfd = ucd.normalize("NFD", chr(cp))
            nfc_trail[cp] = len(nfd) > 1 and ucd.combining(nfd[-1]) != 0
    nfc_qc[0x1161:0x1176] = 1  # Hangul V jamo compose with a preceding L or LV syllable
    nfc_qc[0x11A8:0x11C3] = 1  # Hangul T jamo with a preceding LV syllable
    lower = tokenizers.normalizers.Lowercase()
    lowercase = []
    for cp in range(0x110000):
        if not 0xD800 <= cp < 0xE000 and (low := lower.normalize_str(chr(cp))) != chr(cp):
            assert len(low) <= 2, (cp, low)
            lowercase.append([cp, ord(low[0]), ord(low[1]) if len(low) > 1 else -1])
    return {
        "gc": gc,
        "ws": ws,
        "scripts": scripts,
        "ccc": ccc,
        "nfc_qc": nfc_qc,
        "nfc_pairs": np.array(sorted(pairs), np.int32).reshape(-1, 2),
        "nfc_trail": nfc_trail,
        "lowercase": np.array(lowercase, np.int32).reshape(-1, 3),
        "gc_names": np.array(GC_NAMES),
        "script_names": np.array(SCRIPT_NAMES),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--check",
        action="store_true",
        help="exit 1 if the file on disk differs (3: the pinned versions are not installed)",
    )
    args = ap.parse_args()
    data = build()
    if args.check:
        old = np.load(OUT)
        same = all(np.array_equal(old[k], v) for k, v in data.items())
        print("up to date" if same else "differs")
        sys.exit(0 if same else 1)
    buf = io.BytesIO()
    np.savez_compressed(buf, **data)
    OUT.write_bytes(buf.getvalue())
    print(f"wrote {OUT} ({len(buf.getvalue())} bytes)")


if __name__ == "__main__":
    main()
