"""The parts of an HF tokenizer.json that both of its loaders read (hf_json.py for byte-level
BPE, vocab/char_bpe.py for BPE over characters with byte fallback): the file itself, `added_tokens`
and `model.merges`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from .model import VocabError, check_id


def read_json(path: str | os.PathLike) -> object:
    """A JSON file's document; VocabError naming the file when it cannot be read or parsed."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return json.load(f)
    except OSError as e:
        raise VocabError(f"{path}: cannot read: {e}") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise VocabError(f"{path}: not valid JSON: {e}") from e


def parse_added_tokens(doc: dict, path) -> list[tuple[str, str, int, list[str]]]:
    """tokenizer.json's added_tokens as (where, content, id, matching flags it sets: lstrip,
    rstrip, single_word), each an object with a string content and a valid id, no content
    added twice with different ids."""
    out: list[tuple[str, str, int, list[str]]] = []
    seen: dict[str, int] = {}
    for k, entry in enumerate(doc.get("added_tokens") or []):
        at = f"{path}: added_tokens[{k}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("content"), str):
            raise VocabError(f"{at}: expected an object with a string 'content'")
        text, token_id = entry["content"], check_id(at, entry.get("id"))
        if seen.setdefault(text, token_id) != token_id:
            raise VocabError(f"{at}: {text!r} is also added with id {seen[text]}")
        out.append((at, text, token_id, [f for f in ("lstrip", "rstrip", "single_word") if entry.get(f)]))
    return out


def parse_hf_merges(
    path, merges_json: list, vocab_json: dict, prefix_len: int = 0
) -> dict[tuple[int, int], tuple[int, int]]:
    """model.merges of a tokenizer.json: (left id, right id) -> (rank = list index, merged id);
    a pair listed twice takes its last rank, as in HF."""

    def bad(rank: int, problem: str) -> VocabError:  # (spelled only for a bad merge: 100-200k a file)
        return VocabError(f"{path}: model.merges[{rank}]: {problem}")

    merges: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, merge in enumerate(merges_json):
        if isinstance(merge, str):
            parts = merge.split(" ")
        elif isinstance(merge, list) and all(isinstance(p, str) for p in merge):
            parts = merge
        else:
            raise bad(rank, f'expected "a b" or [a, b], got {merge!r}')
        if len(parts) != 2:
            raise bad(rank, f"expected two tokens, got {merge!r}")
        left, right = parts
        left_id, right_id = vocab_json.get(left), vocab_json.get(right)
        if left_id is None or right_id is None:
            raise bad(rank, f"merge {merge!r} refers to unknown token {left if left_id is None else right!r}")
        merged = vocab_json.get(left + right[prefix_len:])
        if merged is None:
            raise bad(rank, f"merge result {left + right[prefix_len:]!r} is not in model.vocab")
        merges[(left_id, right_id)] = (rank, merged)
    return merges
