"""SentencePiece BPE's whole words (ffi/core/char_symbols.h, lookup_word): which pieces the piece
table holds as whole words, and whether any may be held.

A segment (a word starting at `▁`, or the text between specials) merges on its own, so one
whose symbols are a piece's characters encodes to what those characters encode to alone. The
pieces that encode to themselves that way ("self-encoding", found by running the CPU executor's
own rule on each piece's text) are looked up whole, by their token bytes; the others are merged
as before. A hit on bytes is a hit on symbols only where the bytes determine the symbols
(`bytes_spell_symbols`); elsewhere the table holds no words and every segment is merged.
tables/build.py places the words in the piece table after the characters.
"""

from __future__ import annotations

import numpy as np

from ..vocab import Vocab
from ..vocab.char_bpe import REPLACEMENT


def bytes_spell_symbols(vocab: Vocab) -> bool:
    """Whether a segment's token bytes determine its initial symbols, which is what makes a
    whole-word hit exact: every byte-fallback piece's bytes are its byte, and every other symbol
    the executors make from text (each character's piece, the U+FFFD piece of an invalid byte,
    the dummy prefix) spells one character whose piece is that symbol (`▁` spells a space, and a
    space's piece is `▁`'s). Then a segment's bytes are valid UTF-8 only where no invalid byte
    became a raw byte-fallback piece; each character of them came from the one symbol that
    spells it, or, a character that is no piece, from the byte-fallback pieces of its bytes: the
    symbols the executors make from the text those bytes spell."""
    cl, tb = vocab.char_level, vocab.token_bytes
    if any(i < 0 or tb[i] != bytes([b]) for b, i in enumerate(vocab.byte_ids)):
        return False
    symbols = set(cl.char_ids.values()) | ({cl.replacement_id, cl.prefix_id} - {-1})
    for i in symbols:
        try:
            spelled = tb[i].decode("utf-8") if tb[i] is not None else ""
        except UnicodeDecodeError:
            return False
        if len(spelled) != 1 or cl.char_ids.get(spelled) != i:
            return False
    return cl.replacement_id < 0 or cl.char_ids.get(REPLACEMENT) == cl.replacement_id


def whole_word_ids(
    vocab: Vocab,
    offsets: np.ndarray,
    data: np.ndarray,
    pair_table: np.ndarray,
    piece_table: np.ndarray,
    char_key_len: int,
    char_table: np.ndarray,
    char_runs: tuple,
    longest: int,
) -> np.ndarray:
    """The pieces of 2+ characters and at most `longest` bytes that a segment of their
    characters encodes to, by the executors' own rule (`native.cpu.char_self_encoding`: merges
    over characters, then the runs); none where `bytes_spell_symbols` does not hold.

    Args:
        vocab: a SentencePiece-style vocabulary (vocab.char_level set).
        offsets, data: token_offsets and token_data (tables/build.py's layout).
        pair_table: the vocabulary's pair table.
        piece_table, char_table, char_runs: the character tables, without words.
        char_key_len: the piece table's longest key (its max_piece_len), in bytes.
        longest: the longest word key, in bytes.

    Returns:
        int64 ids, ascending."""
    if not bytes_spell_symbols(vocab):
        return np.zeros(0, dtype=np.int64)
    byte_pieces = set(vocab.byte_ids)
    candidates = []
    for i in vocab.mergeable_ids:
        b = vocab.token_bytes[i]
        if i in byte_pieces or len(b) > longest:
            continue
        try:
            if len(b.decode("utf-8")) >= 2:
                candidates.append(i)
        except UnicodeDecodeError:
            continue
    ids = np.asarray(candidates, dtype=np.int64)
    if ids.size == 0:
        return ids
    from .. import native

    encodes_to_itself = native.cpu.char_self_encoding(
        pair_table,
        np.asarray(vocab.byte_ids, dtype=np.int32),
        piece_table,
        offsets,
        data,
        char_table,
        *char_runs,
        max_piece_len=char_key_len,
        ids=ids.astype(np.int32),
    )
    return ids[encodes_to_itself.astype(bool)]
