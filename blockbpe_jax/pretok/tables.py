"""Pack compiled pre-tokenizer stages into the kernels' operand (ffi/pretok/tables.h: PretokView).

Layout for S stages with B class blocks each: S x PretokTables, then the stage1 arrays
(uint16[4352]: code point >> 8 -> block) of the S class tables, then their B x 256 bytes
(tables with fewer blocks are padded). With nfc, the first table's bytes also carry the NFC
marks and one more table holds the Canonical_Combining_Class of every code point. With
lowercase (normalizer.py), int32[256] deltas come right after the PretokTables, one more table
(the last) holds each code point's delta index, and the stages' classes are those of the
lowercase.
"""

from __future__ import annotations

import numpy as np

from . import normalizer as norm
from . import unicode as uni
from .automata import inert_classes
from .compiler import MAX_CLASSES, MAX_STATES, INVALID_BYTE_STAND_IN, Automata

MARK_MAYBE, MARK_NON_STARTER, MARK_NOT_NFC = 0x20, 0x40, 0x80  # kMarkMaybe, ... (ffi/pretok/nfc.h)
CCC_TRAIL = 255  # kCccTrail: in the combining-class table, a starter that decomposes to marks

MAX_STAGES = 4  # kMaxPretokStages
STAGE1_LEN = 0x110000 >> 8

# struct PretokTables (static_assert'ed to 5528 bytes in ffi/pretok/tables.h).
PRETOK_TABLES_DTYPE = np.dtype(
    [
        ("fwd", "<u8", (MAX_CLASSES * 16,)),
        ("bwd", "<u8", (MAX_CLASSES,)),
        ("flag", "<u2", (MAX_CLASSES * 16,)),
        ("ascii", "u1", (128,)),
        ("bwd_init", "u1"),
        ("fwd_init", "u1"),
        ("invalid_class", "u1"),
        ("inert", "<u4"),
        ("pad", "u1", (1,)),
        ("bwd_live", "<u8"),
        ("fwd_live", "<u8"),
    ]
)
assert PRETOK_TABLES_DTYPE.itemsize == 5528

_IDENTITY = np.arange(MAX_STATES, dtype=np.uint64)


def _map(images: np.ndarray) -> int:
    """A uint64 of nibbles: state x -> images[x] for the states given, identity beyond."""
    full = _IDENTITY.copy()
    full[: len(images)] = images
    return int(np.bitwise_or.reduce(full << (np.arange(MAX_STATES, dtype=np.uint64) * 4)))


def _live(count: int) -> int:
    return (1 << (4 * count)) - 1 if count < 16 else (1 << 64) - 1


def stage_tables(a: Automata) -> np.ndarray:
    """One PretokTables record."""
    t = np.zeros((), PRETOK_TABLES_DTYPE)
    fwd = np.array([_map(np.arange(MAX_STATES))] * (MAX_CLASSES * 16), np.uint64)
    flag = np.zeros(MAX_CLASSES * 16, np.uint16)
    bwd = np.array([_map(np.arange(MAX_STATES))] * MAX_CLASSES, np.uint64)
    for c in range(a.n_classes):
        bwd[c] = _map(a.bwd[c])
        for tt in range(a.n_bwd):
            fwd[c * 16 + tt] = _map(a.fwd[c, tt])
            flag[c * 16 + tt] = int(np.sum(a.flag[c, tt].astype(np.int64) << np.arange(a.n_fwd)))
    t["fwd"], t["flag"], t["bwd"] = fwd, flag, bwd
    t["ascii"] = a.class_of_cp[:128]
    t["bwd_init"], t["fwd_init"] = a.bwd_init, a.fwd_init
    t["invalid_class"] = a.class_of_cp[INVALID_BYTE_STAND_IN]
    t["inert"] = inert_classes(a)
    t["bwd_live"], t["fwd_live"] = _live(a.n_bwd), _live(a.n_fwd)
    return t


def class_blocks(class_of_cp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stage1 uint16[4352], blocks uint8[B, 256]) with identical 256-code-point blocks shared,
    in ascending byte order (np.unique(rows, axis=0)'s, which takes ~100x longer)."""
    rows = class_of_cp.astype(np.uint8).reshape(STAGE1_LEN, 256)
    keys = [row.tobytes() for row in rows]
    blocks = sorted(set(keys))
    index = {key: k for k, key in enumerate(blocks)}
    stage1 = np.fromiter((index[key] for key in keys), np.uint16, len(keys))
    return stage1, np.frombuffer(b"".join(blocks), np.uint8).reshape(-1, 256)


def pack(stages: list[Automata], nfc: bool = False, lowercase: bool = False) -> np.ndarray:
    """The operand (uint8) for these stages; a one-byte placeholder for none (bytes mode)."""
    if not stages:
        return np.zeros(1, np.uint8)
    if len(stages) > MAX_STAGES:
        raise ValueError(f"at most {MAX_STAGES} pre-tokenizer stages are supported, got {len(stages)}")
    records = np.stack([stage_tables(a) for a in stages])
    per_cp = [a.class_of_cp.astype(np.uint8) for a in stages]
    if lowercase:
        per_cp = [norm.compose_classes(t) for t in per_cp]
        records["ascii"][:, ord("A") : ord("Z") + 1] = records["ascii"][:, ord("a") : ord("z") + 1]
    if nfc:
        ccc, qc = uni.ccc(), uni.nfc_quick_check()
        marks = (
            np.where(ccc > 0, MARK_NON_STARTER, 0).astype(np.uint8)
            | np.where(qc == 1, MARK_MAYBE, 0).astype(np.uint8)
            | np.where(qc == 2, MARK_NOT_NFC, 0).astype(np.uint8)
        )
        trail = uni.nfc_trail()
        if lowercase:
            marks, trail = norm.widen_nfc(marks, trail)
        per_cp[0] = per_cp[0] | marks
        per_cp.append(np.where(trail, CCC_TRAIL, ccc).astype(np.uint8))
    head = [records.view(np.uint8).reshape(-1)]
    if lowercase:
        index, deltas, _ = norm.lower_tables()
        per_cp.append(index)
        head.append(deltas.astype("<i4").view(np.uint8))
    return class_tables(head, per_cp)


def class_tables(head: list[np.ndarray], per_cp: list[np.ndarray]) -> np.ndarray:
    """The operand's tail after `head` (uint8 arrays: the stages' records, Lowercase's deltas):
    each per-code-point table's stage1, then their blocks, padded to the largest count (the
    layout of ffi/pretok/tables.h's class_tables_view)."""
    split = [class_blocks(t) for t in per_cp]
    n_blocks = max(b.shape[0] for _, b in split)
    stage1 = np.concatenate([s1 for s1, _ in split])
    stage2 = np.zeros((len(split), n_blocks, 256), np.uint8)
    for k, (_, b) in enumerate(split):
        stage2[k, : b.shape[0]] = b
    return np.concatenate([*head, stage1.view(np.uint8), stage2.reshape(-1)])
