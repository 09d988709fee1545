"""Mistral's Tekken tokenizer files (`tekken_*.json`, shipped by the `mistral-common` package).

A Tekken file is tiktoken data in JSON: `config.pattern` is the tiktoken pattern, `vocab` lists
{rank, token_bytes (base64)}, and the first `config.default_num_special_tokens` ids are special
tokens. As mistral_common's Tekkenizer reads it: the first default_vocab_size -
num_special ranks are mergeable, and the id of rank r is r + num_special. Special tokens come
from the file's `special_tokens` list when it has one, else they get the filler names
`<SPECIAL_{id}>` (the file does not name them); they are never matched in text unless allowed.
"""

from __future__ import annotations

import base64
import binascii
import os
from pathlib import Path

from .hf_fields import read_json
from .model import MAX_TOKEN_ID, Vocab, VocabError, vocab_from_ranks


def is_tekken_json(doc: object) -> bool:
    return (
        isinstance(doc, dict) and isinstance(doc.get("config"), dict) and isinstance(doc.get("vocab"), list)
    )


def load_tekken_json(path: str | os.PathLike) -> Vocab:
    return vocab_from_tekken(read_json(path), path)


def vocab_from_tekken(doc: object, path: str | os.PathLike) -> Vocab:
    path = Path(path)
    if not is_tekken_json(doc):
        raise VocabError(f"{path}: not a Tekken file (expected 'config' and a 'vocab' list)")
    config = doc["config"]
    for key in ("pattern", "default_vocab_size", "default_num_special_tokens"):
        if key not in config:
            raise VocabError(f"{path}: config.{key}: missing")
    pattern = config["pattern"]
    n_special, vocab_size = config["default_num_special_tokens"], config["default_vocab_size"]
    if not isinstance(pattern, str):
        raise VocabError(f"{path}: config.pattern: not a string")
    if not (
        isinstance(n_special, int)
        and isinstance(vocab_size, int)
        and 0 <= n_special < vocab_size <= MAX_TOKEN_ID
    ):
        raise VocabError(
            f"{path}: config: default_num_special_tokens={n_special!r} and "
            f"default_vocab_size={vocab_size!r} are inconsistent"
        )
    inner = vocab_size - n_special
    ranks: dict[bytes, int] = {}
    for k, entry in enumerate(doc["vocab"]):
        if not isinstance(entry, dict) or not isinstance(entry.get("rank"), int):
            raise VocabError(f"{path}: vocab[{k}]: expected an object with an integer 'rank'")
        if entry["rank"] >= inner:
            continue
        try:
            token = base64.b64decode(entry.get("token_bytes", ""), validate=True)
        except (binascii.Error, ValueError, TypeError):
            raise VocabError(f"{path}: vocab[{k}].token_bytes: not valid base64") from None
        if not token or token in ranks:
            raise VocabError(f"{path}: vocab[{k}]: empty or duplicate token {token!r}")
        ranks[token] = entry["rank"] + n_special
    if len(ranks) != inner:
        raise VocabError(f"{path}: vocab: ranks 0..{inner - 1} expected, {len(ranks)} found")
    specials = {f"<SPECIAL_{i}>": i for i in range(n_special)}
    for k, entry in enumerate(doc.get("special_tokens") or []):
        if not (
            isinstance(entry, dict)
            and isinstance(entry.get("rank"), int)
            and isinstance(entry.get("token_str"), str)
            and 0 <= entry["rank"] < n_special
        ):
            raise VocabError(f"{path}: special_tokens[{k}]: expected {{rank < {n_special}, token_str}}")
        specials.pop(f"<SPECIAL_{entry['rank']}>", None)
        specials[entry["token_str"]] = entry["rank"]
    return vocab_from_ranks(
        ranks=ranks,
        where=str(path),
        name=path.stem,
        special_tokens=specials,
        pattern=pattern,
        source=str(path),
    )
