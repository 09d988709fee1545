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


def piece_keys(tables: VocabTables) -> dict[int, bytes]:
    """Each full piece-table row's token id -> its key's bytes (build.py's layout: a short key
    in its row, a long one in token_data at the row's offset)."""
    keys = {}
    for first, token_id, n, last in tables.piece_table[tables.piece_table[:, 1] >= 0].tolist():
        if n <= SHORT_KEY_LEN:
            keys[token_id] = (((last & _U32) << 32) | (first & _U32)).to_bytes(8, "little")[:n]
        else:
            keys[token_id] = tables.token_data[last : last + n].tobytes()
    return keys


def lookup_piece(tables: VocabTables, data: bytes) -> int | None:
    """The token id the piece table gives the bytes `data` (a whole piece), or None."""
    table = tables.piece_table
    mask = table.shape[0] - 1
    h = piece_hash(data)
    short = len(data) <= SHORT_KEY_LEN
    key = int.from_bytes(data, "little") if short else 0
    int32 = lambda x: x - (1 << 32) if x >= 1 << 31 else x  # noqa: E731 (the int32 view of a column)
    slot = h & mask
    token_data = tables.token_data
    for _ in range(table.shape[0]):
        first, token_id, byte_len, last = table[slot].tolist()
        if token_id == -1:
            return None
        if byte_len == len(data):
            if short and first == int32(key & _U32) and last == int32(key >> 32):
                return token_id
            if not short and first == int32(h) and token_data[last : last + byte_len].tobytes() == data:
                return token_id
        slot = (slot + 1) & mask
    return None
