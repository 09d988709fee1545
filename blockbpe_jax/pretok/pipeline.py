"""A tokenizer's pre-tokenizer as data: its stages (one regex each), read from a tiktoken pattern
or an HF tokenizer.json `pre_tokenizer`, compiled once (cached on disk) into the kernels'
operand."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import re

import numpy as np

from ..disk_cache import kept_npz
from . import compiler, tables, versions
from . import normalizer as normalizer_mod
from .normalizer import Normalizer
from .compiler import PretokenizerUnsupported

# The regex HF's ByteLevel pre-tokenizer applies when `use_regex: true` (the GPT-2 pattern).
HF_BYTELEVEL_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
# HF Punctuation: Rust's is_ascii_punctuation or a Unicode P category, one code point per match.
HF_PUNCTUATION_PATTERN = r"[\p{P}!-/:-@\[-`{-~]"
_BEHAVIOURS = {
    "Isolated": "isolated",
    "MergedWithPrevious": "merged_with_previous",
    "MergedWithNext": "merged_with_next",
    "Contiguous": "contiguous",
}
_COMPILER_VERSION = "2"  # bump when compiler.py's output changes (invalidates the disk cache)


@dataclasses.dataclass(frozen=True)
class Stage:
    """One regex split. total: every character must be inside a match (tiktoken drops the text
    between matches, HF Split(Removed, invert=true) removes it), checked at compile time."""

    pattern: str
    flavour: str = "tiktoken"  # the regex dialect: "tiktoken" fancy-regex, "hf" Oniguruma (regex_syntax)
    behaviour: str = "isolated"
    invert: bool = False
    total: bool = False
    where: str = "pattern"  # names the stage in error messages


@dataclasses.dataclass(frozen=True)
class Pretokenizer:
    """The stages, and the tokenizer's normalizer: NFC (the kernels check that the text is in
    NFC: ffi/pretok/nfc.h, nfc_suspect_at) and Lowercase (the kernels lowercase the text:
    ffi/pretok/lowercase.h), in `normalizer`'s order (normalizer.py)."""

    stages: tuple[Stage, ...]
    nfc: bool = False
    normalizer: Normalizer = Normalizer()

    @property
    def lowercase(self) -> bool:
        return self.normalizer.lowercase

    def automata(self) -> list[compiler.Automata]:
        return [_compile_cached(s) for s in self.stages]

    def operand(self) -> np.ndarray:
        """The uint8 operand of the encode call (ffi/pretok/tables.h, PretokView)."""
        return _operand(self)

    def pieces(self, text: str, specials=()) -> list[int]:
        """Piece start offsets (code points) of text, in Python (a reference for tests)."""
        starts: set[int] = set()
        for a in self.automata():
            starts = set(compiler.run_automata(a, text, specials, boundaries=starts))
        return sorted(starts)


@functools.lru_cache(maxsize=64)
def _operand(p: Pretokenizer) -> np.ndarray:
    op = tables.pack(p.automata(), p.nfc, p.lowercase)
    op.setflags(write=False)
    return op


@functools.lru_cache(maxsize=64)
def _compile_cached(stage: Stage) -> compiler.Automata:
    """compiler.compile_pattern with a disk cache ($BLOCKBPE_CACHE_DIR, default
    ~/.cache/blockbpe_jax; "" turns it off): a large pattern takes seconds to compile."""
    key = hashlib.sha256(
        repr(
            (_COMPILER_VERSION, stage.pattern, stage.flavour, stage.behaviour, stage.invert, stage.total)
        ).encode()
    ).hexdigest()[:32]
    return kept_npz(
        "pretok",
        key,
        lambda: compiler.compile_pattern(
            stage.pattern,
            flavour=stage.flavour,
            behaviour=stage.behaviour,
            invert=stage.invert,
            total=stage.total,
            where=stage.where,
        ),
        to_arrays=dataclasses.asdict,
        # (arrays as saved, 0-d ones back to ints)
        from_arrays=lambda z: compiler.Automata(
            **{
                f.name: z[f.name] if z[f.name].ndim else int(z[f.name])
                for f in dataclasses.fields(compiler.Automata)
            }
        ),
        compressed=True,
    )


def from_tiktoken_pattern(pattern: str) -> Pretokenizer:
    """tiktoken's semantics: one regex in fancy-regex's dialect, text between matches dropped (so
    it must not occur). Warns if the installed tiktoken's Unicode differs from the tables'."""
    versions.check_references("tiktoken")
    return Pretokenizer((Stage(pattern, "tiktoken", "isolated", False, True, "pattern"),))


BYTES_MODE = Pretokenizer(())


def nfc_pairs(nfc: bool, lowercase: bool = False, rewrite: bool = False) -> np.ndarray:
    """The encode call's composition-pair operand: int32[K, 2], one stand-in row without NFC;
    with Lowercase too, widened (normalizer.widen_pairs). rewrite: the NFC normalization
    operand instead (nfc_data.py; an odd count), with which the executors normalize the rows
    to NFC rather than check them (device_normalizes says for which normalizers)."""
    from . import unicode as uni

    if not nfc:
        return np.zeros((1, 2), np.int32)
    if rewrite:
        from . import nfc_data

        return nfc_data.operand()
    return _widened_pairs() if lowercase else uni.nfc_pairs()


def device_normalizes(norm: Normalizer) -> bool:
    """Whether the executors normalize this normalizer's NFC (pretok/nfc_normalize.h): NFC alone,
    or NFC before Lowercase (the kernels lowercase the normalized rows in place, reporting a row
    with a code point whose lowercase they do not write in place). With Lowercase before NFC the
    rows are checked (NFC and Lowercase commute on rows that pass, normalizer.py) and the host
    normalizes the others."""
    return norm.steps in (("nfc",), ("nfc", "lowercase"))


@functools.lru_cache(maxsize=1)
def _widened_pairs() -> np.ndarray:
    from . import unicode as uni

    out = normalizer_mod.widen_pairs(uni.nfc_pairs())
    out.setflags(write=False)
    return out


def normalizer_from_hf(normalizer: object, where: str = "normalizer") -> Normalizer:
    """A byte-level tokenizer.json `normalizer` (normalizer.from_hf). Warns if the installed
    tokenizers' NFC or Lowercase is of another Unicode version than the tables'."""
    norm = normalizer_mod.from_hf(normalizer, where)
    versions.check_references("tokenizers", [{"nfc": "nfc"}.get(s, "lowercase") for s in norm.steps])
    return norm


def nfc_from_hf(normalizer: object, where: str = "normalizer") -> bool:
    """Whether a tokenizer.json `normalizer` has NFC (normalizer.from_hf raises for what is not
    supported)."""
    return normalizer_mod.from_hf(normalizer, where).nfc


def from_hf(pre: object, where: str = "pre_tokenizer") -> Pretokenizer:
    """The stages of a tokenizer.json `pre_tokenizer` (PretokenizerUnsupported names anything we
    cannot run exactly). Supported: ByteLevel (use_regex, add_prefix_space=false), Split (Regex or
    String; Isolated, MergedWithPrevious, MergedWithNext, Contiguous; invert with Isolated; Removed
    with invert=true when the regex matches every character), Digits, Punctuation, and Sequences
    of those."""
    if where == "pre_tokenizer":  # (the top level; the regexes are read in Oniguruma's dialect)
        versions.check_references("tokenizers", ["regex"])
    if pre is None:
        raise PretokenizerUnsupported(
            f"{where}: no pre-tokenizer (a byte-level BPE needs one; use mode='bytes' for none)"
        )
    kind, steps = normalizer_mod.hf_component(pre, where, "pretokenizers")
    if steps is not None:
        stages: list[Stage] = []
        for k, step in enumerate(steps):
            stages.extend(from_hf(step, f"{where}.pretokenizers[{k}]").stages)
        if len(stages) > tables.MAX_STAGES:
            raise PretokenizerUnsupported(
                f"{where}: {len(stages)} regex stages; at most {tables.MAX_STAGES} are supported"
            )
        return Pretokenizer(tuple(stages))
    if kind == "ByteLevel":
        if pre.get("add_prefix_space", True):
            raise PretokenizerUnsupported(f"{where}: ByteLevel with add_prefix_space=true is not supported")
        if not pre.get("use_regex", True):
            return Pretokenizer(())  # only the byte-to-character mapping: nothing to split
        return Pretokenizer((Stage(HF_BYTELEVEL_PATTERN, "hf", "isolated", False, False, f"{where}.regex"),))
    if kind == "Split":
        pat = pre.get("pattern")
        if isinstance(pat, dict) and isinstance(pat.get("Regex"), str):
            regex = pat["Regex"]
        elif isinstance(pat, dict) and isinstance(pat.get("String"), str):
            regex = re.escape(pat["String"])
            if not regex:
                raise PretokenizerUnsupported(f"{where}.pattern: empty String pattern")
        else:
            raise PretokenizerUnsupported(
                f"{where}.pattern: expected {{'Regex': ...}} or {{'String': ...}}, got {pat!r}"
            )
        behaviour, invert = pre.get("behavior"), bool(pre.get("invert", False))
        if invert and behaviour not in ("Isolated", "Removed"):
            raise PretokenizerUnsupported(
                f"{where}.invert: Split invert=true is only supported with behavior Isolated (or Removed)"
            )
        total = False
        if behaviour == "Removed" and invert:
            behaviour, total = "Isolated", True  # keeps the matches: equal when nothing else is left
        elif behaviour not in _BEHAVIOURS:
            raise PretokenizerUnsupported(
                f"{where}.behavior: {behaviour!r} is not supported (text would be removed)"
                if behaviour == "Removed"
                else f"{where}.behavior: {behaviour!r} is not supported"
            )
        return Pretokenizer((Stage(regex, "hf", _BEHAVIOURS[behaviour], invert, total, f"{where}.pattern"),))
    if kind == "Digits":
        behaviour = "isolated" if pre.get("individual_digits", False) else "contiguous"
        return Pretokenizer((Stage(r"\p{N}", "hf", behaviour, False, False, where),))
    if kind == "Punctuation":
        behaviour = _BEHAVIOURS.get(pre.get("behavior", "Isolated"))
        if behaviour is None:
            raise PretokenizerUnsupported(f"{where}.behavior: {pre.get('behavior')!r} is not supported")
        return Pretokenizer((Stage(HF_PUNCTUATION_PATTERN, "hf", behaviour, False, False, where),))
    raise PretokenizerUnsupported(f"{where}: pre-tokenizer type {kind!r} is not supported")
