"""SentencePiece BPE models (`.model` files: Llama 2, Mistral v1-v7, Gemma) as a Vocab whose
merges run over characters (the kernel's rules: ffi/core/char_symbols.h; the shared model and the
merge-order check: blockbpe_jax/vocab/char_bpe.py).

The file is a protobuf ModelProto; the few fields that decide tokenization are read here
directly (no `sentencepiece` dependency). sentencepiece's BPE encoder splits the normalized
text into characters and repeatedly merges the adjacent pair whose concatenation is the piece
with the highest score, leftmost first on equal scores; a character without a piece becomes
its UTF-8 bytes' <0xXX> pieces. That maps onto the byte-level engine with a pair table ranked
by score, given properties of the model that are checked here (a model without them is
refused, naming what is missing): BPE with byte fallback, the identity normalizer (no NFKC
map, no whitespace collapsing; the dummy prefix and whitespace escaping are options), no
UNUSED pieces, every character of every piece itself a piece (so a fallback character never
merges), and ties in the merge order only where `vocab.char_bpe.split_runs` can replay them.
"""

from __future__ import annotations

import os
import struct
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from .char_bpe import (
    PREFIX_BEFORE_SPECIAL,
    REPLACEMENT,
    SPACE,
    char_level_vocab,
    piece_bytes,
    space_joiners,
    split_runs,
)
from .model import MAX_TOKEN_ID, CharLevel, Vocab, VocabError, place_specials

# SentencePiece.Type and TrainerSpec.ModelType (sentencepiece_model.proto)
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
MODEL_TYPES = {1: "UNIGRAM", 2: "BPE", 3: "WORD", 4: "CHAR"}


# --------------------------------------------------------------------------------------------
# Protobuf wire format (only what ModelProto needs)
# --------------------------------------------------------------------------------------------


def _varint(data: bytes, at: int, where: str) -> tuple[int, int]:
    value = shift = 0
    while True:
        if at >= len(data) or shift > 63:
            raise VocabError(f"{where}: truncated or malformed protobuf varint")
        b = data[at]
        at += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return value, at


def _fields(data: bytes, where: str):
    """(field number, wire type, value) of a message: ints for varints, bytes otherwise."""
    at = 0
    while at < len(data):
        key, at = _varint(data, at, where)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(data, at, where)
        elif wire == 1 or wire == 5:
            size = 8 if wire == 1 else 4
            value, at = data[at : at + size], at + size
        elif wire == 2:
            size, at = _varint(data, at, where)
            value, at = data[at : at + size], at + size
        else:
            raise VocabError(f"{where}: protobuf wire type {wire} is not valid here")
        if at > len(data):
            raise VocabError(f"{where}: truncated protobuf message")
        yield number, wire, value


def _message(data: bytes, where: str, defaults: dict[int, object]) -> dict[int, object]:
    out = dict(defaults)
    for number, _, value in _fields(data, where):
        out[number] = value
    return out


def _text(value: object, where: str) -> str:
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise VocabError(f"{where}: not valid UTF-8") from None


def is_sentencepiece_model(head: bytes) -> bool:
    """Whether a file that starts with `head` looks like a ModelProto (field 1, a piece)."""
    return head[:1] == b"\n" and head[2:3] == b"\n"  # pieces[0] { piece: ... }


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


def load_sentencepiece_model(path: str | os.PathLike) -> Vocab:
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as e:
        raise VocabError(f"{path}: cannot read: {e}") from e
    return vocab_from_sentencepiece(data, str(path), path.name)


@dataclass(frozen=True)
class SpmModel:
    """What decides a SentencePiece model's tokenization, from a `.model` file (below) or a
    GGUF header (blockbpe_jax/vocab/gguf.py): one builder, vocab_from_spm_model, for both."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type) in id order
    model_type: int = 2  # TrainerSpec.ModelType (2: BPE)
    byte_fallback: bool = True
    treat_whitespace_as_suffix: bool = False
    normalizer: str = "identity"  # normalizer_spec.name
    custom_rules: bool = False  # precompiled_charsmap or normalization_rule_tsv set
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = False
    escape_whitespaces: bool = True


def vocab_from_sentencepiece(data: bytes, where: str, name: str = "sentencepiece") -> Vocab:
    pieces: list[tuple[str, float, int]] = []
    trainer, normalizer = b"", b""
    for number, wire, value in _fields(data, where):
        if number == 1 and wire == 2:
            at = f"{where}: pieces[{len(pieces)}]"
            m = _message(value, at, {1: b"", 2: struct.pack("<f", 0.0), 3: NORMAL})
            pieces.append((_text(m[1], at), struct.unpack("<f", m[2])[0], int(m[3])))
        elif number == 2 and wire == 2:
            trainer = value
        elif number == 3 and wire == 2:
            normalizer = value
    if not pieces:
        raise VocabError(f"{where}: no pieces (not a SentencePiece model?)")
    t = _message(trainer, f"{where}: trainer_spec", {3: 1, 24: 0, 35: 0})
    n = _message(normalizer, f"{where}: normalizer_spec", {1: b"", 2: b"", 3: 1, 4: 1, 5: 1, 6: b""})
    model = SpmModel(
        pieces=pieces,
        model_type=int(t[3]),
        byte_fallback=bool(t[35]),
        treat_whitespace_as_suffix=bool(t[24]),
        normalizer=_text(n[1], f"{where}: normalizer_spec.name"),
        custom_rules=bool(n[2] or n[6]),
        add_dummy_prefix=bool(n[3]),
        remove_extra_whitespaces=bool(n[4]),
        escape_whitespaces=bool(n[5]),
    )
    return vocab_from_spm_model(model, where, name)


def vocab_from_spm_model(model: SpmModel, where: str, name: str = "sentencepiece") -> Vocab:
    pieces = model.pieces
    if len(pieces) > MAX_TOKEN_ID:
        raise VocabError(f"{where}: {len(pieces)} pieces is too many")

    def refuse(what: str):
        raise VocabError(f"{where}: {what}")

    if model.model_type != 2:
        refuse(
            f"trainer_spec.model_type: {MODEL_TYPES.get(model.model_type, model.model_type)} "
            f"models are not supported (only BPE)"
        )
    if not model.byte_fallback:
        refuse(
            "trainer_spec.byte_fallback is false: models without byte fallback (unknown "
            "characters as <unk>) are not supported"
        )
    if model.treat_whitespace_as_suffix:
        refuse("trainer_spec.treat_whitespace_as_suffix is not supported")
    norm_name = model.normalizer
    if model.custom_rules or norm_name not in ("", "identity"):
        refuse(
            f"normalizer_spec: the {norm_name or 'custom'!r} normalization is not supported (only 'identity')"
        )
    if model.remove_extra_whitespaces:
        refuse("normalizer_spec.remove_extra_whitespaces is not supported")
    escape = model.escape_whitespaces

    ids: dict[str, int] = {}
    by_type: dict[int, list[int]] = defaultdict(list)
    for i, (piece, _, kind) in enumerate(pieces):
        at = f"pieces[{i}] ({piece!r})"
        if kind not in (NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE):
            refuse(f"{at}: unknown piece type {kind}")
        if kind == UNUSED:
            refuse(f"{at}: UNUSED pieces (merged, then split again by sentencepiece) are not supported")
        if not piece or piece in ids:
            refuse(f"{at}: empty or duplicate piece")
        ids[piece] = i
        by_type[kind].append(i)

    # Byte fallback pieces <0x00>..<0xFF>.
    byte_ids = [ids.get(f"<0x{b:02X}>", -1) for b in range(256)]
    if -1 in byte_ids or any(pieces[i][2] != BYTE for i in byte_ids):
        refuse("byte_fallback is set but the 256 BYTE pieces <0x00>..<0xFF> are not all there")

    normal = {pieces[i][0]: i for i in by_type[NORMAL]}
    chars = {p: i for p, i in normal.items() if len(p) == 1}
    for p in normal:
        missing = next((ch for ch in p if ch not in chars), None)
        if missing is not None:
            refuse(f"piece {p!r}: its character {missing!r} is not a piece")

    # Ranks from scores, highest first (equal scores, equal ranks: sentencepiece takes the
    # leftmost of them, as the passes do).
    multi = sorted((i for i in by_type[NORMAL] if len(pieces[i][0]) > 1), key=lambda i: -pieces[i][1])
    merges: dict[tuple[int, int], tuple[int, int]] = {}
    rank = -1
    for k, i in enumerate(multi):
        if k == 0 or pieces[i][1] != pieces[multi[k - 1]][1]:
            rank += 1
        piece = pieces[i][0]
        for cut in range(1, len(piece)):
            left, right = normal.get(piece[:cut]), normal.get(piece[cut:])
            if left is not None and right is not None:
                merges[(left, right)] = (rank, i)
    merges, runs = split_runs(merges, [p for p, _, _ in pieces], where)

    # Bytes of each id (decoding): `▁` is a space; BYTE pieces their byte; the rest their text.
    token_bytes: list[bytes | None] = []
    for piece, _, kind in pieces:
        if kind == BYTE:
            token_bytes.append(bytes([int(piece[3:5], 16)]))
        elif kind in (NORMAL, USER_DEFINED) and escape:
            token_bytes.append(piece_bytes(piece))
        else:
            token_bytes.append(piece.encode("utf-8"))
    # Control and unknown pieces are special tokens (matched in text only when allowed);
    # user-defined ones are always matched, as sentencepiece does.
    specials = {pieces[i][0]: i for k in (UNKNOWN, CONTROL, USER_DEFINED) for i in by_type[k]}
    user_defined = tuple(pieces[i][0] for i in by_type[USER_DEFINED])
    spaced = next((u for u in user_defined if SPACE in u), None)
    if spaced is not None and escape and model.add_dummy_prefix:
        # sentencepiece matches user-defined pieces in the normalized text, dummy prefix
        # included; the prefix is a token here, not text the matcher sees.
        refuse(
            f"user-defined piece {spaced!r}: user-defined pieces with '\u2581' together with "
            f"add_dummy_prefix are not supported"
        )
    token_bytes = place_specials(
        where, token_bytes, {s: i for s, i in specials.items() if pieces[i][2] != USER_DEFINED}
    )

    space_id = chars.get(SPACE, -1)
    char_ids = dict(chars)
    if escape and space_id >= 0:
        char_ids[" "] = space_id
    elif escape:
        refuse("normalizer_spec.escape_whitespaces is set but there is no piece '\u2581'")
    joiners = space_joiners(normal, chars) if escape else None
    char_level = CharLevel(
        char_ids=char_ids,
        replacement_id=chars.get(REPLACEMENT, -1),
        prefix_id=space_id if model.add_dummy_prefix and escape else -1,
        prefix_rule=PREFIX_BEFORE_SPECIAL,  # sentencepiece: once, before the whole text
        word_start_id=space_id if joiners is not None else -1,
        runs=runs,
        joiners=joiners or (),
        # sentencepiece matches user-defined pieces after spaces became `▁` (the matcher's
        # general loop only where a special holds one)
        escaped_specials=escape and any(SPACE in s for s in specials),
    )
    if model.add_dummy_prefix and not escape:
        refuse("normalizer_spec.add_dummy_prefix without escape_whitespaces is not supported")
    return char_level_vocab(
        name=name,
        token_bytes=token_bytes,
        merges=merges,
        byte_ids=byte_ids,
        special_tokens=specials,
        source=where,
        char_level=char_level,
        always_special=user_defined,
    )
