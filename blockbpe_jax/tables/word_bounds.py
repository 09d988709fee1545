"""SentencePiece BPE's word bounds beyond the `▁` rule (ffi/core/char_symbols.h, "Word
bounds"): the points no merge can cross, found at load and written to the char table.

A merge joins two symbols into a piece, so where no piece can hold the symbols on both sides
of a point, nothing merges across it and the text cut there encodes to the same tokens. The
kernels then merge shorter words, which the piece table and the misses' cache keep more of
(a newline is no piece in Llama 2's or Mistral's vocabularies: `▁well.\\n\\n“Yes` was one word).
A bound the rule lacks only costs merging; one it has that the vocabulary does not would be
wrong ids, so both rules are conservative.
"""

from __future__ import annotations

from ..vocab import Vocab

MAX_ISOLATED = 16  # kMaxIsolated (ffi/core/char_symbols.h)
_COMMON = "\n\t\r0123456789"  # (where more than MAX_ISOLATED qualify, these first)


def bounds_base(vocab: Vocab) -> int:
    """<0x00>'s id where every byte-fallback piece is a word of its own (is_bound tells one by
    its id alone), else -1: the 256 byte pieces' ids run on from <0x00>'s, none of them is a
    character's piece, a special or the prefix, and no merge or run rule holds one. (Every
    loader's models pass: sentencepiece needs every character of a piece to be a piece.)"""
    ids = vocab.byte_ids
    base = ids[0] if len(ids) == 256 else -1
    if base < 0 or any(i != base + b for b, i in enumerate(ids)):
        return -1
    held = range(base, base + 256)
    cl = vocab.char_level
    others = set(cl.char_ids.values()) | set(vocab.special_tokens.values())
    others |= {cl.replacement_id, cl.prefix_id, cl.word_start_id} | _run_rule_ids(cl)
    if any(i in held for i in others):
        return -1
    for (a, b), (_, m) in vocab.merges.items():
        if a in held or b in held or m in held:
            return -1
    return base


def isolated_ids(vocab: Vocab) -> tuple[int, ...]:
    """The pieces of the isolated characters (is_isolated), at most MAX_ISOLATED: ASCII
    characters (not the space) whose piece no other character, byte piece or special shares,
    and every piece or merge result holding which is a run of it; such a symbol starts a word
    where it meets a different symbol (Gemma 4's newline and tab, Llama 2's digits)."""
    cl, tb = vocab.char_level, vocab.token_bytes
    specials = set(vocab.special_tokens.values())
    owners: dict[int, int] = {}
    for i in cl.char_ids.values():
        owners[i] = owners.get(i, 0) + 1
    taken = specials | set(vocab.byte_ids) | {cl.replacement_id, cl.prefix_id, cl.word_start_id}
    pieces = {i for i, b in enumerate(tb) if b is not None and i not in specials}
    pieces |= {m for _, m in vocab.merges.values()} | _run_rule_ids(cl)
    holding = _pieces_by_ascii(tb, pieces)
    found = []
    for ch in sorted(map(chr, range(128)), key=lambda ch: (ch not in _COMMON, ch)):
        i = cl.char_ids.get(ch, -1)
        if ch == " " or i < 0 or owners[i] != 1 or i in taken:
            continue
        if all(set(tb[j]) == {ord(ch)} for j in holding.get(ord(ch), ())):
            found.append(i)
    return tuple(found[:MAX_ISOLATED])


def _run_rule_ids(cl) -> set[int]:
    """The pieces the run rule writes (char_symbols.h, merge_run), which no merge makes."""
    if cl.runs is None:
        return set()
    return {cl.runs.run_id, cl.runs.long_id} | {i for row in cl.runs.table for i in row}


def _pieces_by_ascii(token_bytes, ids) -> dict[int, list[int]]:
    """For each ASCII byte, the ids (of `ids`) whose token bytes hold it."""
    out: dict[int, list[int]] = {}
    for i in ids:
        for code in {x for x in (token_bytes[i] or b"") if x < 0x80}:
            out.setdefault(code, []).append(i)
    return out
