"""The reference probes: the device tables (tables/build.py's layouts) read back in plain
Python, probing exactly as the kernels do. The tests prove the layouts with them."""

from __future__ import annotations

from blockbpe_jax.tables.build import (
    _U32,
    SHORT_KEY_LEN,
    VocabTables,
    _pair_hash_alt_int,
    _pair_hash_int,
    piece_hash,
)

__all__ = ["lookup_pair", "lookup_piece", "piece_keys"]


def lookup_pair(tables: VocabTables, left: int, right: int) -> tuple[int, int] | None:
    """(rank, merged_id) of the pair, probing exactly as the kernels do; None if absent."""
    table = tables.pair_table
    mask = table.shape[0] - 1
    for slot in (_pair_hash_int(left, right) & mask, _pair_hash_alt_int(left, right) & mask):
        row_left, row_right, rank, merged = table[slot].tolist()
        if row_left == left and row_right == right and left >= 0:
            return rank, merged
    return None


def _row_key(tables: VocabTables, first: int, n: int, last: int) -> bytes:
    """The key of a full piece-table row (build.py's layout: a short key in its row, a long one
    in token_data at the row's offset)."""
    if n <= SHORT_KEY_LEN:
        return (((last & _U32) << 32) | (first & _U32)).to_bytes(8, "little")[:n]
    return tables.token_data[last : last + n].tobytes()


def piece_keys(tables: VocabTables) -> dict[int, bytes]:
    """Each full piece-table row's token id -> its key's bytes."""
    rows = tables.piece_table[tables.piece_table[:, 1] >= 0].tolist()
    return {token_id: _row_key(tables, first, n, last) for first, token_id, n, last in rows}


def lookup_piece(tables: VocabTables, data: bytes) -> int | None:
    """The token id the piece table gives the bytes `data` (a whole piece), or None: linear
    probing from the hash's home slot; a long key's row must also hold its hash."""
    table = tables.piece_table
    mask = table.shape[0] - 1
    h = piece_hash(data)
    h32 = h - (1 << 32) if h >= 1 << 31 else h  # (the int32 view of the row's first column)
    slot = h & mask
    for _ in range(table.shape[0]):
        first, token_id, byte_len, last = table[slot].tolist()
        if token_id == -1:
            return None
        if byte_len == len(data) and (byte_len <= SHORT_KEY_LEN or first == h32):
            if _row_key(tables, first, byte_len, last) == data:
                return token_id
        slot = (slot + 1) & mask
    return None
