"""Parse the regexes of BPE pre-tokenizers into a small syntax tree, in the dialect of where the
pattern came from.

Two dialects (`FLAVOURS`):
  "tiktoken"  fancy-regex (tiktoken, a .tiktoken file's pattern): Rust regex syntax plus
              possessive quantifiers; `$` is the end of the text.
  "hf"        Oniguruma with its default syntax (HF tokenizers compiles a tokenizer.json Split
              regex so): `$` is the end of a line, `{m,n}+` is a greedy repeat of the interval
              `(?:X{m,n})+` (not possessive), `{n}?` is `(?:X{n})?`, `(?m)` is dot-all.

The supported family is what tiktoken-style and HF tokenizer.json patterns use: alternation,
groups `(...)`, `(?:...)`, `(?i:...)`, `(?i)`, named groups; character classes with ranges,
negation, nesting and `&&`; `\\s \\S \\d \\D \\h \\H \\p{..} \\P{..}` (general categories,
groups such as L, N, P and the scripts in unicode.py); quantifiers `? * + {m} {m,} {m,n} {,n}`,
lazy (`?` suffix) and possessive (`+` suffix, for `? * +` in both dialects and for intervals in
fancy-regex's); anchors `$ \\z \\Z`; lookahead `(?=...)` / `(?!...)`. Where the dialects read a
construct differently, each is honoured (see docs/families.md, "Regex dialects"); everything else
raises RegexUnsupported naming the construct, among them those whose meaning differs and that we
do not model: POSIX brackets, `--` and `~~` in classes, a quantifier directly on a quantifier,
and, in Oniguruma's case-insensitive mode, anything that could match a multi-character case
fold (`(?i)ss` matches "ß" there, not in fancy-regex).

Char sets are kept as `CharSet` (a bool mask over code points, built lazily) because the
compiler derives its character classes from them.
"""

from __future__ import annotations

import re

from . import unicode as uni
from .regex_escapes import _SET_ESCAPES, SetParser
from .unicode import CharSet, char_range, chars, empty_set  # noqa: F401 (used as rs.X)
from .regex_nodes import (  # noqa: F401 (the tree's names, used as rs.X)
    DIALECT_NAMES,
    FLAVOURS,
    Alt,
    Chars,
    EndOfLine,
    EndOfText,
    Look,
    Node,
    Repeat,
    RegexUnsupported,
    Seq,
    check_fold_runs,
)


class _Parser(SetParser):
    def __init__(self, pattern: str, flavour: str):
        self.p = pattern
        self.i = 0
        self.flavour = flavour
        self.hf = flavour == "hf"

    def fail(self, what: str):
        raise RegexUnsupported(f"{what} (at offset {self.i} of {self.p!r})")

    def fail_dialect(self, what: str):
        self.fail(f"{what} [{DIALECT_NAMES[self.flavour]} dialect]")

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

    # -- quantifiers -------------------------------------------------------------------------
    def _quantifier(self):
        """(lo, hi, interval, fixed) of a quantifier at self.i, consumed; None if there is none.
        fixed: written {n} (no comma)."""
        c = self.peek()
        if c and c in "?*+":
            self.i += 1
            return {"?": (0, 1), "*": (0, None), "+": (1, None)}[c] + (False, False)
        if c == "{" and self._counted_ahead():
            fixed = "," not in self.p[self.i : self.p.index("}", self.i)]
            lo, hi = self._counted()
            return lo, hi, True, fixed
        return None

    def quantified(self, atom: Node) -> Node:
        start = self.i
        q = self._quantifier()
        if q is None:
            return atom
        lo, hi, interval, fixed = q
        if _assertion_only(atom):
            self.i = start
            self.fail(
                "a quantifier on an assertion (or a group with an alternative of assertions "
                "only, which Oniguruma rejects) is not supported"
            )
        if _nullable(atom) and (hi is None or hi > 1):
            self.i = start
            self.fail(
                "a repeat of something that can match the empty string is not supported (the "
                "engines end an empty iteration differently)"
            )
        if self.take("?"):
            if self.hf and interval and fixed:
                # Oniguruma: X{n}? is (?:X{n})?, not a lazy X{n}
                node = Repeat(Repeat(atom, lo, hi, True, False), 0, 1, True, False)
            else:
                node = Repeat(atom, lo, hi, False, False)
        elif self.take("+"):
            if self.hf and interval:
                # Oniguruma: X{m,n}+ is (?:X{m,n})+, a greedy repeat of the interval
                if lo == 0:
                    self.i = start
                    self.fail(
                        "X{0,n}+ is not supported: Oniguruma reads it as (?:X{0,n})+, a repeat "
                        "of something that can match the empty string"
                    )
                node = Repeat(Repeat(atom, lo, hi, True, False), 1, None, True, False)
            else:
                node = Repeat(atom, lo, hi, True, True)
        else:
            node = Repeat(atom, lo, hi, True, False)
        if self.peek() in ("?", "*", "+") or (self.peek() == "{" and self._counted_ahead()):
            self.fail(
                "a quantifier directly after a quantifier is not supported (fancy-regex rejects "
                "it, Oniguruma reads it as a nested repeat with its own reductions): put the "
                "inner one in a group"
            )
        return node

    def _counted_ahead(self) -> bool:
        j = self.p.find("}", self.i)
        body = self.p[self.i + 1 : j] if j > 0 else ""
        if not body or not all(ch.isdigit() or ch == "," for ch in body) or body.count(",") > 1:
            return False
        return body[0].isdigit() or (body[0] == "," and len(body) > 1)  # {,n}: {0,n} in both

    def _counted(self) -> tuple[int, int | None]:
        j = self.p.index("}", self.i)
        body = self.p[self.i + 1 : j]
        if "," not in body:
            n = int(body)
            lo_v, hi_v = n, n
        else:
            lo, hi = body.split(",", 1)
            lo_v, hi_v = int(lo or "0"), (int(hi) if hi else None)
        if hi_v is not None and hi_v < lo_v:
            self.fail(f"repetition {{{body}}} has max < min")
        if (hi_v or lo_v) > 64:
            self.fail(f"repetition {{{body}}}: counts above 64 are not supported")
        self.i = j + 1
        return lo_v, hi_v

    # -- atoms -------------------------------------------------------------------------------
    def atom(self, fl: str) -> Node:
        ci = "i" in fl
        c = self.peek()
        if c == "(":
            return self.group(fl)
        if c == "[":
            return Chars(self.char_class(ci, top=True))
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
                # Oniguruma: the end, or before a final \n; fancy-regex: before trailing \n's
                newlines = Repeat(Chars(chars(0x0A)), 0, 1 if self.hf else None, True, False)
                return Look(Seq((newlines, EndOfText())), negate=False)
            if esc and esc in "AbBG":
                self.fail(f"anchor \\{esc} is not supported")
            if esc and esc in _SET_ESCAPES:
                base, negate = self.set_escape()
                # Oniguruma applies (?i) to a class written outside brackets not at all;
                # fancy-regex folds it, then negates.
                return Chars(self._negate(self._fold(base, ci and not self.hf), negate))
            cp = self.char_escape()
            return self._literal(cp, ci)
        self.i += 1
        return self._literal(ord(c), ci)

    def _literal(self, cp: int, ci: bool) -> Chars:
        if not ci:
            return Chars(chars(cp))
        if self.hf and cp in uni.multi_char_folds():
            self.fail_dialect(
                f"U+{cp:04X} under (?i) is not supported: Oniguruma matches its multi-character "
                f"case fold {uni.multi_char_folds()[cp]!r} too"
            )
        return Chars(uni.case_fold_closure(chars(cp)), cp if self.hf else None)

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
            elif self.peek() == "<" and self.peek(1) and self.peek(1) in "=!":
                fail_here(
                    "lookbehind (?<=...) is not supported"
                    if self.peek(1) == "="
                    else "lookbehind (?<!...) is not supported"
                )
            elif self.peek() == ">":
                fail_here("atomic group (?>...) is not supported")
            elif self.peek() and self.peek() in "<P'":
                if self.peek() == "P" and self.hf:
                    fail_here("(?P<name>...) is not Oniguruma syntax (HF tokenizers rejects it)")
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
            fail(
                f"inline flags (?{flags}) are not supported (only i and {dotall} in the "
                f"{DIALECT_NAMES[self.flavour]} dialect)"
            )
        return "".join(sorted(set(fl + "".join(allowed[f] for f in flags))))

    # -- escapes -----------------------------------------------------------------------------


def _nullable(node) -> bool:
    """Whether a node can match the empty string (assertions taken as true)."""
    if isinstance(node, Chars):
        return False
    if isinstance(node, Seq):
        return all(_nullable(x) for x in node.items)
    if isinstance(node, Alt):
        return any(_nullable(x) for x in node.items)
    if isinstance(node, Repeat):
        return node.lo == 0 or _nullable(node.item)
    return True


def _assertion_only(node) -> bool:
    """An assertion, a sequence of them, or an alternation with such an alternative."""
    if isinstance(node, (EndOfText, EndOfLine, Look)):
        return True
    if isinstance(node, Seq):
        return all(_assertion_only(x) for x in node.items)
    if isinstance(node, Alt):
        return any(_assertion_only(x) for x in node.items)
    return False


def parse(pattern: str, flavour: str = "tiktoken") -> Node:
    """The syntax tree of `pattern` read in `flavour`'s dialect ("tiktoken": fancy-regex, "hf":
    Oniguruma); RegexUnsupported for constructs outside the family."""
    if flavour not in FLAVOURS:
        raise ValueError(f"flavour must be one of {FLAVOURS}, got {flavour!r}")
    tree = _Parser(pattern, flavour).parse()
    if flavour == "hf":
        check_fold_runs(tree, pattern)
    return tree


def same_in_both_dialects(pattern: str) -> bool:
    """Whether fancy-regex and Oniguruma read `pattern` the same way (as far as this parser
    tells: equal syntax trees); False when either refuses it."""
    try:
        return parse(pattern, "tiktoken") == parse(pattern, "hf")
    except RegexUnsupported:
        return False
