"""The compiled automata of one pre-tokenizer regex: `Automata`, the kernels' limits, the
minimisation of the raw automata `compiler.py` builds (state grouping, class merging), and
`run_automata`, the sequential reference run the tests and `Pretokenizer.pieces` use.

The fixed classes: 0 = a UTF-8 continuation byte (no step), 1 = a byte of a special token
(ends the sub-text: both automata restart). The kernels hold at most MAX_STATES states per
automaton (4-bit states) and MAX_CLASSES classes.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np

from .nfa import PretokenizerUnsupported

MAX_STATES = 16  # 4-bit states: a chunk map is one uint64 in the kernels
MAX_CLASSES = 32  # PretokTables' class dimension (ffi/pretok/tables.h)
CLS_NONE, CLS_SPECIAL = 0, 1


@dataclasses.dataclass
class Automata:
    """The compiled pre-tokenizer of one regex (before packing into kernel tables)."""

    class_of_cp: np.ndarray  # uint8[0x110000]: code point -> class (>= 2)
    n_classes: int  # including the two fixed classes
    bwd: np.ndarray  # int32[C, NB]: T -> G(T, c)
    fwd: np.ndarray  # int32[C, NB, NF]: (c, T[i+1], S) -> S'
    flag: np.ndarray  # uint8[C, NB, NF]
    bwd_init: int
    fwd_init: int

    @property
    def n_bwd(self) -> int:
        return self.bwd.shape[1]

    @property
    def n_fwd(self) -> int:
        return self.fwd.shape[2]


def minimise(gbwd: np.ndarray, trans: dict, nf_raw: int, cls_of_cp: np.ndarray, where: str) -> Automata:
    """The minimised automata of the raw ones (`_Compiler.compile`'s G table and forward steps):
    states grouped by `_merge_states`, classes with identical columns merged, the kernels' limits
    checked. cls_of_cp: code point -> raw class; `where` prefixes error messages."""
    n_cls, nb_raw = gbwd.shape
    groups = _merge_states(gbwd, trans, nf_raw)
    if groups is None:
        raise AssertionError("the raw automata are inconsistent")
    gb, gf = groups

    # Renumber so that both inits are 0, then build the quotient tables; entries that no
    # text reaches are left as "restart" (state 0, flag 1).
    def order(g, init):
        seen = [g[init]]
        for x in g:
            if x not in seen:
                seen.append(x)
        return {b: i for i, b in enumerate(seen)}

    bmap, fmap = order(gb, 0), order(gf, 0)
    nb, nf = len(bmap), len(fmap)
    qb = np.zeros((n_cls, nb), np.int32)
    for t in range(nb_raw):
        qb[:, bmap[gb[t]]] = [bmap[gb[x]] for x in gbwd[:, t]]
    qf = np.zeros((n_cls, nb, nf), np.int32)
    qflag = np.ones((n_cls, nb, nf), np.uint8)
    qf[CLS_NONE] = np.arange(nf)[None, :]
    qflag[CLS_NONE] = 0
    qflag[CLS_SPECIAL] = 0
    for (s, c, t), (ns, fl) in trans.items():
        qf[c, bmap[gb[t]], fmap[gf[s]]] = fmap[gf[ns]]
        qflag[c, bmap[gb[t]], fmap[gf[s]]] = fl
    # Merge classes with identical columns (the fixed classes stay 0 and 1).
    cls_map = {CLS_NONE: CLS_NONE, CLS_SPECIAL: CLS_SPECIAL}
    keep, seen = [CLS_NONE, CLS_SPECIAL], {}
    for c in range(2, n_cls):
        key = (qb[c].tobytes(), qf[c].tobytes(), qflag[c].tobytes())
        if key not in seen:
            seen[key] = len(keep)
            keep.append(c)
        cls_map[c] = seen[key]
    lut = np.array([cls_map[c] for c in range(n_cls)], np.int32)
    if nb > MAX_STATES or nf > MAX_STATES:
        raise PretokenizerUnsupported(
            f"{where}: the pattern needs {nb} lookahead and {nf} match states; the "
            f"kernels hold at most {MAX_STATES} of each"
        )
    if len(keep) > MAX_CLASSES:
        raise PretokenizerUnsupported(
            f"{where}: the pattern needs {len(keep)} character classes; the kernels "
            f"hold at most {MAX_CLASSES}"
        )
    return Automata(
        class_of_cp=lut[cls_of_cp].astype(np.uint8),
        n_classes=len(keep),
        bwd=qb[keep],
        fwd=qf[keep],
        flag=qflag[keep],
        bwd_init=0,
        fwd_init=0,
    )


def _merge_states(gbwd: np.ndarray, trans: dict, nf_raw: int):
    """Group backward and forward states so that the quotient automata give every reachable
    step its original result: (1) G maps a group into one group for every class; (2) the
    reachable steps (s, c, t) that fall into one (c, group of t, group of s) agree on the
    flag and on the group of the next state. Only reachable steps constrain the grouping
    (the rest are don't-cares), which is what makes the automata small. Greedy: try to merge
    each pair, propagate the merges it forces, keep it unless a flag conflicts."""
    n_cls, nb = gbwd.shape
    arr = np.array([(s, c, t, ns, fl) for (s, c, t), (ns, fl) in trans.items()], np.int64)
    S, Cc, T, NS, FL = arr.T
    images = gbwd[2:]

    def roots(p):
        while True:
            q = p[p]
            if np.array_equal(q, p):
                return p
            p = q

    def union(p, a, b):
        ra, rb = roots(p)[[a, b]]
        if ra != rb:
            p[max(ra, rb)] = min(ra, rb)

    def against_representative(keys, values, size):
        # Each key's representative value (the last one written) and every value's mismatch
        # with it: members of one key that must agree (no sort: keys are small integers).
        rep = np.zeros(size, values.dtype)
        rep[keys] = values
        bad = np.flatnonzero(values != rep[keys])
        return rep[keys][bad], values[bad]

    def close(pb, pf):
        # Propagate forced merges to a fixpoint (in place); False on a flag conflict.
        while True:
            pb[:], pf[:] = roots(pb), roots(pf)
            merge_b = set()
            for img in pb[images]:  # G must map a group into one group, class by class
                a, b = against_representative(pb, img, nb)
                merge_b.update(zip(a.tolist(), b.tolist()))
            key = (Cc * (nb + 1) + pb[T]) * (nf_raw + 1) + pf[S]
            size = n_cls * (nb + 1) * (nf_raw + 1)
            if against_representative(key, FL, size)[0].size:
                return False
            a, b = against_representative(key, pf[NS], size)
            merge_f = set(zip(a.tolist(), b.tolist()))
            if not merge_b and not merge_f:
                return True
            for a, b in merge_b:
                union(pb, a, b)
            for a, b in merge_f:
                union(pf, a, b)

    pb, pf = np.arange(nb), np.arange(nf_raw)
    if not close(pb, pf):
        return None
    progress = True
    while progress:
        progress = False
        for which, n in (("f", nf_raw), ("b", nb)):
            for i in range(n):
                for j in range(i + 1, n):
                    cur = pf if which == "f" else pb
                    if cur[i] == cur[j]:
                        continue
                    tb, tf = pb.copy(), pf.copy()
                    union(tf if which == "f" else tb, i, j)
                    if close(tb, tf):
                        pb, pf = tb, tf
                        progress = True
    return pb.tolist(), pf.tolist()


# ASCII in the order of its frequency in English prose: the classes a stage's inert set tries
# first (inert_classes), so that prose is what it lets a block skip.
_PROSE_ORDER = " etaoinshrdlucmfwypvbgkjqxzETAOINSHRDLUCMFWYPVBGKJQXZ,.\n'\"-;:!?()"


def _only_first_flagged(a: Automata, classes: Sequence[int]) -> bool:
    """Whether every text whose code points all have a class in `classes` gets no piece start
    but its first: the forward flag is 0 at every later code point, whatever the text. The
    run's positions as nodes (S[i], T[i]); an edge per class c and T[i+1] with G(T[i+1], c) =
    T[i] (run_automata's steps); a text is a path from (fwd_init, any T) to (any S, bwd_init).
    Checked on every edge after the first step of a path that can reach an end."""
    nb, nf = a.n_bwd, a.n_fwd
    edges = {}  # (s, t) -> [((s', t2), flag)]
    for s in range(nf):
        for t in range(nb):
            edges[s, t] = [
                ((int(a.fwd[c, t2, s]), t2), int(a.flag[c, t2, s]))
                for c in classes
                for t2 in range(nb)
                if a.bwd[c, t2] == t
            ]
    later, todo = set(), [v for t in range(nb) for v, _ in edges[a.fwd_init, t]]
    while todo:  # nodes reached after one step or more
        node = todo.pop()
        if node not in later:
            later.add(node)
            todo.extend(v for v, _ in edges[node])
    ends, changed = {(s, a.bwd_init) for s in range(nf)}, True
    while changed:  # nodes from which an end can be reached
        changed = False
        for node, out in edges.items():
            if node not in ends and any(v in ends for v, _ in out):
                ends.add(node)
                changed = True
    return not any(flag and v in ends for node in later for v, flag in edges[node])


def inert_classes(a: Automata) -> int:
    """The stage's inert classes as a bit mask (PretokTables.inert, ffi/pretok/tables.h): a set
    of classes such that a text of only those (any sub-text between earlier stages' piece
    starts) gets no piece start from this stage but its first, so a kernel may skip the stage
    where every byte is of such a class. Built greedily, prose's ASCII classes first; 0 unless
    it holds the classes of ' ' and 'a' (a stage that cuts prose would never be skipped: its
    check would only cost). Bit 0, the continuation bytes (no step), is set with the rest."""
    order = list(dict.fromkeys(int(a.class_of_cp[ord(ch)]) for ch in _PROSE_ORDER))
    by_size = np.argsort(-np.bincount(a.class_of_cp, minlength=a.n_classes), kind="stable")
    order += [int(c) for c in by_size if c not in order]
    needed = {int(a.class_of_cp[ord(" ")]), int(a.class_of_cp[ord("a")])}
    chosen: list[int] = []
    for c in order:
        if c > CLS_SPECIAL and _only_first_flagged(a, chosen + [c]):
            chosen.append(c)
        elif c in needed:
            return 0
    return sum(1 << c for c in chosen) | 1 << CLS_NONE


def run_automata(
    a: Automata, text: str, specials: Sequence[tuple[int, int]] = (), boundaries=frozenset()
) -> list[int]:
    """Piece start offsets (in code points) of `text`, run sequentially (a reference for tests).
    specials: [lo, hi) code point ranges of special tokens; boundaries: piece starts of earlier
    stages (both automata restart there)."""
    cls = [int(a.class_of_cp[ord(ch)]) for ch in text]
    for lo, hi in specials:
        for i in range(lo, hi):
            cls[i] = CLS_SPECIAL
    n = len(cls)
    tn = [0] * (n + 1)
    t = a.bwd_init
    for i in range(n - 1, -1, -1):
        tn[i + 1] = t
        t = a.bwd_init if (i in boundaries and cls[i] != CLS_SPECIAL) else int(a.bwd[cls[i], t])
    s, starts = a.fwd_init, []
    for i in range(n):
        if i in boundaries and cls[i] != CLS_SPECIAL:
            s = a.fwd_init
        if a.flag[cls[i], tn[i + 1], s] and cls[i] != CLS_SPECIAL:
            starts.append(i)
        s = int(a.fwd[cls[i], tn[i + 1], s])
    return starts
