"""The strings of the GPU fuzz campaign (benchmarks/fuzz_campaign.py): a seeded generator of
byte strings of 0 .. 64 KiB, mostly short, that mix every kind of text the pre-tokenizers and
merges treat differently.

Lengths (LENGTH_CLASSES): a class is drawn by its share, then a length log-uniform inside it;
3% of the strings are empty and 3% have 4-64 KiB (the mean is about 1.05 KiB: a million strings
are about 1 GB for the reference libraries, the campaign's bottleneck).

Text (SEGMENTS): a string is segments joined until its length is reached, then cut there on a
character boundary. A segment is a slice (at a random place, of a log-uniform length up to its
kind's limit) of one of these pools, built once per generator from its seed:
  prose      the shared corpora (War and Peace, WikiText-2, GSM8K JSON lines, Python code);
  scripts    words of CJK, kana, Hangul, Cyrillic, Greek, Arabic (with harakat), Hebrew,
             Devanagari, Thai, Armenian, Georgian, Ethiopic, Tamil, accented Latin and math
             letters, separated by spaces, newlines and CJK/Latin punctuation;
  emoji      emoji with skin-tone modifiers, ZWJ sequences, flags, keycaps, variation selectors;
  marks      letters (and spaces, digits) carrying 1-5 combining marks of several scripts,
             conjoining Hangul jamo, NFD forms of precomposed letters;
  whitespace runs of every White_Space character (and near misses) from tests/strategies.py,
             mixed and repeated;
  digits     runs of ASCII and other \\p{N} digits (tests/strategies.py), separators between;
  fragments  blockbpe_jax.testing.TEXT_FRAGMENTS, tests/strategies.py WORDS and APOSTROPHES
             (contractions in both cases, U+2019, long apostrophe chains);
  adversarial  blockbpe_jax.testing.ADVERSARIAL (one pre-tokenizer piece: one letter, letters
             a-j, spaces, digits, whitespace, CJK, emoji, base64, apostrophes), 64 KiB each,
             so a long string may hold one piece of tens of KiB;
  random     code points drawn uniformly from all of Unicode but surrogates.
and, per string, the family's special tokens as text (whole, or cut short by one character).
An `invalid` string also gets invalid UTF-8 spliced in at 1-4 places (tests/strategies.py
BYTE_FRAGMENTS that do not decode: lone continuation bytes, truncated sequences, overlong
forms, surrogates, > U+10FFFF, 0xFE/0xFF; or 1-6 random bytes), at least one of them.
"""

from __future__ import annotations

import math
import pathlib
import random
import sys
import unicodedata

sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "tests"))

from strategies import APOSTROPHES, BYTE_FRAGMENTS, DIGITS, WHITESPACE, WORDS  # noqa: E402

from blockbpe_jax import testing  # noqa: E402

MAX_LEN = 65536
# (share, shortest, longest) in bytes; a length is log-uniform inside its class.
LENGTH_CLASSES = [
    (0.03, 0, 0),
    (0.45, 1, 64),
    (0.30, 65, 512),
    (0.19, 513, 4096),
    (0.03, 4097, MAX_LEN),
]
# (weight, kind, longest segment in bytes)
SEGMENTS = [
    (38, "prose", 4096),
    (14, "scripts", 1024),
    (5, "emoji", 256),
    (7, "marks", 256),
    (9, "whitespace", 4096),
    (7, "digits", 1024),
    (10, "fragments", 256),
    (5, "adversarial", MAX_LEN),
    (2, "random", 128),
    (3, "special", 0),
]

SCRIPTS = [  # (code point ranges of one script's letters)
    [(0x4E00, 0x9FFF)],
    [(0x3041, 0x3096), (0x30A1, 0x30FA)],
    [(0xAC00, 0xD7A3)],
    [(0x0400, 0x044F)],
    [(0x0391, 0x03A9), (0x03B1, 0x03C9)],
    [(0x0621, 0x064A)],
    [(0x05D0, 0x05EA)],
    [(0x0905, 0x0939), (0x093E, 0x094D)],
    [(0x0E01, 0x0E30)],
    [(0x0531, 0x0556), (0x0561, 0x0586)],
    [(0x10D0, 0x10FA)],
    [(0x1200, 0x1250)],
    [(0x0B85, 0x0BB9)],
    [(0x00C0, 0x00FF), (0x0100, 0x017F)],
    [(0x1D400, 0x1D4FF)],
]
SEPARATORS = [" ", " ", " ", " ", "\n", ", ", ". ", "、", "。", "，", "! ", "? ", "\u061f ", ": "]
COMBINING = [(0x0300, 0x036F), (0x0483, 0x0489), (0x0591, 0x05BD), (0x064B, 0x065F), (0x093C, 0x094D)]
COMBINING += [(0x1AB0, 0x1ABE), (0x1DC0, 0x1DFF), (0x20D0, 0x20F0), (0xFE20, 0xFE2F), (0x3099, 0x309A)]
MARK_BASES = "aeiouAEIOUnNcszαεοΑжЖبسאבकस 0ー"
EMOJI = [(0x1F300, 0x1F5FF), (0x1F600, 0x1F64F), (0x1F680, 0x1F6FF), (0x1F900, 0x1F9FF), (0x2600, 0x26FF)]
SKIN_TONES = (0x1F3FB, 0x1F3FF)


def _utf8_ok(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


INVALID_FRAGMENTS = [f for f in BYTE_FRAGMENTS if not _utf8_ok(f)]
SPOIL_BYTES = 4 * max(5, *map(len, INVALID_FRAGMENTS)) + 1  # the most _spoil adds


def _pick(rng: random.Random, ranges) -> str:
    lo, hi = rng.choice(ranges)
    return chr(rng.randint(lo, hi))


def _pool(rng: random.Random, size: int, unit) -> bytes:
    """`unit(rng)` strings joined until `size` UTF-8 bytes."""
    parts, n = [], 0
    while n < size:
        s = unit(rng).encode("utf-8")
        parts.append(s)
        n += len(s)
    return b"".join(parts)


def _script_words(ranges):
    def unit(rng):
        word = "".join(_pick(rng, ranges) for _ in range(rng.randint(1, 10)))
        return word + rng.choice(SEPARATORS)

    return unit


def _emoji(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.1:  # a flag: two regional indicators
        return chr(0x1F1E6 + rng.randrange(26)) + chr(0x1F1E6 + rng.randrange(26))
    if r < 0.15:  # a keycap
        return rng.choice("0123456789#*") + "\ufe0f\u20e3"
    s = _pick(rng, EMOJI)
    if rng.random() < 0.3:
        s += chr(rng.randint(*SKIN_TONES))
    if rng.random() < 0.2:
        s += "\ufe0f"
    if rng.random() < 0.2:  # a ZWJ sequence
        s += "\u200d" + _pick(rng, EMOJI)
    return s + (" " if rng.random() < 0.3 else "")


def _marks(rng: random.Random) -> str:
    r = rng.random()
    if r < 0.15:  # conjoining jamo: L V (T)
        s = chr(0x1100 + rng.randrange(19)) + chr(0x1161 + rng.randrange(21))
        return s + (chr(0x11A8 + rng.randrange(27)) if rng.random() < 0.5 else "")
    if r < 0.35:  # a precomposed letter in NFD
        return unicodedata.normalize(
            "NFD", chr(rng.choice([0xC0, 0xE9, 0x1E69, 0x1EA0, 0x00D1, 0x0958, 0xAC01]))
        )
    s = rng.choice(MARK_BASES) + "".join(_pick(rng, COMBINING) for _ in range(rng.randint(1, 5)))
    return s + (" " if rng.random() < 0.2 else "")


def _whitespace(rng: random.Random) -> str:
    if rng.random() < 0.5:
        return rng.choice(WHITESPACE) * rng.randint(1, 40)
    return "".join(rng.choice(WHITESPACE) for _ in range(rng.randint(1, 12))) + rng.choice(WORDS)


def _digits(rng: random.Random) -> str:
    if rng.random() < 0.6:
        run = "".join(rng.choice("0123456789") for _ in range(rng.randint(1, 24)))
    else:
        run = "".join(rng.choice(DIGITS) for _ in range(rng.randint(1, 12)))
    return run + rng.choice(["", " ", ".", ",", "-", "/", "\n", "x", "年"])


def _fragments(rng: random.Random) -> str:
    return rng.choice(testing.TEXT_FRAGMENTS + WORDS + APOSTROPHES)


def _random_char(rng: random.Random) -> str:
    while True:
        cp = rng.randrange(0x110000)
        if not 0xD800 <= cp < 0xE000:
            return chr(cp)


class StringSource:
    """Seeded strings for one family: `draw(invalid)` -> bytes. Its pools (the module
    docstring) are built once, from `seed`; `specials` (the family's special tokens) appear as
    text."""

    def __init__(self, seed: int, specials, corpora: list[bytes]):
        self.rng = rng = random.Random(seed)
        self.specials = sorted(specials)
        self.pools = {
            "prose": [c for c in corpora if c],
            "scripts": [_pool(rng, 1 << 15, _script_words(r)) for r in SCRIPTS],
            "emoji": [_pool(rng, 1 << 15, _emoji)],
            "marks": [_pool(rng, 1 << 15, _marks)],
            "whitespace": [_pool(rng, 1 << 16, _whitespace)],
            "digits": [_pool(rng, 1 << 15, _digits)],
            "fragments": [_pool(rng, 1 << 16, _fragments)],
            "adversarial": [gen(rng, MAX_LEN) for _, gen in sorted(testing.ADVERSARIAL.items())],
            "random": [_pool(rng, 1 << 15, _random_char)],
        }
        segments = [s for s in SEGMENTS if self.pools.get(s[1]) or (s[1] == "special" and self.specials)]
        self._kinds = [(kind, limit) for _, kind, limit in segments]
        self._weights = [w for w, _, _ in segments]
        self._classes = [(lo, hi) for _, lo, hi in LENGTH_CLASSES]
        self._class_weights = [share for share, _, _ in LENGTH_CLASSES]

    def restart(self, seed: int) -> None:
        """Draws from here on come from `seed` (the pools stay): the campaign restarts the
        source at every chunk, so that a chunk's strings depend on its seed alone and chunks
        can be generated in any order, in any process."""
        self.rng = random.Random(seed)

    def length(self) -> int:
        """A length drawn from LENGTH_CLASSES."""
        lo, hi = self.rng.choices(self._classes, self._class_weights)[0]
        return self._log_uniform(lo, hi)

    def _log_uniform(self, lo: int, hi: int) -> int:
        if hi <= lo:
            return lo
        return min(hi, int(math.exp(self.rng.uniform(math.log(max(lo, 1)), math.log(hi + 1)))))

    def _segment(self, kind: str, limit: int, room: int) -> bytes:
        rng = self.rng
        if kind == "special":
            s = rng.choice(self.specials)  # whole, or short of its last one or two characters
            return (s if rng.random() < 0.8 else s[: -rng.randint(1, 2)]).encode("utf-8")
        pool = rng.choice(self.pools[kind])
        n = min(self._log_uniform(1, min(limit, len(pool) - 1)), room)
        start = rng.randrange(0, len(pool) - n)
        while start > 0 and (pool[start] & 0xC0) == 0x80:  # start and end on a character
            start -= 1
        end = start + n
        while end < len(pool) and (pool[end] & 0xC0) == 0x80:
            end += 1
        return pool[start:end]

    def draw(self, invalid: bool = False, length: int | None = None) -> bytes:
        """One string of about `length` bytes (default: drawn), at most MAX_LEN; valid UTF-8
        unless `invalid` (then the text is SPOIL_BYTES shorter and its invalid bytes make up
        the difference, at most)."""
        rng = self.rng
        n = self.length() if length is None else length
        if invalid:
            n = max(0, n - SPOIL_BYTES)
        parts, total = [], 0
        while total < n:
            kind, limit = rng.choices(self._kinds, self._weights)[0]
            seg = self._segment(kind, limit, n - total + 8)
            parts.append(seg)
            total += len(seg)
        data = b"".join(parts)
        cut = min(n, len(data))
        while cut > 0 and cut < len(data) and (data[cut] & 0xC0) == 0x80:
            cut -= 1
        data = data[:cut]
        return self._spoil(data) if invalid else data

    def _spoil(self, data: bytes) -> bytes:
        """`data` with 1-4 invalid byte sequences spliced in (the first surely invalid), at
        most SPOIL_BYTES in all."""
        rng = self.rng
        for k in range(rng.randint(1, 4)):
            bad = (
                rng.choice(INVALID_FRAGMENTS)
                if k == 0 or rng.random() < 0.6
                else rng.randbytes(rng.randint(1, 5))
            )
            at = rng.randint(0, len(data))
            data = data[:at] + bad + data[at:]
        if _utf8_ok(data):  # the random bytes completed a truncated sequence
            at = rng.randint(0, len(data))
            data = data[:at] + b"\xff" + data[at:]
        return data
