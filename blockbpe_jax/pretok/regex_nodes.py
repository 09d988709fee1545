"""The syntax tree of a pre-tokenizer regex (regex_syntax.py parses it): nodes (over
unicode.CharSet), the dialects, and the check of Oniguruma's multi-character case folds on a tree."""

from __future__ import annotations

import dataclasses
from typing import Union


from . import unicode as uni
from .unicode import CharSet, chars


class RegexUnsupported(ValueError):
    """A pattern uses a construct the pre-tokenizer compiler does not implement."""


# Syntax tree nodes.
@dataclasses.dataclass(frozen=True)
class Chars:  # one code point from a set
    cs: CharSet
    # The code point as written, for a literal character under Oniguruma's (?i) (nfa.py checks
    # that no run of them spells a multi-character case fold); None otherwise.
    folded_literal: int | None = dataclasses.field(default=None, compare=False)


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

# The dialect of a pattern, named by where it comes from: "tiktoken" = fancy-regex (Rust regex
# syntax), "hf" = Oniguruma (HF tokenizers' Split).
FLAVOURS = ("tiktoken", "hf")
DIALECT_NAMES = {"tiktoken": "fancy-regex (tiktoken)", "hf": "Oniguruma (HF tokenizers)"}


def check_fold_runs(tree: Node, pattern: str):
    """Oniguruma's (?i) merges adjacent literal characters into one string and matches a
    multi-character case fold of the text against it: `(?i)ss` (also `(?i)(?:s)s`) matches "ß",
    `(?i)st` matches "ﬆ". Refuse a pattern where literals under (?i) can follow one another so
    as to spell a multi-character fold (a Glushkov follow relation over the literals, with
    repeats, groups and assertions taken as transparent: a superset of what Oniguruma merges)."""
    lits: list[int] = []  # position -> the literal's orbit representative set index
    follow: dict[int, set[int]] = {}

    def walk(node):  # -> (first, last, nullable)
        if isinstance(node, Chars):
            if node.folded_literal is None:
                return set(), set(), False  # a class: ends a run of literals
            k = len(lits)
            lits.append(node.folded_literal)
            return {k}, {k}, False
        if isinstance(node, Seq):
            first, last, nullable = set(), set(), True
            for item in node.items:
                f, la, n = walk(item)
                for p in last:
                    follow.setdefault(p, set()).update(f)
                if nullable:
                    first |= f
                last = (last | la) if n else la
                nullable = nullable and n
            return first, last, nullable
        if isinstance(node, Alt):
            parts = [walk(x) for x in node.items]
            return (
                set().union(*(p[0] for p in parts)),
                set().union(*(p[1] for p in parts)),
                any(p[2] for p in parts),
            )
        if isinstance(node, Repeat):
            f, la, n = walk(node.item)
            if node.hi is None or node.hi > 1:
                for p in la:
                    follow.setdefault(p, set()).update(f)
            return f, la, n or node.lo == 0
        if isinstance(node, Look):
            walk(node.item)
        return set(), set(), True  # assertions: transparent

    walk(tree)
    if not lits:
        return
    orbit = [set(uni.case_fold_closure(chars(cp)).mask.nonzero()[0].tolist()) for cp in lits]
    for cp, fold in uni.multi_char_folds().items():
        seq = [ord(c) for c in fold]
        paths = [[k] for k in range(len(lits)) if seq[0] in orbit[k]]
        for want in seq[1:]:
            paths = [p + [q] for p in paths for q in follow.get(p[-1], ()) if want in orbit[q]]
        if paths:
            spelled = "".join(chr(lits[k]) for k in paths[0])
            raise RegexUnsupported(
                f"{spelled!r} under (?i) is not supported: Oniguruma (HF tokenizers) matches it "
                f"against U+{cp:04X} {chr(cp)!r} too, as its case fold {fold!r} "
                f"[in {pattern!r}]"
            )
