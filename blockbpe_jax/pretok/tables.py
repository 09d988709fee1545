"""Pack compiled pre-tokenizer stages into the kernels' operand (ffi/pretokenize.h: PretokView).

Layout for S stages with B class blocks each: S x PretokTables, then S x stage1 (uint16[4352]:
code point >> 8 -> block), then S x B x 256 class bytes. Stages with fewer blocks are padded.
"""

from __future__ import annotations

import numpy as np

from .compiler import MAX_CLASSES, MAX_STATES, INVALID_BYTE_STAND_IN, Automata

MAX_STAGES = 4          # kMaxPretokStages
STAGE1_LEN = 0x110000 >> 8

# struct PretokTables (static_assert'ed to 5528 bytes in pretokenize.h).
PRETOK_TABLES_DTYPE = np.dtype([
    ("fwd", "<u8", (MAX_CLASSES * 16,)),
    ("bwd", "<u8", (MAX_CLASSES,)),
    ("flag", "<u2", (MAX_CLASSES * 16,)),
    ("ascii", "u1", (128,)),
    ("bwd_init", "u1"), ("fwd_init", "u1"), ("invalid_class", "u1"), ("pad", "u1", (5,)),
    ("bwd_live", "<u8"), ("fwd_live", "<u8"),
])
assert PRETOK_TABLES_DTYPE.itemsize == 5528

_IDENTITY = np.arange(MAX_STATES, dtype=np.uint64)


def _map(images: np.ndarray) -> int:
    """A uint64 of nibbles: state x -> images[x] for the states given, identity beyond."""
    full = _IDENTITY.copy()
    full[:len(images)] = images
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
    t["bwd_live"], t["fwd_live"] = _live(a.n_bwd), _live(a.n_fwd)
    return t


def class_blocks(class_of_cp: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(stage1 uint16[4352], blocks uint8[B, 256]) with identical 256-code-point blocks shared."""
    rows = class_of_cp.astype(np.uint8).reshape(STAGE1_LEN, 256)
    blocks, stage1 = np.unique(rows, axis=0, return_inverse=True)
    return stage1.astype(np.uint16).reshape(-1), blocks


def pack(stages: list[Automata]) -> np.ndarray:
    """The operand (uint8) for these stages; a one-byte placeholder for none (bytes mode)."""
    if not stages:
        return np.zeros(1, np.uint8)
    if len(stages) > MAX_STAGES:
        raise ValueError(f"at most {MAX_STAGES} pre-tokenizer stages are supported, got {len(stages)}")
    records = np.stack([stage_tables(a) for a in stages])
    split = [class_blocks(a.class_of_cp) for a in stages]
    n_blocks = max(b.shape[0] for _, b in split)
    stage1 = np.concatenate([s1 for s1, _ in split])
    stage2 = np.zeros((len(stages), n_blocks, 256), np.uint8)
    for k, (_, b) in enumerate(split):
        stage2[k, :b.shape[0]] = b
    return np.concatenate([records.view(np.uint8).reshape(-1), stage1.view(np.uint8),
                           stage2.reshape(-1)])
