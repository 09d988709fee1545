"""The NFA of a pre-tokenizer regex, with ordered choices (Thompson-style, built back to front):
the order of a node's successors is the order a backtracking engine tries them in, which is
what leftmost-first matching (tiktoken's Rust regex, HF's Oniguruma) means."""

from __future__ import annotations

import dataclasses

from . import regex_syntax as rs


class PretokenizerUnsupported(ValueError):
    """A pre-tokenizer cannot be compiled exactly (the message names the construct)."""


@dataclasses.dataclass
class Nfa:
    kind: list = dataclasses.field(default_factory=list)  # char split end eol look match
    arg: list = dataclasses.field(default_factory=list)  # CharSet | None | (sub_start, negate)
    out: list = dataclasses.field(default_factory=list)  # successors, in priority order

    def add(self, kind, arg=None, out=()):
        self.kind.append(kind)
        self.arg.append(arg)
        self.out.append(list(out))
        return len(self.kind) - 1


def single_set(node) -> rs.CharSet | None:
    """The CharSet of a node that matches exactly one code point, else None."""
    if isinstance(node, rs.Chars):
        return node.cs
    if isinstance(node, rs.Alt) and all(isinstance(x, rs.Chars) for x in node.items):
        acc = rs.empty_set()
        for x in node.items:
            acc = acc | x.cs
        return acc
    return None


def build(nfa: Nfa, node, nxt: int, depth: int) -> int:
    if isinstance(node, rs.Chars):
        return nfa.add("char", node.cs, [nxt])
    if isinstance(node, rs.Seq):
        for item in reversed(node.items):
            nxt = build(nfa, item, nxt, depth)
        return nxt
    if isinstance(node, rs.Alt):
        starts = [build(nfa, item, nxt, depth) for item in node.items]
        return nfa.add("split", None, starts)
    if isinstance(node, rs.EndOfText):
        return nfa.add("end", None, [nxt])
    if isinstance(node, rs.EndOfLine):  # the end, or a \n next
        return nfa.add("eol", rs.chars(0x0A), [nxt])
    if isinstance(node, rs.Look):
        if depth > 0:
            raise PretokenizerUnsupported("a lookahead inside a lookahead is not supported")
        sub_match = nfa.add("match")
        sub_start = build(nfa, node.item, sub_match, depth + 1)
        return nfa.add("look", (sub_start, node.negate), [nxt])
    if isinstance(node, rs.Repeat):
        return build_repeat(nfa, node, nxt, depth)
    raise TypeError(node)


def build_repeat(nfa: Nfa, node: rs.Repeat, nxt: int, depth: int) -> int:
    body = node.item
    possessive = node.possessive
    if possessive and depth > 0:
        # (its exits assert a lookahead: one inside a lookahead, which the compiler does not do)
        raise PretokenizerUnsupported("a possessive quantifier inside a lookahead is not supported")
    if possessive:
        # X{m,n}+ with X one code point: taking X is forced while the next code point is in X,
        # so the possessive form is the greedy one where every exit not at the maximum count
        # asserts (?!X). Possessive groups of several code points are not in this family.
        cs = single_set(body)
        if cs is None:
            raise PretokenizerUnsupported(
                "a possessive quantifier on more than one code point is not supported"
            )
    lo, hi = node.lo, node.hi

    def exit_to(target: int) -> int:
        if not possessive:
            return target
        sub_match = nfa.add("match")
        sub_start = nfa.add("char", single_set(body), [sub_match])
        return nfa.add("look", (sub_start, True), [target])

    def choice(take: int, leave: int) -> int:
        return nfa.add("split", None, [take, leave] if node.greedy else [leave, take])

    if hi is None:
        loop = nfa.add("split", None, [])
        take = build(nfa, body, loop, depth)
        leave = exit_to(nxt)
        nfa.out[loop] = [take, leave] if node.greedy else [leave, take]
        tail = loop
    else:
        # (X(X(...)?)?)? with hi - lo optional copies, nested so that counts are unambiguous.
        tail = nxt
        for k in range(hi - lo):
            take = build(nfa, body, tail, depth)
            tail = choice(take, exit_to(nxt) if k < hi - lo else nxt)
        if hi == lo:
            tail = nxt
    for _ in range(lo):
        tail = build(nfa, body, tail, depth)
    return tail


def epsilon_walk(nfa: Nfa, q0: int, passes):
    """The nodes reachable from q0 without consuming a code point, in the regex's priority
    order (depth first, each node once, as a backtracking engine tries them); the walk goes on
    past an assertion or split q only where passes(q)."""
    seen, stack = set(), [q0]
    while stack:
        q = stack.pop()
        if q in seen:
            continue
        seen.add(q)
        yield q
        if nfa.kind[q] not in ("char", "match") and passes(q):
            stack.extend(reversed(nfa.out[q]))


def nullable(nfa: Nfa, start: int) -> bool:
    # Whether the pattern can match without consuming a code point (assertions assumed true).
    return any(nfa.kind[q] == "match" for q in epsilon_walk(nfa, start, lambda q: True))
