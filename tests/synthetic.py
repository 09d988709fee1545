"""Small synthetic vocabulary files (tiktoken, tokenizer.json, GGUF) and HF pre-tokenizer
configurations, for the loaders', the pre-tokenizer compiler's and the encoders' tests."""

from __future__ import annotations

import base64
import json
import struct
from pathlib import Path

import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import testing
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


def bpe_json_doc(
    vocab: dict, merges: list, pre_tokenizer: dict, added_tokens=(), normalizer=None, **model
) -> dict:
    """A BPE tokenizer.json as a dict: the given vocabulary, merges, pre-tokenizer and normalizer
    (none by default); `model` sets BPE options (e.g. ignore_merges=True, byte_fallback=True)."""
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": list(added_tokens),
        "normalizer": normalizer,
        "pre_tokenizer": pre_tokenizer,
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
            **model,
            "vocab": vocab,
            "merges": merges,
        },
    }


def tokenizer_json_doc(**overrides) -> dict:
    """A valid small byte-level BPE tokenizer.json (GPT-2 style), as a dict to tweak."""
    u = bytes_to_unicode()
    vocab = {u[b]: b for b in range(256)}
    vocab.update({"ab": 256, "abc": 257, "bc": 258})
    end = {"id": 259, "content": "<|end|>", "single_word": False, "lstrip": False, "rstrip": False}
    doc = bpe_json_doc(
        vocab,
        ["a b", "ab c", "b c"],
        {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        added_tokens=[dict(end, normalized=False, special=True)],
    )
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


def nfc_tokenizer(data_dir):
    """(ours, HF's) for llama3's vocabulary with an NFC normalizer and Qwen2's split."""
    from tokenizers import Tokenizer

    path = data_dir / "vocab" / "llama3" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = {"type": "NFC"}
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [split(testing.QWEN2_PATTERN), BYTE_LEVEL]}
    hf = Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


# GGUF files as llama.cpp writes them (blockbpe_jax/vocab/gguf.py reads them)


def _gguf_string(s: str) -> bytes:
    b = s.encode("utf-8")
    return struct.pack("<Q", len(b)) + b


def _gguf_value(v) -> tuple[int, bytes]:
    if isinstance(v, bool):
        return 7, struct.pack("<B", v)
    if isinstance(v, int):
        return 4, struct.pack("<I", v)
    if isinstance(v, str):
        return 8, _gguf_string(v)
    if isinstance(v, np.ndarray):
        kind = {np.dtype("<f4"): 6, np.dtype("<i4"): 5}[v.dtype]
        return 9, struct.pack("<IQ", kind, v.size) + v.tobytes()
    return 9, struct.pack("<IQ", 8, len(v)) + b"".join(_gguf_string(s) for s in v)


def gguf_bytes(meta: dict, version: int = 3) -> bytes:
    out = [b"GGUF", struct.pack("<IQQ", version, 0, len(meta))]
    for key, value in meta.items():
        kind, raw = _gguf_value(value)
        out += [_gguf_string(key), struct.pack("<I", kind), raw]
    return b"".join(out)


def tiny_spm(**extra) -> dict:
    """A SentencePiece BPE vocabulary as llama.cpp stores it ("llama"): a few pieces, scores,
    types; user-defined `  ` (llama.cpp writes their `▁` as spaces)."""
    pieces = [("<unk>", 0.0, 2), ("<s>", 0.0, 3), ("</s>", 0.0, 3)]
    pieces += [(f"<0x{b:02X}>", 0.0, 6) for b in range(256)]
    pieces += [
        (p, -float(k), 1)
        for k, p in enumerate(
            ["\u2581", "a", "b", ">", "<", "/", "\u2581a", "ab", "\u2581ab", ">\u2581", ">\u2581<"]
        )
    ]
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": [p for p, _, _ in pieces],
        "tokenizer.ggml.scores": np.asarray([s for _, s, _ in pieces], "<f4"),
        "tokenizer.ggml.token_type": np.asarray([t for _, _, t in pieces], "<i4"),
        "tokenizer.ggml.unknown_token_id": 0,
    }
    meta.update(extra)
    return meta


def spm_model(pieces: list[str]):
    """A SentencePiece BPE model with byte fallback: <unk>, <s>, </s>, the 256 byte pieces, then
    `pieces` (normal), each scoring above the ones after it; the dummy prefix, spaces as `▁`."""
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as model_pb2

    m = model_pb2.ModelProto()
    m.trainer_spec.model_type = model_pb2.TrainerSpec.BPE
    m.trainer_spec.byte_fallback = True
    m.normalizer_spec.name = "identity"
    m.normalizer_spec.add_dummy_prefix = True
    m.normalizer_spec.remove_extra_whitespaces = False
    m.normalizer_spec.escape_whitespaces = True
    kinds = model_pb2.ModelProto.SentencePiece
    for text, kind in [("<unk>", kinds.UNKNOWN), ("<s>", kinds.CONTROL), ("</s>", kinds.CONTROL)]:
        m.pieces.add(piece=text, score=0.0, type=kind)
    for b in range(256):
        m.pieces.add(piece=f"<0x{b:02X}>", score=0.0, type=kinds.BYTE)
    for k, text in enumerate(pieces):
        m.pieces.add(piece=text, score=-float(k), type=kinds.NORMAL)
    return spm.SentencePieceProcessor(model_proto=m.SerializeToString())
