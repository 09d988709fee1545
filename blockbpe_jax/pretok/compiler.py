"""Compile a pre-tokenizer regex into the two automata the kernels run (ffi/pretok/automata.h).

The pieces of a regex's find_iter (leftmost-first, as tiktoken's Rust regex and HF's
Oniguruma report them) are a function of the text that a pair of automata computes exactly:

  backward  T[n] = init, T[i] = G(T[i+1], c_i) over code point classes c_i. T[i] is the set of
            NFA states from which the rest of the regex can still succeed on text[i..]
            (the states of lookahead sub-patterns included), minimised;
  forward   (S[i+1], flag_i) = F(S[i], c_i, T[i+1]). S is the one thread a backtracking
            engine would be in: from it, the first choice (in the regex's priority order)
            that consumes c_i and can still succeed according to T[i+1] is the path the
            backtracking search takes, so no backtracking is needed. When the thread reaches
            the end of the pattern, the piece ends and a new search starts at the same byte.

flag_i says whether a piece starts at byte i. Both automata are minimised together and must fit
the kernels' 4-bit states (16 each); classes with identical columns are merged (automata.py:
`minimise`). Classes 0 and 1 are fixed: 0 = a UTF-8 continuation byte (no step), 1 = a byte of a
special token (ends the sub-text: both automata restart).

Split behaviours (HF): the text between matches ("gaps") is kept; where pieces start is decided
from (previous context, event) with context START / AFTER_MATCH / GAP and event MATCH / GAP.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from . import regex_syntax as rs
from . import unicode as uni
from .nfa import Nfa, PretokenizerUnsupported, build, epsilon_walk, nullable

from .automata import CLS_NONE, CLS_SPECIAL, Automata, minimise

# Automata, their limits and their sequential run live in automata.py; importable from here too.
from .automata import MAX_CLASSES, MAX_STATES, run_automata  # noqa: F401

BEHAVIOURS = ("isolated", "merged_with_previous", "merged_with_next", "contiguous")
# Code point whose class an invalid UTF-8 byte takes (a private-use character: not \s, \p{L},
# \p{N}, \p{M}, \p{P}, \p{S}).
INVALID_BYTE_STAND_IN = 0xE000

# Where pieces start, per behaviour: (context, event) -> flag.
_FLAG_RULES = {
    "isolated": {
        ("start", "match"): 1,
        ("start", "gap"): 1,
        ("after", "match"): 1,
        ("after", "gap"): 1,
        ("gap", "match"): 1,
        ("gap", "gap"): 0,
    },
    "merged_with_previous": {
        ("start", "match"): 1,
        ("start", "gap"): 1,
        ("after", "match"): 1,
        ("after", "gap"): 1,
        ("gap", "match"): 0,
        ("gap", "gap"): 0,
    },
    "merged_with_next": {
        ("start", "match"): 1,
        ("start", "gap"): 1,
        ("after", "match"): 1,
        ("after", "gap"): 0,
        ("gap", "match"): 1,
        ("gap", "gap"): 0,
    },
    "contiguous": {
        ("start", "match"): 1,
        ("start", "gap"): 1,
        ("after", "match"): 0,
        ("after", "gap"): 1,
        ("gap", "match"): 1,
        ("gap", "gap"): 0,
    },
}


# ---------------------------------------------------------------------------------------------
# Character classes: the coarsest partition of the code points that every set respects.
def _partition(sets: Sequence[rs.CharSet]) -> tuple[np.ndarray, list[int]]:
    """(class_of_cp int32[0x110000] with classes from 2, representative cp of each class)."""
    sig = np.zeros(uni.N_CODE_POINTS, dtype=object if len(sets) > 62 else np.int64)
    for k, cs in enumerate(sets):
        sig[cs.mask] += 1 << k
    sig[0xD800:0xE000] = sig[INVALID_BYTE_STAND_IN]  # never decoded: no class of their own
    uniq, inverse = np.unique(sig, return_inverse=True)
    cls = inverse.astype(np.int32) + 2
    reps = []
    for u in range(len(uniq)):
        reps.append(int(np.argmax(cls == u + 2)))
    return cls, reps


class _Compiler:
    def __init__(self, pattern: str, flavour: str, behaviour: str, invert: bool, total: bool, where: str):
        self.where, self.total = where, total
        try:
            tree = rs.parse(pattern, flavour)
        except rs.RegexUnsupported as e:
            raise PretokenizerUnsupported(f"{where}: {e}") from None
        if behaviour not in BEHAVIOURS:
            raise PretokenizerUnsupported(
                f"{where}: Split behavior {behaviour!r} is not supported (supported: {', '.join(BEHAVIOURS)})"
            )
        if invert and behaviour != "isolated":
            # (with Isolated, matches and the text between them are pieces alike: invert
            # changes nothing)
            raise PretokenizerUnsupported(
                f"{where}: Split invert=true is only supported with behavior Isolated"
            )
        self.behaviour = behaviour
        nfa = Nfa()
        self.match = nfa.add("match")
        try:
            self.start = build(nfa, tree, self.match, 0)
        except PretokenizerUnsupported as e:
            raise PretokenizerUnsupported(f"{where}: {e}") from None
        if nullable(nfa, self.start):
            raise PretokenizerUnsupported(f"{where}: the pattern can match the empty string")
        self.nfa = nfa
        char_nodes = [q for q, k in enumerate(nfa.kind) if k in ("char", "eol")]
        sets, index = [], {}
        for q in char_nodes:
            key = nfa.arg[q]
            if key not in index:
                index[key] = len(sets)
                sets.append(key)
        self.cls_of_cp, self.reps = _partition(sets)
        self.n_cp_classes = len(self.reps)
        # accepts[q] = the classes char node q consumes (for an eol node: the classes of \n)
        self.accepts = {}
        for q in char_nodes:
            mask = nfa.arg[q].mask
            self.accepts[q] = frozenset(c for c, rep in enumerate(self.reps, start=2) if mask[rep])
        self._memo_b: dict = {}  # can_succeed's results

    # B(c, B_next): the states that can succeed at position i, where c is the class at i
    # (None: the end of the sub-text) and B_next the set at i + 1.
    def can_succeed(self, c, b_next: frozenset) -> frozenset:
        key = (c, b_next)
        hit = self._memo_b.get(key)
        if hit is not None:
            return hit
        nfa = self.nfa
        ok = set()
        # Lookahead sub-patterns are lookahead-free: one fixpoint for them, then the rest.
        for phase in (0, 1):
            changed = True
            while changed:
                changed = False
                for q, k in enumerate(nfa.kind):
                    if q in ok:
                        continue
                    if k == "match":
                        good = True
                    elif k == "char":
                        good = c is not None and c in self.accepts[q] and nfa.out[q][0] in b_next
                    elif k == "split":
                        good = any(o in ok for o in nfa.out[q])
                    elif k == "end":
                        good = c is None and nfa.out[q][0] in ok
                    elif k == "eol":
                        good = (c is None or c in self.accepts[q]) and nfa.out[q][0] in ok
                    else:  # look
                        if phase == 0:
                            continue
                        sub, negate = nfa.arg[q]
                        good = ((sub in ok) != negate) and nfa.out[q][0] in ok
                    if good:
                        ok.add(q)
                        changed = True
        res = frozenset(ok)
        self._memo_b[key] = res
        return res

    def first_choice(self, q0: int, c: int, b_here: frozenset, b_next: frozenset):
        """Follow the ordered choices from q0 at a position whose class is c: ("char", next
        state) for the first step that consumes c and can still succeed, ("match",) if the
        pattern ends first, None if neither."""
        nfa = self.nfa

        def passes(q):  # whether an assertion holds here (a real code point of class c follows)
            k = nfa.kind[q]
            if k == "end":
                return False
            if k == "eol":
                return c in self.accepts[q]
            if k == "look":
                sub, negate = nfa.arg[q]
                return (sub in b_here) != negate
            return True

        for q in epsilon_walk(nfa, q0, passes):
            if nfa.kind[q] == "match":
                return ("match",)
            if nfa.kind[q] == "char" and c in self.accepts[q] and nfa.out[q][0] in b_next:
                return ("char", nfa.out[q][0])
        return None

    def search(self, context: str, c: int, b_here, b_next):
        r = self.first_choice(self.start, c, b_here, b_next)
        rule = _FLAG_RULES[self.behaviour]
        if r is None:
            return ("gap",), rule[(context, "gap")]
        if r[0] == "match":  # unreachable: the pattern is not nullable
            raise AssertionError("empty match")
        return ("thread", r[1]), rule[(context, "match")]

    def step(self, s, c: int, b_next: frozenset):
        """Forward step from state s (("start",), ("after",), ("gap",) or ("thread", q))."""
        b_here = self.can_succeed(c, b_next)
        if s[0] == "thread":
            r = self.first_choice(s[1], c, b_here, b_next)
            if r is not None and r[0] == "char":
                return ("thread", r[1]), 0
            return self.search("after", c, b_here, b_next)
        return self.search(s[0], c, b_here, b_next)

    def compile(self) -> Automata:
        classes = list(range(2, 2 + self.n_cp_classes))
        # Backward states: every set reachable from the end of a sub-text.
        b_init = self.can_succeed(None, frozenset())
        bstates, bindex = [b_init], {b_init: 0}
        k = 0
        while k < len(bstates):
            for c in classes:
                nb = self.can_succeed(c, bstates[k])
                if nb not in bindex:
                    bindex[nb] = len(bstates)
                    bstates.append(nb)
            k += 1
            if len(bstates) > 4096:
                raise PretokenizerUnsupported(f"{self.where}: the lookahead automaton is too large")
        nb_raw = len(bstates)
        gbwd = np.zeros((2 + self.n_cp_classes, nb_raw), np.int32)
        for t, b in enumerate(bstates):
            gbwd[CLS_NONE, t] = t
            gbwd[CLS_SPECIAL, t] = 0
            for c in classes:
                gbwd[c, t] = bindex[self.can_succeed(c, b)]
        # Forward states reachable from START with any (class, T[i+1]) consistent with
        # some text: pairs (S[i], T[i]).
        start = ("start",)
        fstates, findex = [start], {start: 0}
        trans = {}  # (s, c, t_next) -> (s', flag)
        pairs = {(0, t) for t in range(nb_raw)}
        todo = list(pairs)
        pred = [[[] for _ in range(nb_raw)] for _ in range(2 + self.n_cp_classes)]
        for c in classes:
            for tn in range(nb_raw):
                pred[c][gbwd[c, tn]].append(tn)
        while todo:
            s, t = todo.pop()
            for c in classes:
                for tn in pred[c][t]:
                    key = (s, c, tn)
                    if key not in trans:
                        ns, flag = self.step(fstates[s], c, bstates[tn])
                        if ns[0] == "gap" and self.total:
                            raise PretokenizerUnsupported(
                                f"{self.where}: the pattern does not match every character "
                                f"(e.g. U+{self.reps[c - 2]:04X}), and the text it does not match "
                                f"would be dropped"
                            )
                        if ns not in findex:
                            findex[ns] = len(fstates)
                            fstates.append(ns)
                        trans[key] = (findex[ns], flag)
                    nxt = (trans[key][0], tn)
                    if nxt not in pairs:
                        pairs.add(nxt)
                        todo.append(nxt)
        return minimise(gbwd, trans, len(fstates), self.cls_of_cp, self.where)


def compile_pattern(
    pattern: str,
    *,
    flavour: str = "tiktoken",
    behaviour: str = "isolated",
    invert: bool = False,
    total: bool = False,
    where: str = "pattern",
) -> Automata:
    """The automata of one regex. total: raise if some text would fall between matches.
    `where` prefixes error messages (e.g. "pre_tokenizer.pretokenizers[1].pattern")."""
    return _Compiler(pattern, flavour, behaviour, invert, total, where).compile()
