"""A byte-level tokenizer.json `normalizer` as the kernels run it: NFC (checked, ffi/pretok/nfc.h)
and Lowercase (rewritten in place, ffi/pretok/lowercase.h), alone or in a Sequence in either
order; the host's version of the same rules (`apply`); and the tables both need.

Lowercase is HF tokenizers' normalizer: Rust's `char::to_lowercase` per code point (no
final-sigma context, U+0130 -> "i" U+0307), from unicode_lower17.npz (probed through tokenizers).
NFC is at the Unicode version of HF tokenizers' NFC (unicode_nfc9.npz: 9.0.0), see nfc().
The kernels rewrite a code point whose lowercase is one code point of the same UTF-8 length;
a row with any other changed code point (27 of them: U+0130, U+023A, U+2126, U+212A, ...) is
reported (count -2) and the host path normalizes it first.

With NFC and Lowercase together, the NFC check runs on the raw text with tables widened so
that passing it means both the text and its lowercase are in NFC: then NFC and Lowercase
commute on it, whatever their order. A code point takes the NFC marks of its lowercase too,
a starter counts as ending in a mark if its lowercase does, and (S, M) composes if
(lowercase(S), M) does (so "W" U+030A is reported: its lowercase composes to U+1E98).
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from . import unicode as uni
from .compiler import PretokenizerUnsupported

LOWER_SAME, LOWER_FLAG = 0, 255  # kLowerSame, kLowerFlag (ffi/pretok/lowercase.h)
LOWER_DELTAS = 256  # kLowerDeltas: int32 deltas in the operand
_KINDS = {"NFC": "nfc", "Lowercase": "lowercase"}


@dataclasses.dataclass(frozen=True)
class Normalizer:
    """The steps in the order HF applies them: () none, or a permutation of a subset of
    ("nfc", "lowercase")."""

    steps: tuple[str, ...] = ()

    @property
    def nfc(self) -> bool:
        return "nfc" in self.steps

    @property
    def lowercase(self) -> bool:
        return "lowercase" in self.steps

    @property
    def on_device(self) -> bool:
        """Whether the executors apply the steps to raw text themselves, reporting (count -2)
        only the rows they cannot: NFC (ffi/pretok/nfc_normalize.h), Lowercase (in place,
        lowercase.h), NFC then Lowercase. Lowercase then NFC they only check (a row passes when
        its lowercase is in NFC as well), so the host applies it."""
        return self.steps in (("nfc",), ("lowercase",), ("nfc", "lowercase"))


def hf_component(config: object, where: str, steps_key: str) -> tuple[object, list | None]:
    """A tokenizer.json normalizer or pre-tokenizer object as (its type, the list of its steps
    under `steps_key` when it is a Sequence, else None); PretokenizerUnsupported naming `where`
    when it is not an object or a Sequence has no list. (Both loaders, here and pipeline.py.)"""
    if not isinstance(config, dict):
        raise PretokenizerUnsupported(f"{where}: expected an object, got {type(config).__name__}")
    kind = config.get("type")
    if kind != "Sequence":
        return kind, None
    steps = config.get(steps_key)
    if not isinstance(steps, list):
        raise PretokenizerUnsupported(f"{where}.{steps_key}: missing or not a list")
    return kind, steps


def from_hf(normalizer: object, where: str = "normalizer") -> Normalizer:
    """A tokenizer.json `normalizer` of a byte-level BPE: null, NFC, Lowercase, or a Sequence
    of them with each at most once. Anything else raises PretokenizerUnsupported naming it."""
    if normalizer is None:
        return Normalizer()
    kind, steps = hf_component(normalizer, where, "normalizers")
    if steps is not None:
        out: list[str] = []
        for k, step in enumerate(steps):
            at = f"{where}.normalizers[{k}]"
            if isinstance(step, dict) and step.get("type") == "Sequence":
                raise PretokenizerUnsupported(f"{at}: a nested Sequence is not supported")
            for s in from_hf(step, at).steps:
                if s in out:
                    raise PretokenizerUnsupported(f"{at}: {step['type']} twice is not supported")
                out.append(s)
        return Normalizer(tuple(out))
    if kind in _KINDS:
        return Normalizer((_KINDS[kind],))
    raise PretokenizerUnsupported(
        f"{where}: normalizer {kind} is not supported (only NFC and Lowercase, alone or in a Sequence)"
    )


@functools.lru_cache(maxsize=1)
def _lower_rows() -> np.ndarray:
    return uni.lowercase()


def lowercase_map() -> dict[int, str]:
    """For str.translate: every code point that Lowercase changes -> its lowercase."""
    return _translate_table()


@functools.lru_cache(maxsize=1)
def _translate_table() -> dict[int, str]:
    return {int(cp): chr(a) + (chr(b) if b >= 0 else "") for cp, a, b in _lower_rows()}


def lowercase(text: str) -> str:
    return text.translate(_translate_table())


def apply(norm: Normalizer, text: str) -> str:
    """The steps on the host, in their order (NFC at the NFC table's Unicode version: nfc())."""
    for s in norm.steps:
        text = nfc(text) if s == "nfc" else lowercase(text)
    return text


def nfc(text: str) -> str:
    """NFC as the reference (HF tokenizers) computes it, at the NFC table's Unicode version
    (unicode.unicode_version("nfc")): a code point assigned since is a starter that neither
    decomposes nor composes there, so the text is normalized piece by piece between such code
    points, which stay as they are. Within a piece every code point is assigned at the table's
    version, where any later Unicode normalizes the same (Unicode's normalization stability), so
    the installed unicodedata (unicodedata2 or the standard library's, if not older) does it."""
    ucd = _unicodedata()
    if text.isascii():
        return text
    newer = _newer_code_points()
    if newer.search(text) is None:
        return ucd.normalize("NFC", text)
    parts = newer.split(text)  # (capturing: the separators at odd indices)
    return "".join(p if k % 2 else ucd.normalize("NFC", p) for k, p in enumerate(parts))


@functools.lru_cache(maxsize=1)
def _newer_code_points():
    """A compiled `re` matching one code point that is not assigned at the NFC table's version."""
    import re

    mask = ~uni.nfc_assigned() & uni.SCALAR_VALUES
    edges = np.flatnonzero(np.diff(np.concatenate([[0], mask.astype(np.int8), [0]])))
    ranges = "".join(
        f"\\U{lo:08x}-\\U{hi - 1:08x}" for lo, hi in zip(edges[::2].tolist(), edges[1::2].tolist())
    )
    return re.compile(f"([{ranges}])")


@functools.lru_cache(maxsize=1)
def _unicodedata():
    # Any unicodedata at least as new as the NFC table's version normalizes like it on the
    # pieces nfc() gives it; unicodedata2 if installed, else the standard library's.
    try:
        import unicodedata2 as ucd
    except ImportError:  # pragma: no cover - depends on the environment
        import unicodedata as ucd
    if tuple(map(int, ucd.unidata_version.split("."))) < tuple(
        map(int, uni.unicode_version("nfc").split("."))
    ):  # pragma: no cover - Python's own is newer than 9.0 since 3.7
        raise RuntimeError(
            f"{ucd.__name__} is Unicode {ucd.unidata_version}, older than the NFC tables' "
            f"{uni.unicode_version('nfc')}"
        )
    return ucd


def _utf8_len(cp: np.ndarray) -> np.ndarray:
    return 1 + (cp >= 0x80) + (cp >= 0x800) + (cp >= 0x10000)


@functools.lru_cache(maxsize=1)
def lower_tables() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index uint8[0x110000], deltas int32[LOWER_DELTAS], lower int32[0x110000]): the kernels'
    table (LOWER_SAME: unchanged; LOWER_FLAG: the row is reported; k: add deltas[k]) and the
    lowercase of every code point the kernels rewrite (itself elsewhere).

    Flagged besides the changes of UTF-8 length: any lowercase that is not again its own
    lowercase, or whose combining class or NFC quick check differs from the code point's in
    a way the widened NFC tables do not cover (a mark or Maybe); none exist in these tables."""
    rows = _lower_rows()
    cp, first, second = rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64), rows[:, 2]
    lower = np.arange(0x110000, dtype=np.int64)
    same = (second < 0) & (_utf8_len(cp) == _utf8_len(first))
    lower[cp[same]] = first[same]
    ccc, qc = uni.ccc(), uni.nfc_quick_check()
    ok = same & (lower[first] == first) & (ccc[first] == 0) & (ccc[cp] == 0) & (qc[first] != 1)
    deltas = np.unique(first[ok] - cp[ok])
    if len(deltas) > LOWER_FLAG - 1:
        raise ValueError(f"{len(deltas)} lowercase deltas; the table holds {LOWER_FLAG - 1}")
    index = np.zeros(0x110000, np.uint8)
    index[cp] = LOWER_FLAG
    index[cp[ok]] = 1 + np.searchsorted(deltas, first[ok] - cp[ok])
    lower[cp[~ok]] = cp[~ok]
    table = np.zeros(LOWER_DELTAS, np.int32)
    table[1 : 1 + len(deltas)] = deltas
    for a in (index, table, lower):
        a.setflags(write=False)
    return index, table, lower.astype(np.int32)


def compose_classes(class_of_cp: np.ndarray) -> np.ndarray:
    """A stage's code point -> class table as seen on lowercased text (the pre-tokenizer then
    runs on raw text and splits it as HF splits its lowercase)."""
    return class_of_cp[lower_tables()[2]]


def widen_nfc(marks: np.ndarray, trail: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The NFC marks (per code point) and kCccTrail starters, widened by each code point's
    lowercase (module docstring)."""
    lower = lower_tables()[2]
    return marks | marks[lower], trail | trail[lower]


def widen_pairs(pairs: np.ndarray) -> np.ndarray:
    """The composition pairs plus (S, M) for every (lowercase(S), M), sorted."""
    lower = lower_tables()[2]
    by_first: dict[int, list[int]] = {}
    for f, s in pairs:
        by_first.setdefault(int(f), []).append(int(s))
    upper = np.nonzero(lower != np.arange(0x110000))[0]
    extra = [(int(u), m) for u in upper for m in by_first.get(int(lower[u]), ())]
    out = np.array(sorted({(int(f), int(s)) for f, s in pairs} | set(extra)), np.int32)
    return out.reshape(-1, 2)
