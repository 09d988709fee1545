"""Parse the regexes of BPE pre-tokenizers into a small syntax tree.

The supported family is what tiktoken-style and HF tokenizer.json patterns use: alternation,
groups `(...)`, `(?:...)`, `(?i:...)`, `(?i)`, named groups; character classes with ranges,
negation, nesting and `&&`; `\\s \\S \\d \\D \\p{..} \\P{..}` (general categories, `L&`-style
groups and the scripts in unicode.py); quantifiers `? * + {m} {m,} {m,n}`, lazy (`?` suffix) and
possessive (`+` suffix) forms; anchors `$ \\z \\Z`; lookahead `(?=...)` / `(?!...)`.
Everything else raises RegexUnsupported naming the construct.

Char sets are kept as `CharSet` (a bool mask over code points, built lazily) because the
compiler derives its character classes from them.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Union

import numpy as np

from . import unicode as uni


class RegexUnsupported(ValueError):
    """A pattern uses a construct the pre-tokenizer compiler does not implement."""


@dataclasses.dataclass(frozen=True)
class CharSet:
    """A set of code points, as a bool mask over U+0000..U+10FFFF."""

    mask: np.ndarray

    def __or__(self, other):
        return CharSet(self.mask | other.mask)

    def __and__(self, other):
        return CharSet(self.mask & other.mask)

    def __sub__(self, other):
        return CharSet(self.mask & ~other.mask)

    def invert(self):
        return CharSet(~self.mask & uni.SCALAR_VALUES)

    def __eq__(self, other):
        return isinstance(other, CharSet) and np.array_equal(self.mask, other.mask)

    def __hash__(self):
        return hash(self.mask.tobytes())


def empty_set() -> CharSet:
    return CharSet(np.zeros(uni.N_CODE_POINTS, bool))


def chars(*cps: int) -> CharSet:
    s = empty_set()
    s.mask[list(cps)] = True
    return s


def char_range(lo: int, hi: int) -> CharSet:
    s = empty_set()
    s.mask[lo : hi + 1] = True
    return CharSet(s.mask & uni.SCALAR_VALUES)


# Syntax tree nodes.
@dataclasses.dataclass(frozen=True)
class Chars:  # one code point from a set
    cs: CharSet


@dataclasses.dataclass(frozen=True)
class Seq:
    items: tuple


@dataclasses.dataclass(frozen=True)
class Alt:
    items: tuple


@dataclasses.dataclass(frozen=True)
class Repeat:
    item: object
    lo: int
    hi: int | None  # None: unbounded
    greedy: bool
    possessive: bool


@dataclasses.dataclass(frozen=True)
class EndOfText:  # \z (and `$` in tiktoken's flavour)
    pass


@dataclasses.dataclass(frozen=True)
class EndOfLine:  # `$` in HF's flavour: before a \n or at the end
    pass


@dataclasses.dataclass(frozen=True)
class Look:  # (?=...) / (?!...)
    item: object
    negate: bool


Node = Union[Chars, Seq, Alt, Repeat, EndOfText, EndOfLine, Look]

# What `$` means: tiktoken (Rust regex, no multi-line flag): end of text; HF tokenizers
# (Oniguruma, Ruby syntax): end of line, i.e. before a \n or at the end.
FLAVOURS = ("tiktoken", "hf")
_SET_ESCAPES = "sSdDpP"  # escapes that stand for a set of code points


class _Parser:
    def __init__(self, pattern: str, flavour: str):
        self.p = pattern
        self.i = 0
        self.flavour = flavour

    def fail(self, what: str):
        raise RegexUnsupported(f"{what} (at offset {self.i} of {self.p!r})")

    def peek(self, k: int = 0) -> str:
        return self.p[self.i + k] if self.i + k < len(self.p) else ""

    def take(self, s: str) -> bool:
        if self.p.startswith(s, self.i):
            self.i += len(s)
            return True
        return False

    def parse(self) -> Node:
        node = self.alternation("")
        if self.i != len(self.p):
            self.fail(f"unbalanced {self.peek()!r}")
        return node

    def alternation(self, fl: str) -> Node:
        item, fl = self.sequence(fl)
        items = [item]
        while self.take("|"):
            item, fl = self.sequence(fl)  # a (?i) applies up to the end of its group
            items.append(item)
        return items[0] if len(items) == 1 else Alt(tuple(items))

    def sequence(self, fl: str) -> tuple[Node, str]:
        items = []
        while self.i < len(self.p) and self.peek() not in "|)":
            m = re.match(r"\(\?([a-zA-Z]+)\)", self.p[self.i :])
            if m:  # flags for the rest of the group
                fl = self._flags(fl, m.group(1), self.fail)
                self.i += m.end()
                continue
            atom = self.atom(fl)
            items.append(self.quantified(atom))
        return (items[0] if len(items) == 1 else Seq(tuple(items))), fl

    def quantified(self, atom: Node) -> Node:
        while True:
            c = self.peek()
            if c == "?":
                lo, hi = 0, 1
            elif c == "*":
                lo, hi = 0, None
            elif c == "+":
                lo, hi = 1, None
            elif c == "{" and self._counted_ahead():
                lo, hi = self._counted()
            else:
                return atom
            if c != "{":
                self.i += 1
            greedy, possessive = True, False
            if self.take("?"):
                greedy = False
            elif self.take("+"):
                possessive = True
            if isinstance(atom, (EndOfText, EndOfLine, Look)):
                self.fail("a quantifier on an assertion is not supported")
            atom = Repeat(atom, lo, hi, greedy, possessive)

    def _counted_ahead(self) -> bool:
        j = self.p.find("}", self.i)
        body = self.p[self.i + 1 : j] if j > 0 else ""
        return bool(body) and all(ch.isdigit() or ch == "," for ch in body) and body[0].isdigit()

    def _counted(self) -> tuple[int, int | None]:
        j = self.p.index("}", self.i)
        body = self.p[self.i + 1 : j]
        self.i = j + 1
        if "," not in body:
            n = int(body)
            return n, n
        lo, hi = body.split(",", 1)
        lo_v, hi_v = int(lo), (int(hi) if hi else None)
        if hi_v is not None and hi_v < lo_v:
            self.fail(f"repetition {{{body}}} has max < min")
        if (hi_v or lo_v) > 64:
            self.fail(f"repetition {{{body}}}: counts above 64 are not supported")
        return lo_v, hi_v

    def atom(self, fl: str) -> Node:
        ci = "i" in fl
        c = self.peek()
        if c == "(":
            return self.group(fl)
        if c == "[":
            return Chars(self.char_class(ci))
        if c == ".":
            self.i += 1
            return Chars(chars(0x0A).invert() if "s" not in fl else chars(0x0A) | chars(0x0A).invert())
        if c == "$":
            self.i += 1
            return EndOfText() if self.flavour == "tiktoken" else EndOfLine()
        if c == "^":
            self.fail("start anchor ^ is not supported")
        if c in "*+?":
            self.fail(f"quantifier {c!r} with nothing to repeat")
        if c == "\\":
            esc = self.peek(1)
            if esc == "z":
                self.i += 2
                return EndOfText()
            if esc == "Z":
                self.i += 2
                return Look(Seq((Repeat(Chars(chars(0x0A)), 0, 1, True, False), EndOfText())), negate=False)
            if esc in "AbBG":
                self.fail(f"anchor \\{esc} is not supported")
            return Chars(self._fold(self.escape(), ci))
        self.i += 1
        return Chars(self._fold(chars(ord(c)), ci))

    def group(self, fl: str) -> Node:
        start = self.i
        self.i += 1
        look = None

        def fail_here(what):
            self.i = start
            self.fail(what)

        if self.take("?"):
            if self.take(":"):
                pass
            elif self.take("="):
                look = False
            elif self.take("!"):
                look = True
            elif self.peek() == "<" and self.peek(1) in "=!":
                fail_here(
                    "lookbehind (?<=...) is not supported"
                    if self.peek(1) == "="
                    else "lookbehind (?<!...) is not supported"
                )
            elif self.peek() == ">":
                fail_here("atomic group (?>...) is not supported")
            elif self.peek() in "<P'":
                end = ">" if self.peek() in "<P" else "'"
                j = self.p.find(end, self.i + 1)
                if j < 0:
                    self.fail("unterminated group name")
                self.i = j + 1
            else:
                flags = ""
                while self.peek() and self.peek() not in ":)":
                    flags += self.peek()
                    self.i += 1
                fl = self._flags(fl, flags, fail_here)
                if not self.take(":"):
                    fail_here(f"inline flags (?{flags}) are only supported before the items they apply to")
        node = self.alternation(fl)
        if not self.take(")"):
            self.fail("missing )")
        if look is not None:
            return Look(node, negate=look)
        return node

    def _flags(self, fl: str, flags: str, fail) -> str:
        """Active flags after an inline (?flags): "i" case-insensitive, "s" dot-all. The dot-all
        flag is spelled s in Rust's syntax (tiktoken) and m in Ruby's (Oniguruma, HF)."""
        dotall = "s" if self.flavour == "tiktoken" else "m"
        allowed = {"i": "i", dotall: "s"}
        if not flags or any(f not in allowed for f in flags):
            fail(f"inline flags (?{flags}) are not supported (only i and {dotall})")
        return "".join(sorted(set(fl + "".join(allowed[f] for f in flags))))

    def escape(self) -> CharSet:
        """A backslash escape at self.i (inside or outside a class) as a CharSet: one code point,
        or a set for the escapes in _SET_ESCAPES."""
        esc = self.peek(1)
        self.i += 2
        simple = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B, "0": 0}
        if esc in simple:
            return chars(simple[esc])
        if esc == "s":
            return uni.white_space()
        if esc == "S":
            return uni.white_space().invert()
        if esc == "d":
            return uni.property_set("Nd")
        if esc == "D":
            return uni.property_set("Nd").invert()
        if esc in "pP":
            if self.take("{"):
                j = self.p.find("}", self.i)
                if j < 0:
                    self.fail("unterminated \\p{")
                name = self.p[self.i : j]
                self.i = j + 1
            else:
                name = self.peek()
                self.i += 1
            negate = esc == "P"
            if name.startswith("^"):
                negate, name = not negate, name[1:]
            try:
                s = uni.property_set(name)
            except KeyError:
                self.fail(f"Unicode property \\{esc}{{{name}}} is not supported")
            return s.invert() if negate else s
        if esc == "x":
            if self.take("{"):
                j = self.p.index("}", self.i)
                cp = int(self.p[self.i : j], 16)
                self.i = j + 1
            else:
                cp = int(self.p[self.i : self.i + 2], 16)
                self.i += 2
            return chars(cp)
        if esc == "u":
            cp = int(self.p[self.i : self.i + 4], 16)
            self.i += 4
            return chars(cp)
        if esc in "wWbBhHRXkg" or esc.isdigit():
            self.i -= 2
            self.fail(f"escape \\{esc} is not supported")
        if esc == "":
            self.fail("trailing backslash")
        return chars(ord(esc))

    def char_class(self, ci: bool) -> CharSet:
        """[...] at self.i, with ranges, negation, nested classes and && (Rust syntax)."""
        self.i += 1
        negate = self.take("^")
        acc = empty_set()
        first = True
        while True:
            if self.i >= len(self.p):
                self.fail("unterminated [")
            if self.peek() == "]" and not first:
                self.i += 1
                break
            first = False
            if self.take("&&"):
                rest = self._class_rest(ci)
                acc = acc & rest
                break
            item = self._class_item(ci)
            acc = acc | item
        acc = self._fold(acc, ci)
        return acc.invert() if negate else acc

    def _class_rest(self, ci: bool) -> CharSet:
        # The right operand of && up to the closing ] of the enclosing class.
        acc = empty_set()
        while True:
            if self.i >= len(self.p):
                self.fail("unterminated [")
            if self.take("]"):
                return acc
            if self.take("&&"):
                return acc & self._class_rest(ci)
            acc = acc | self._class_item(ci)

    def _class_item(self, ci: bool) -> CharSet:
        if self.peek() == "[":
            if self.p.startswith("[:", self.i):
                self.fail("POSIX classes [:...:] are not supported")
            return self.char_class(ci)
        lo = self._class_char()
        if isinstance(lo, CharSet):
            return lo
        if self.peek() == "-" and self.peek(1) not in ("]", ""):
            self.i += 1
            hi = self._class_char()
            if isinstance(hi, CharSet):
                self.fail("a range cannot end in a class escape")
            if hi < lo:
                self.fail("invalid range (end before start)")
            return char_range(lo, hi)
        return chars(lo)

    def _class_char(self) -> int | CharSet:
        """A class member: a code point (which may start a range) or a set escape (\\s, \\p...)."""
        c = self.peek()
        if c != "\\":
            self.i += 1
            return ord(c)
        is_set = self.peek(1) in _SET_ESCAPES
        s = self.escape()
        return s if is_set else int(np.flatnonzero(s.mask)[0])

    @staticmethod
    def _fold(cs: CharSet, ci: bool) -> CharSet:
        return uni.case_fold_closure(cs) if ci else cs


def parse(pattern: str, flavour: str = "tiktoken") -> Node:
    """The syntax tree of `pattern`; RegexUnsupported for constructs outside the family."""
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {FLAVOURS}, got {flavour!r}")
    return _Parser(pattern, flavour).parse()
