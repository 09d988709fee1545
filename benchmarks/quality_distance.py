"""Levenshtein distance on integer sequences for quality.py: the bit-parallel one it uses
(common prefix and suffix trimmed first) and an independent NumPy row DP for cross-checks."""

from __future__ import annotations

import numpy as np


def _trim(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Drops the common prefix and suffix (they never change the distance)."""
    n = min(len(a), len(b))
    neq = np.flatnonzero(a[:n] != b[:n])
    p = int(neq[0]) if len(neq) else n
    a, b = a[p:], b[p:]
    n = min(len(a), len(b))
    if n:
        neq = np.flatnonzero(a[len(a) - n :][::-1] != b[len(b) - n :][::-1])
        s = int(neq[0]) if len(neq) else n
        if s:
            a, b = a[: len(a) - s], b[: len(b) - s]
    return a, b


def levenshtein(a, b) -> int:
    """Exact edit distance (unit insert, delete, substitute) between two int sequences.

    After trimming, the longer sequence becomes a bit vector of m bits (one Python int per
    DP column's vertical deltas), and one pass over the shorter sequence updates it with a
    constant number of big-integer operations per element: O(n * m / 30) digit operations in C,
    n Python iterations. Vertical/horizontal +1/-1 deltas are tracked as in Myers' and Hyyrö's
    bit-vector formulation; the score follows the last row."""
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    a, b = _trim(a, b)
    if len(a) < len(b):
        a, b = b, a
    m, n = len(a), len(b)
    if n == 0:
        return m
    if n == 1:
        return m - 1 if (a == b[0]).any() else m
    # peq[x]: bit i set where a[i] == x.
    order = np.argsort(a, kind="stable")
    sa = a[order]
    cuts = np.flatnonzero(np.diff(sa)) + 1
    peq = {}
    for sym, pos in zip(sa[np.r_[0, cuts]].tolist(), np.split(order, cuts)):
        bits = np.zeros(m, dtype=np.uint8)
        bits[pos] = 1
        peq[sym] = int.from_bytes(np.packbits(bits, bitorder="little").tobytes(), "little")
    mask = (1 << m) - 1
    high = 1 << (m - 1)
    vp, vn, score = mask, 0, m
    get = peq.get
    for x in b.tolist():
        eq = get(x, 0)
        d0 = ((((eq & vp) + vp) ^ vp) | eq | vn) & mask
        hp = vn | (mask & ~(d0 | vp))
        hn = d0 & vp
        if hp & high:
            score += 1
        elif hn & high:
            score -= 1
        hp = ((hp << 1) | 1) & mask
        hn = (hn << 1) & mask
        vp = hn | (mask & ~(d0 | hp))
        vn = hp & d0
    return score


def levenshtein_rows(a, b) -> int:
    """The same distance by a NumPy row DP (O(n) vector operations of length m): a second,
    independent implementation for cross-checks. The in-row dependency D[i][j-1] + 1 is a
    running minimum of (T[j] - j) plus j."""
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    m = len(b)
    j = np.arange(m + 1, dtype=np.int64)
    row = j.copy()
    for i, x in enumerate(a.tolist(), start=1):
        t = np.empty(m + 1, dtype=np.int64)
        t[0] = i
        np.minimum(row[1:] + 1, row[:-1] + (b != x), out=t[1:])
        row = np.minimum.accumulate(t - j) + j
    return int(row[m])
