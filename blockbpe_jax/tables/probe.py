"""The reference probes: the device tables (tables/build.py's layouts) read back in plain
Python, probing exactly as the kernels do. The tests prove the layouts with them."""

from __future__ import annotations

from blockbpe_jax.tables.build import (
    _U32,
    PIECE_ID,
    PIECE_LEN,
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


def _row_key(tables: VocabTables, row: list[int]) -> bytes:
    """The key of a full piece-table row (build.py's layout: a short key's bytes are its four
    key words, a long key's are in token_data at the row's offset)."""
    n = row[PIECE_LEN]
    if n <= SHORT_KEY_LEN:
        return b"".join((word & _U32).to_bytes(4, "little") for word in row[:4])[:n]
    return tables.token_data[row[1] : row[1] + n].tobytes()


def piece_keys(tables: VocabTables) -> dict[int, bytes]:
    """Each full piece-table row's token id -> its key's bytes."""
    rows = tables.piece_table[tables.piece_table[:, PIECE_ID] >= 0].tolist()
    return {row[PIECE_ID]: _row_key(tables, row) for row in rows}


def lookup_piece(tables: VocabTables, data: bytes) -> int | None:
    """The token id the piece table gives the bytes `data` (a whole piece), or None: linear
    probing from the hash's home slot; a short key's row must hold its bytes, a long key's its
    hash (then its bytes in token_data)."""
    table = tables.piece_table
    mask = table.shape[0] - 1
    h = piece_hash(data)
    h32 = h - (1 << 32) if h >= 1 << 31 else h  # (the int32 view of the row's first column)
    slot = h & mask
    for _ in range(table.shape[0]):
        row = table[slot].tolist()
        if row[PIECE_ID] == -1:
            return None
        if row[PIECE_LEN] == len(data) and (len(data) <= SHORT_KEY_LEN or row[0] == h32):
            if _row_key(tables, row) == data:
                return row[PIECE_ID]
        slot = (slot + 1) & mask
    return None
