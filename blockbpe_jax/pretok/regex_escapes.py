"""Escapes and bracketed classes of a pre-tokenizer regex, in either dialect: the part of the
parser (regex_syntax._Parser) that reads code points and sets."""

from __future__ import annotations

import numpy as np

from . import unicode as uni
from .regex_nodes import DIALECT_NAMES
from .unicode import CharSet, char_range, chars, empty_set

_SET_ESCAPES = "sSdDpPhH"  # escapes that stand for a set of code points
_SIMPLE_ESCAPES = {"n": 0x0A, "r": 0x0D, "t": 0x09, "f": 0x0C, "v": 0x0B, "a": 0x07, "e": 0x1B}
_HEX = "0123456789abcdefABCDEF"


class SetParser:
    """Methods of regex_syntax._Parser: self.p, self.i, self.hf, self.flavour, peek, take,
    fail and fail_dialect are its."""

    def _hex_digits(self, lo: int, hi: int) -> int:
        j = self.i
        while j < len(self.p) and j - self.i < hi and self.p[j] in _HEX:
            j += 1
        if j - self.i < lo:
            self.fail("malformed hexadecimal escape")
        cp = int(self.p[self.i : j], 16)
        self.i = j
        return cp

    def _braced_hex(self) -> int:
        j = self.p.find("}", self.i)
        body = self.p[self.i + 1 : j] if j > 0 else ""
        if not body or any(ch not in _HEX for ch in body):
            self.fail("malformed \\x{...} escape")
        self.i = j + 1
        return int(body, 16)

    def char_escape(self) -> int:
        """A backslash escape at self.i that stands for one code point (in or outside a class)."""
        esc = self.peek(1)
        self.i += 2
        if esc and esc in _SIMPLE_ESCAPES:
            return _SIMPLE_ESCAPES[esc]
        if esc == "x":
            if self.peek() == "{":
                cp = self._braced_hex()
            elif self.hf:
                cp = self._hex_digits(1, 2)
                if cp >= 0x80:
                    self.i -= 4
                    self.fail_dialect(f"\\x{cp:02X} is a byte, not a character, in Oniguruma (UTF-8)")
            else:
                cp = self._hex_digits(2, 2)
        elif esc == "u":
            if self.peek() == "{":
                if self.hf:
                    self.i -= 2
                    self.fail_dialect("\\u{...} is not Oniguruma syntax")
                cp = self._braced_hex()
            else:
                cp = self._hex_digits(4, 4)
        elif esc == "U" and not self.hf:
            cp = self._braced_hex() if self.peek() == "{" else self._hex_digits(8, 8)
        elif esc == "0" and self.hf and not self.peek().isdigit():
            cp = 0  # Oniguruma's octal \0 (fancy-regex reads \0 as a backreference)
        elif esc == "":
            self.fail("trailing backslash")
        elif esc.isascii() and esc.isalnum():
            self.i -= 2
            self.fail(f"escape \\{esc} is not supported")
        else:
            return ord(esc)  # an escaped symbol: itself, in both dialects
        if cp > 0x10FFFF or 0xD800 <= cp < 0xE000:
            self.fail(f"escape for U+{cp:04X}: not a Unicode scalar value")
        return cp

    def set_escape(self) -> tuple[CharSet, bool]:
        """\\s \\d \\h \\p{..} and their negations at self.i: (the set, negated)."""
        esc = self.peek(1)
        self.i += 2
        if esc in "sS":
            return uni.white_space(), esc == "S"
        if esc in "dD":
            return uni.property_set("Nd"), esc == "D"
        if esc in "hH":  # hexadecimal digits, in both dialects
            return char_range(0x30, 0x39) | char_range(0x41, 0x46) | char_range(0x61, 0x66), esc == "H"
        if self.take("{"):
            j = self.p.find("}", self.i)
            if j < 0:
                self.fail("unterminated \\p{")
            name = self.p[self.i : j]
            self.i = j + 1
        else:
            if self.hf:
                self.i -= 2
                self.fail_dialect(f"\\{esc} without braces (Oniguruma reads it as the letter {esc})")
            name = self.peek()
            self.i += 1
        negate = esc == "P"
        if name.startswith("^"):
            negate, name = not negate, name[1:]
        try:
            s = uni.property_set(name, self.flavour)
        except KeyError:
            self.fail(
                f"Unicode property \\{esc}{{{name}}} is not supported in the "
                f"{DIALECT_NAMES[self.flavour]} dialect"
            )
        return s, negate

    # -- classes -----------------------------------------------------------------------------
    def char_class(self, ci: bool, top: bool = False) -> CharSet:
        """[...] at self.i, with ranges, negation, nested classes and &&.

        Case folding under (?i): fancy-regex folds every item (a negated item before its
        negation), Oniguruma folds the outermost class as a whole (before its negation) and
        nothing inside it."""
        start = self.i
        self.i += 1
        negate = self.take("^")
        stack = self.__dict__.setdefault("_class_ops", [])
        stack.append([False])  # per && operand: whether it holds a negated class or escape
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
                stack[-1].append(False)
                rest = self._class_rest(ci)
                acc = acc & rest
                break
            item = self._class_item(ci)
            acc = acc | item
        operands = stack.pop()
        if self.hf and len(operands) > 1 and sum(operands) > 1:
            self.i = start
            self.fail_dialect(
                "&& between operands that both hold a negated class or escape is not supported "
                "(Oniguruma drops code points from some of these)"
            )
        if negate and stack:
            stack[-1][-1] = True
        if self.hf and ci and top:
            if not negate:
                multi = acc.mask & uni.multi_char_fold_mask()
                if multi.any():
                    cp = int(np.flatnonzero(multi)[0])
                    self.i = start
                    self.fail_dialect(
                        f"a class holding U+{cp:04X} under (?i) is not supported: Oniguruma may "
                        f"match its multi-character case fold {uni.multi_char_folds()[cp]!r} too"
                    )
            acc = uni.case_fold_closure(acc)
        elif not self.hf and ci:
            acc = uni.case_fold_closure(acc)
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
                self._class_ops[-1].append(False)
                return acc & self._class_rest(ci)
            acc = acc | self._class_item(ci)

    def _class_item(self, ci: bool) -> CharSet:
        if self.peek() == "[":
            if self.p.startswith("[:", self.i):
                self.fail(
                    "POSIX classes [:...:] are not supported (ASCII in fancy-regex, Unicode in Oniguruma)"
                )
            return self.char_class(ci)
        if self.p.startswith("--", self.i) or self.p.startswith("~~", self.i):
            op = self.p[self.i : self.i + 2]
            self.fail(
                f"{op!r} in a class is not supported (a set operation in fancy-regex, literal "
                f"characters in Oniguruma)"
            )
        lo = self._class_char(ci)
        if isinstance(lo, CharSet):
            return lo
        if self.peek() == "-" and self.peek(1) not in ("]", ""):
            if self.peek(1) == "-":
                self.fail("'--' in a class is not supported (a set operation in fancy-regex)")
            self.i += 1
            hi = self._class_char(ci)
            if isinstance(hi, CharSet):
                self.fail("a range cannot end in a class escape")
            if hi < lo:
                self.fail("invalid range (end before start)")
            return self._fold(char_range(lo, hi), ci and not self.hf)
        return self._fold(chars(lo), ci and not self.hf)

    def _class_char(self, ci: bool) -> int | CharSet:
        """A class member: a code point (which may start a range) or a set escape (\\s, \\p...)."""
        c = self.peek()
        if c != "\\":
            self.i += 1
            return ord(c)
        if self.peek(1) and self.peek(1) in _SET_ESCAPES:
            base, negate = self.set_escape()
            if negate:
                self._class_ops[-1][-1] = True
            return self._negate(self._fold(base, ci and not self.hf), negate)
        return self.char_escape()

    @staticmethod
    def _negate(cs: CharSet, negate: bool) -> CharSet:
        return cs.invert() if negate else cs

    @staticmethod
    def _fold(cs: CharSet, ci: bool) -> CharSet:
        return uni.case_fold_closure(cs) if ci else cs
