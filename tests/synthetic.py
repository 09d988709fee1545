"""Small synthetic vocabulary files and HF pre-tokenizer configurations, for the loader's and
the pre-tokenizer compiler's tests."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest

from blockbpe_jax.vocab import bytes_to_unicode


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


def tiktoken_lines() -> list[str]:
    """A valid small tiktoken file: the 256 bytes, then 'ab' (256), 'abc' (257), 'bc' (258)."""
    lines = [f"{b64(bytes([b]))} {b}" for b in range(256)]
    lines += [f"{b64(b'ab')} 256", f"{b64(b'abc')} 257", f"{b64(b'bc')} 258"]
    return lines


def write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def tokenizer_json_doc(**overrides) -> dict:
    """A valid small byte-level BPE tokenizer.json (GPT-2 style), as a dict to tweak."""
    u = bytes_to_unicode()
    vocab = {u[b]: b for b in range(256)}
    vocab.update({"ab": 256, "abc": 257, "bc": 258})
    doc = {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": 259,
                "content": "<|end|>",
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": None,
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": ["a b", "ab c", "b c"],
        },
    }
    doc.update(overrides)
    return doc


def write_json(path: Path, doc) -> Path:
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------------------------
# HF pre_tokenizer pieces, and the shared GPT-2 tokenizer.json to put them in
# ---------------------------------------------------------------------------------------------

BYTE_LEVEL = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False}
BYTE_LEVEL_REGEX = dict(BYTE_LEVEL, use_regex=True)


def split(regex, behavior="Isolated", invert=False, string=False):
    return {
        "type": "Split",
        "pattern": {"String" if string else "Regex": regex},
        "behavior": behavior,
        "invert": invert,
    }


def pre_tokenizer(steps: list[dict]) -> dict:
    """One step as itself, several as a Sequence."""
    return steps[0] if len(steps) == 1 else {"type": "Sequence", "pretokenizers": steps}


def split_then_bytelevel(pattern: str, behavior: str = "Isolated", invert: bool = False) -> dict:
    return pre_tokenizer([split(pattern, behavior, invert), BYTE_LEVEL])


def gpt2_doc(data_dir: Path) -> dict:
    path = data_dir / "vocab" / "gpt2" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    return json.loads(path.read_bytes())
