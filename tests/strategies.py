"""Hypothesis settings and text strategies shared by the differential fuzz tests.

`BLOCKBPE_FUZZ_EXAMPLES=N` runs N examples per hypothesis test instead of each test's default
(a long run); `pytest --hypothesis-show-statistics` reports the examples tried.
"""

from __future__ import annotations

import json
import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from blockbpe_jax import testing


def n_examples(default: int) -> int:
    """Examples per hypothesis test: the default, or BLOCKBPE_FUZZ_EXAMPLES for a long run."""
    value = os.environ.get("BLOCKBPE_FUZZ_EXAMPLES")
    return int(value) if value else default


def fuzz(default: int):
    return settings(
        max_examples=n_examples(default),
        deadline=None,
        database=None,
        suppress_health_check=[
            HealthCheck.too_slow,
            HealthCheck.data_too_large,
            HealthCheck.large_base_example,
            HealthCheck.function_scoped_fixture,
        ],
    )


ANY_CHAR = st.characters(exclude_categories=("Cs",))
# Unicode White_Space (what \s means to tiktoken's and HF's engines), CRLF, and near misses
# (U+200B ZERO WIDTH SPACE, U+FEFF, U+001C are not White_Space).
WHITESPACE = [
    " ",
    "\t",
    "\n",
    "\r",
    "\r\n",
    "\x0b",
    "\x0c",
    "\x85",
    "\xa0",
    "\u1680",
    "\u2000",
    "\u200a",
    "\u2028",
    "\u2029",
    "\u202f",
    "\u205f",
    "\u3000",
    "\u200b",
    "\ufeff",
    "\x1c",
]
# \p{N}: ASCII and other decimal digits (Nd), No and Nl.
DIGITS = [
    "0",
    "1",
    "7",
    "9",
    "\u0663",
    "\u06f5",
    "\u07c1",
    "\u0967",
    "\u09e6",
    "\u0e53",
    "\uff11",
    "\U0001d7d8",
    "\u00bd",
    "\u00b2",
    "\u216b",
    "\u3007",
    "\u2466",
]
APOSTROPHES = [
    "'",
    "\u2019",
    "\u2018",
    "\u02bc",
    "`",
    *testing.CONTRACTIONS,
    "'\u017f",
    "''",
]
WORDS = [
    "a",
    "s",
    "S",
    "ll",
    "t",
    "x",
    "don",
    "I",
    "HE",
    "\u00e9",
    "\u65e5\u672c",
    "\u0416",
    ".",
    ",",
    "!",
    "-",
    "/",
    "\U0001f600",
    "\u0301",
    "\u00c9t\u00e9",
    "hello",
    " the",
]

runs = st.builds(
    lambda unit, k: unit * k, st.sampled_from(WHITESPACE + DIGITS + APOSTROPHES), st.integers(1, 3000)
)
mixed_whitespace = st.lists(st.sampled_from(WHITESPACE), min_size=1, max_size=2000).map("".join)
mixed_digits = st.lists(st.sampled_from(DIGITS), min_size=1, max_size=2000).map("".join)
runs_text = st.lists(
    runs | mixed_whitespace | mixed_digits | st.sampled_from(WORDS) | st.text(ANY_CHAR, max_size=4),
    max_size=6,
).map("".join)
fragment_text = st.lists(
    st.sampled_from(testing.TEXT_FRAGMENTS + WORDS + APOSTROPHES + WHITESPACE + DIGITS)
    | st.text(ANY_CHAR, max_size=6),
    max_size=24,
).map("".join)
unicode_text = st.text(ANY_CHAR, max_size=80) | fragment_text

# Raw bytes for the invalid-UTF-8 tests: valid and invalid sequences side by side.
BYTE_FRAGMENTS = [
    b"\x80",
    b"\xbf",
    b"\xc0",
    b"\xc1\xbf",
    b"\xc2",
    b"\xc3\xa9",
    b"\xe4\xb8",
    b"\xe4\xb8\xad",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xed\x9f\xbf",
    b"\xef\xbf\xbf",
    b"\xf0\x9f\x98",
    b"\xf0\x9f\x98\x80",
    b"\xf4\x8f\xbf\xbf",
    b"\xf4\x90\x80\x80",
    b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf",
    b"\xc0\xaf",
    b"\xff",
    b"\xfe",
    b"\xf8\x88\x80\x80\x80",
    b"\xcc\x81",
    b"\xe2\x80\x99",
    b"\xe2\x80",
    b"\xc2\xa0",
    b"\xe3\x80\x80",
    b"\xd9\xa3",
]
ASCII_FRAGMENTS = [
    b"a",
    b"s",
    b"S",
    b"'",
    b"'s",
    b"'ll",
    b" ",
    b"  ",
    b"\n",
    b"\r\n",
    b"\t",
    b"1",
    b"123",
    b"1234",
    b".",
    b"!",
    b"hello",
    b" world",
    b"x",
]


def raw_bytes(specials=()):
    parts = (
        st.sampled_from(BYTE_FRAGMENTS)
        | st.sampled_from(ASCII_FRAGMENTS)
        | st.binary(min_size=1, max_size=6)
        | st.text(ANY_CHAR, min_size=1, max_size=3).map(lambda s: s.encode("utf-8"))
    )
    if specials:
        parts = parts | st.sampled_from([s.encode("utf-8") for s in specials])
    return st.lists(parts, max_size=24).map(b"".join)


# ---------------------------------------------------------------------------------------------
# The oracles themselves


def family_texts():
    """Batches for the family tests: mixed scripts, digit and whitespace runs, combining marks,
    emoji, and the families' hand-written texts."""
    from helpers import MIXED

    return st.lists(unicode_text | runs_text | st.sampled_from(MIXED), min_size=1, max_size=6)


# Whitespace runs around the lengths where SentencePiece models change pieces.
spaces_text = st.lists(
    st.sampled_from([" ", "  ", " " * 15, " " * 16, "\u2581", "\n", "a", "ab", "\U0001f600", "é", "日本"]),
    max_size=30,
).map("".join)


# ---------------------------------------------------------------------------------------------
# Pre-tokenizer regexes from the supported grammar (tests/test_regex_dialects.py), as templates:
# "(?D:" stands for the dialect's dot-all group ((?s: in fancy-regex, (?m: in Oniguruma).

REGEX_LITERALS = [
    "a", "b", "s", "t", "S", "T", "k", "K", "x", "1", "2", " ", "'", "é", "É", "ſ",
    "\\x{212a}", "\\u00e9", "中", "\\n", "\\r", "\\t", "\\.", "\\-", "\\'", "\\x41", "!", ",",
]  # fmt: skip
REGEX_SET_ESCAPES = [
    "\\s", "\\S", "\\d", "\\D", "\\h", "\\H", "\\p{L}", "\\p{Lu}", "\\p{Ll}", "\\p{Lt}",
    "\\p{N}", "\\p{Nd}", "\\P{L}", "\\P{N}", "\\p{P}", "\\p{S}", "\\p{M}", "\\p{Han}",
    "\\p{Latin}", "\\p{Greek}", "\\p{^L}", "\\p{Uppercase_Letter}", "\\p{Z}",
]  # fmt: skip
REGEX_CLASS_CHARS = [
    "a",
    "b",
    "s",
    "t",
    "S",
    "K",
    "1",
    " ",
    "'",
    "é",
    "\\]",
    "\\-",
    "\\n",
    "\\r",
    "\\^",
    ".",
    "_",
]
REGEX_RANGES = ["a-c", "A-C", "0-9", "r-t", "R-T", "à-ÿ", "\\x{2000}-\\x{200a}"]
REGEX_QUANTIFIERS = ["", "", "", "?", "*", "+", "{2}", "{1,3}", "{0,2}", "{2,}", "{,2}", "{1,2}"]
REGEX_SUFFIXES = ["", "", "", "?", "+"]


@st.composite
def _regex_class(draw, depth: int = 0) -> str:
    items = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.integers(0, 3 if depth < 1 else 2))
        pool = (REGEX_CLASS_CHARS, REGEX_RANGES, REGEX_SET_ESCAPES)
        items.append(draw(_regex_class(depth + 1)) if kind == 3 else draw(st.sampled_from(pool[kind])))
    inter = draw(_regex_class(depth + 1)) if depth < 1 and draw(st.integers(0, 3)) == 0 else ""
    return "[" + ("^" if draw(st.booleans()) else "") + "".join(items) + (f"&&{inter}" if inter else "") + "]"


@st.composite
def _regex_alternation(draw, depth: int, in_look: bool) -> str:
    def atom() -> str:
        kind = draw(st.integers(0, 6 if depth < 1 or (depth < 2 and not in_look) else 5))
        if kind <= 1:
            return draw(st.sampled_from(REGEX_LITERALS))
        if kind <= 3:
            return draw(st.sampled_from(REGEX_SET_ESCAPES))
        if kind == 4:
            return "."
        if kind == 5:
            return draw(_regex_class())
        opener = draw(st.sampled_from(["(?:", "(?:", "(?i:", "(?D:", "("]))
        return opener + draw(_regex_alternation(depth + 1, in_look)) + ")"

    def element() -> str:
        kind = draw(st.integers(0, 5 if not in_look else 3))
        if kind == 4:
            opener = draw(st.sampled_from(["(?=", "(?!"]))
            return opener + draw(_regex_alternation(depth + 1, True)) + ")"
        if kind == 5:
            return draw(st.sampled_from(["$", "\\z", "\\Z"]))
        q = draw(st.sampled_from(REGEX_QUANTIFIERS))
        return atom() + q + (draw(st.sampled_from(REGEX_SUFFIXES)) if q else "")

    n_seq = draw(st.integers(1, 2 if depth else 3))
    longest = 2 if in_look else 3 if depth else 4
    return "|".join("".join(element() for _ in range(draw(st.integers(1, longest)))) for _ in range(n_seq))


@st.composite
def _regex_pattern(draw) -> str:
    if draw(st.booleans()):
        return draw(_regex_alternation(0, False))
    return ("(?i)" if draw(st.booleans()) else "") + draw(_regex_alternation(1, False))


def regex_patterns():
    """Pattern templates from the supported grammar: literals, set escapes, classes (nested,
    negated, &&), groups ((?:, (?i:, dot-all, capturing), quantifiers with lazy and possessive
    suffixes (and Oniguruma's {m,n}+), lookaheads, $ \\z \\Z; materialise with
    `regex_for_dialect`. At most 60 characters (longer ones take the compiler seconds)."""
    return _regex_pattern().filter(lambda p: len(p) <= 60)


def regex_for_dialect(template: str, flavour: str) -> str:
    return template.replace("(?D:", "(?s:" if flavour == "tiktoken" else "(?m:")


# Text for them: the characters the atoms above tell apart, case variants and multi-character
# folds (ß ss ﬆ st), digits of several kinds, whitespace and newlines.
REGEX_TEXT_UNITS = [
    "a", "b", "s", "t", "S", "T", "k", "K", "\u212a", "x", "X", "1", "2", "3", "\u0663", "\u00bd",
    " ", "  ", "\n", "\r\n", "\r", "\t", "\n\n", "'", "-", ".", "!", ",", "_", "^", "]",
    "é", "É", "e\u0301", "ß", "\u1e9e", "ss", "SS", "\u017f", "st", "\ufb06", "中", "文",
    "\u0301", "\x85", "\u2028", "\u00a0", "\u2003", "A", "B", "\U0001f642", "\u0130", "i",
    "\u0131", "\u01c5", "\u03a3", "\u03c3", "\u03c2", "\u00e0", "\u00ff", "Ω", "\u2126",
]  # fmt: skip
regex_text = st.lists(
    st.sampled_from(REGEX_TEXT_UNITS) | st.text(ANY_CHAR, min_size=1, max_size=2), max_size=24
).map("".join)


# -- JSON as json.loads reads it, written with every spelling it accepts ----------------------

JSON_SHORT_ESCAPES = {
    '"': '\\"',
    "\\": "\\\\",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "/": "\\/",
}


@st.composite
def json_string(draw, text: str) -> str:
    """`text` as a JSON string literal, each character raw or escaped at random (surrogate
    pairs for astral characters, lone surrogates as escapes: the only way to spell them)."""
    out = ['"']
    for ch in text:
        cp, choice = ord(ch), draw(st.integers(0, 3))
        if 0xD800 <= cp <= 0xDFFF:
            out.append(f"\\u{cp:04x}")
        elif ch in JSON_SHORT_ESCAPES and (choice < 2 or ch in '"\\' or cp < 0x20):
            out.append(JSON_SHORT_ESCAPES[ch])
        elif cp < 0x20 or ch in '"\\' or choice == 3:
            if cp > 0xFFFF:
                hi, lo = 0xD800 + ((cp - 0x10000) >> 10), 0xDC00 + ((cp - 0x10000) & 0x3FF)
                out.append(f"\\u{hi:04X}\\u{lo:04x}")
            else:
                out.append(f"\\u{cp:04x}" if choice % 2 else f"\\u{cp:04X}")
        else:
            out.append(ch)
    return "".join(out) + '"'


@st.composite
def json_value(draw, value, spaces) -> str:
    """`value` (None, bool, number, str, list, dict) as JSON text: strings by json_string,
    white space from the `spaces` strategy between tokens."""
    w = lambda: draw(spaces)  # noqa: E731
    if isinstance(value, str):
        return draw(json_string(value))
    if isinstance(value, list):
        return "[" + w() + ("," + w()).join(draw(json_value(v, spaces)) + w() for v in value) + "]"
    if isinstance(value, dict):
        items = [
            draw(json_string(k)) + w() + ":" + w() + draw(json_value(v, spaces)) + w()
            for k, v in value.items()
        ]
        return "{" + w() + ("," + w()).join(items) + "}"
    return json.dumps(value)


def json_values(texts, *, nan: bool = False, max_leaves: int = 8):
    """JSON values json.loads returns: None, booleans, big integers, floats (NaN and infinities
    when `nan`: json.loads reads them), strings from `texts`, lists and objects of them."""
    scalars = st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-(10**30), 10**30),
        st.floats(allow_nan=nan, allow_infinity=nan),
        texts,
    )
    return st.recursive(
        scalars,
        lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(texts, inner, max_size=3)),
        max_leaves=max_leaves,
    )


# Code points NFC acts on (combining marks, composites, Hangul, singletons, astral marks) among
# a few that it leaves alone; texts of them, or of any code point.
NFC_CHARS = st.sampled_from(
    list("aeiouAEOKxyz '\n")
    + list("\u0300\u0301\u0302\u0303\u0307\u0308\u030a\u030c\u0316\u0323\u0327\u0328\u0334\u0338\u0345")
    + list("\u0344\u0340\u0341\u0343\u0f73\u0f75\u0f81\u093c\u0915\u0958\u09c7\u09be\u09d7\u0b47\u0b56")
    + list("\u1100\u1112\u1161\u1175\u11a7\u11a8\u11c2\u11c3\uac00\uac01\ud7a3\u3131")
    + list("\u0627\u0651\u064e\u0653\u0654\u0655\u05d9\u05b4\u05bc\u05c1\u05e9\u0e4d\u0e32")
    + list("\u212b\u00c5\u2126\u1e0a\u1e9b\u1f82\u1fb4\u0385\u03b1\u0313\u3099\u304b\u30ab\u309a")
    + ["\U0001d15e", "\U0001d165", "\U0001d160", "\U000110a5", "\U000110ba", "\U00011131", "\U00011127"]
    + ["\U00016d67", "\U000105d2\u0307", "\U0001f600", "\u4e2d", "\u0416"]
)
NFC_TEXT = st.lists(NFC_CHARS, max_size=40).map("".join) | st.text(ANY_CHAR, max_size=40)
