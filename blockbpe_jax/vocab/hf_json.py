"""HF tokenizers `tokenizer.json` files with a byte-level BPE model (those with `byte_fallback`
are SentencePiece-style and go to vocab/char_bpe.py)."""

from __future__ import annotations

import dataclasses
import functools
import os
from pathlib import Path

from .. import pretok
from ..pretok.regex_syntax import same_in_both_dialects
from .hf_fields import parse_added_tokens, parse_hf_merges, read_json
from .model import Vocab, VocabError, check_id, missing_bytes_message, place_specials, vocab_name
from .patterns import recognise_pattern


@functools.lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte -> printable character map, used for HF byte-level vocab keys.

    Bytes that are printable Latin-1 (other than space and soft hyphen) stand for themselves;
    the other 68 bytes, in increasing order, take U+0100, U+0101, ... ."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("\N{INVERTED EXCLAMATION MARK}"), ord("\N{NOT SIGN}") + 1),
        *range(ord("\N{REGISTERED SIGN}"), ord("\N{LATIN SMALL LETTER Y WITH DIAERESIS}") + 1),
    }
    mapping, next_extra = {}, 256
    for b in range(256):
        if b in printable:
            mapping[b] = chr(b)
        else:
            mapping[b] = chr(next_extra)
            next_extra += 1
    return mapping


@functools.lru_cache(maxsize=1)
def _unicode_to_latin1_table() -> dict[int, int]:
    """str.translate table turning a byte-level string into a string whose code points are the
    bytes (then .encode('latin-1') gives the bytes). Characters outside the alphabet are sent to
    U+FFFF so that the encode fails instead of passing them through silently."""
    table = {ord(ch): b for b, ch in bytes_to_unicode().items()}
    for cp in range(512):
        table.setdefault(cp, 0xFFFF)
    return table


def _decode_byte_level(text: str) -> bytes | None:
    """Byte-level vocab key -> bytes, or None if it holds a character outside the alphabet."""
    try:
        return text.translate(_unicode_to_latin1_table()).encode("latin-1")
    except UnicodeEncodeError:
        return None


def load_tokenizer_json(path: str | os.PathLike) -> Vocab:
    """Load an HF ``tokenizer.json`` whose model is byte-level BPE.

    All ``added_tokens`` go into ``special_tokens``, special or not: HF matches every added
    token in the raw text before pre-tokenizing, which is exactly how special tokens are
    handled here. Exact pre-tokenization is limited to the pre-tokenizers pretok.from_hf
    accepts with no normalizer; anything else loads, with the reason in ``unsupported``.

    A pair listed twice in model.merges takes the rank of its last occurrence, as in HF (its
    merge map is built by inserting the list in order).
    """
    return vocab_from_tokenizer_json(read_json(path), path)


def vocab_from_tokenizer_json(doc: object, path: str | os.PathLike) -> Vocab:
    """The Vocab of a parsed tokenizer.json document; `path` names it in errors."""
    path = Path(path)
    if not isinstance(doc, dict):
        raise VocabError(f"{path}: top level is not a JSON object")
    model = doc.get("model")
    if not isinstance(model, dict):
        raise VocabError(f"{path}: model: missing")
    model_type = model.get("type", "BPE" if "merges" in model else None)
    if model_type != "BPE":
        raise VocabError(f"{path}: model.type: model type {model_type!r} is not supported")
    if model.get("byte_fallback"):  # SentencePiece-style: merges over characters
        from .char_bpe import vocab_from_hf_json

        return vocab_from_hf_json(doc, path)
    vocab_json = model.get("vocab")
    merges_json = model.get("merges")
    if not isinstance(vocab_json, dict):
        raise VocabError(f"{path}: model.vocab: missing or not an object")
    if not isinstance(merges_json, list):
        raise VocabError(f"{path}: model.merges: missing or not a list")

    # Added tokens first: their vocab entries (if any) may be spelled raw rather than
    # byte-level encoded, so we need to know which ids they are.
    added: dict[str, int] = {}
    reasons: list[str] = []
    for _, text, token_id, flags in parse_added_tokens(doc, path):
        added[text] = token_id
        if flags:
            reasons.append(f"added token {text!r} uses {'/'.join(flags)}, which is not supported")
    added_text_of_id = {i: text for text, i in added.items()}

    def entry(key: str) -> str:  # (spelled only for a bad entry: 100-200k a file)
        return f"{path}: model.vocab[{key!r}]"

    for key, token_id in vocab_json.items():
        check_id(lambda key=key: entry(key), token_id)
    token_bytes: list[bytes | None] = [None] * (max(vocab_json.values(), default=-1) + 1)
    for key, token_id in vocab_json.items():
        data = _decode_byte_level(key)
        if data is None or not data:
            if added_text_of_id.get(token_id) == key:
                data = key.encode("utf-8")
            else:
                raise VocabError(f"{entry(key)}: key is not a byte-level encoded token")
        if token_bytes[token_id] is not None:
            other = next(k for k, v in vocab_json.items() if v == token_id and k != key)
            raise VocabError(f"{entry(key)}: duplicate id {token_id} (also {other!r})")
        token_bytes[token_id] = data

    missing = [b for b, ch in bytes_to_unicode().items() if ch not in vocab_json]
    if missing:
        raise VocabError(f"{path}: model.vocab: {missing_bytes_message(missing)}")
    byte_ids = tuple(vocab_json[bytes_to_unicode()[b]] for b in range(256))

    # HF drops the continuing-subword prefix from the right half when it names the result.
    merges = parse_hf_merges(path, merges_json, vocab_json, len(model.get("continuing_subword_prefix") or ""))

    token_bytes = place_specials(str(path), token_bytes, added)

    try:
        norm = pretok.normalizer_from_hf(doc.get("normalizer"))
    except pretok.PretokenizerUnsupported as e:
        norm = pretok.Normalizer()
        reasons.insert(0, str(e))
    if norm.lowercase:
        reasons.extend(_lowercase_added_tokens(doc))
    try:
        pretokenizer = dataclasses.replace(
            pretok.from_hf(doc.get("pre_tokenizer")), nfc=norm.nfc, normalizer=norm
        )
    except pretok.PretokenizerUnsupported as e:
        pretokenizer = None
        reasons.append(str(e))
    stages = pretokenizer.stages if pretokenizer is not None else ()
    pattern = stages[0].pattern if len(stages) == 1 else None
    # BPE options that change the merge results themselves (not just pre-tokenization).
    if model.get("dropout") not in (None, 0, 0.0):
        reasons.append("model.dropout is not supported")
    for option in ("continuing_subword_prefix", "end_of_word_suffix"):
        if model.get(option):
            reasons.append(f"model.{option} {model[option]!r} is not supported")

    return Vocab(
        name=vocab_name(path),
        token_bytes=tuple(token_bytes),
        merges=merges,
        byte_ids=byte_ids,
        special_tokens=added,
        pattern=pattern,
        # (the known patterns are named in fancy-regex's dialect: a Split regex is Oniguruma's)
        pattern_name=recognise_pattern(pattern) if pattern and same_in_both_dialects(pattern) else None,
        whole_piece_shortcut=bool(model.get("ignore_merges", False)),
        pretokenizer=pretokenizer,
        unsupported="; ".join(reasons) or None,
        source=str(path),
    )


def _lowercase_added_tokens(doc: dict) -> list[str]:
    """HF matches an added token marked `normalized` (the default for non-special ones) in the
    lowercased text, we match added tokens in the raw text: the same only when no cased
    letter is in its content."""
    from ..pretok import normalizer

    cased = set(normalizer.lowercase_map()) | {ord(c[0]) for c in normalizer.lowercase_map().values()}
    out = []
    for k, entry in enumerate(doc.get("added_tokens") or []):
        text = entry.get("content", "")
        if entry.get("normalized", not entry.get("special", False)) and any(ord(c) in cased for c in text):
            out.append(
                f"added_tokens[{k}] {text!r} is normalized (matched in the lowercased text) and has"
                " cased letters, which is not supported"
            )
    return out
