"""The NFC normalization operand (ffi/pretok/nfc_normalize.h: NfcData), from the NFC tables at
the reference's Unicode version (unicode_nfc9.npz), and the native batch call that normalizes
with it on the CPU.

Layout, int32: a header (magic, n_blocks, n_flat, n_pairs), stage1 int32[4352] (code point >> 8
-> block), the blocks' per-code-point words (Canonical_Combining_Class in bits 0-7, UNSAFE,
QC_NO, QC_MAYBE, TRAIL, the offset + 1 of the code point's decomposition in `flat` from bit 12), flat (each decomposition's
length, then its code points), the composition pairs [n_pairs, 2] and their composites, and
one int of padding where the count would be even (an odd count tells the encode call's
nfc_pairs operand that it is this one: the executors then normalize instead of checking).
"""

from __future__ import annotations

import functools

import numpy as np

from . import unicode as uni

MAGIC = 0x4E464331  # kNfcDataMagic
UNSAFE = 1 << 8  # kNfcPropUnsafe: not a normalization boundary
QC_NO, QC_MAYBE, TRAIL = 1 << 9, 1 << 10, 1 << 11  # kNfcPropQcNo, kNfcPropQcMaybe, kNfcPropTrail
DECOMP_SHIFT = 12  # kNfcPropDecompShift
STAGE1_LEN = 0x110000 >> 8  # kClassStage1Len
MAX_DECOMP = 4  # kNfcMaxDecomp


def unsafe_code_points() -> np.ndarray:
    """bool[0x110000]: the code points before which NFC text does not split into parts that
    normalize on their own: a non-starter, NFC_Quick_Check Maybe or No, or a code point whose
    decomposition starts with such a one."""
    ccc, qc = uni.ccc(), uni.nfc_quick_check()
    decomp = uni.nfc_decompositions()
    unsafe = (ccc != 0) | (qc != 0)
    first = decomp[:, 1]
    unsafe[decomp[:, 0]] |= (ccc[first] != 0) | (qc[first] != 0)
    return unsafe


@functools.lru_cache(maxsize=1)
def operand() -> np.ndarray:
    """The operand, int32 (read-only)."""
    ccc = uni.ccc().astype(np.int64)
    decomp = uni.nfc_decompositions()
    lengths = (decomp[:, 1:] >= 0).sum(axis=1)
    if lengths.max() > MAX_DECOMP:
        raise ValueError(f"a decomposition of {lengths.max()} code points; the kernels hold {MAX_DECOMP}")
    starts = np.concatenate([[0], np.cumsum(lengths + 1)[:-1]])
    flat = np.concatenate([np.concatenate([[n], row[1 : 1 + n]]) for n, row in zip(lengths, decomp)])
    qc = uni.nfc_quick_check()
    props = (
        ccc
        | np.where(unsafe_code_points(), UNSAFE, 0)
        | np.where(qc == 2, QC_NO, 0)
        | np.where(qc == 1, QC_MAYBE, 0)
        | np.where(uni.nfc_trail(), TRAIL, 0)
    )
    props[decomp[:, 0]] |= (starts + 1) << DECOMP_SHIFT
    rows = props.astype(np.int32).reshape(STAGE1_LEN, 256)
    keys = [row.tobytes() for row in rows]
    blocks = sorted(set(keys), key=lambda k: (k != rows[0].tobytes(), k))  # block 0: U+0000..
    index = {key: k for k, key in enumerate(blocks)}
    stage1 = np.fromiter((index[key] for key in keys), np.int32, len(keys))
    block_words = np.frombuffer(b"".join(blocks), np.int32)
    pairs, composites = uni.nfc_pairs(), uni.nfc_composites()
    head = np.array([MAGIC, len(blocks), len(flat), len(pairs)], np.int32)
    parts = [head, stage1, block_words, flat.astype(np.int32), pairs.reshape(-1), composites]
    if sum(len(p) for p in parts) % 2 == 0:  # an odd count marks it in the encode call
        parts.append(np.zeros(1, np.int32))
    out = np.concatenate(parts).astype(np.int32)
    out.setflags(write=False)
    return out


def normalize_batch(data, offsets, part: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """NFC of each row data[offsets[i]:offsets[i + 1]] on the CPU (the CPU module's
    nfc_normalize, ffi/pretok/nfc_normalize.h: what the CUDA pre-pass writes).

    Args:
        data: the rows' bytes, uint8 (or bytes).
        offsets: int64[rows + 1], non-decreasing, from 0 to len(data).
        part: 0, each row rewritten whole; > 0, in the parts the CUDA pre-pass's threads
            rewrite (nfc_part_start, `part` bytes each), which must give the same bytes.

    Returns:
        (bytes uint8, offsets int64[rows + 1]) of the normalized rows; invalid UTF-8 stays as
        it is, each such byte a starter (as Python's NFC on the text decoded with
        surrogateescape).
    """
    from .. import native

    data = np.frombuffer(data, np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    data = np.ascontiguousarray(data, np.uint8)
    offsets = np.ascontiguousarray(offsets, np.int64)
    if offsets.ndim != 1 or len(offsets) < 1 or offsets[0] != 0 or offsets[-1] != len(data):
        raise ValueError("offsets must be int64[rows + 1] from 0 to len(data)")
    if np.any(np.diff(offsets) < 0):
        raise ValueError("offsets must be non-decreasing")
    return native.cpu.nfc_normalize(data, offsets, operand(), part)


def normalize_strings(texts, part: int = 0) -> list:
    """normalize_batch of a list of str or bytes, each returned as it came (str or bytes)."""
    raw = [t.encode("utf-8", "surrogatepass") if isinstance(t, str) else bytes(t) for t in texts]
    offsets = np.zeros(len(raw) + 1, np.int64)
    np.cumsum([len(r) for r in raw], out=offsets[1:])
    out, out_offsets = normalize_batch(b"".join(raw), offsets, part)
    buf = out.tobytes()
    rows = [buf[out_offsets[i] : out_offsets[i + 1]] for i in range(len(raw))]
    return [r.decode("utf-8", "surrogatepass") if isinstance(t, str) else r for r, t in zip(rows, texts)]
