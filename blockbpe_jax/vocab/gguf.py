"""Tokenizers stored in GGUF files (llama.cpp's model format: Llama 2, Gemma 3, Gemma 4, ...).

A GGUF file starts with a key/value header; the tokenizer is the `tokenizer.ggml.*` keys. Only
the header is read (memory-mapped), so a file cut after its header (a model split into chunks,
such as the Gemma 3 wheel of docs/families.md) loads too. Two tokenizer models are supported,
each built by the loader of its own format so that one code path follows the parsing:

* `llama` (llama.cpp's SPM: Llama 2, Gemma 3): a SentencePiece BPE model (tokens, scores,
  types), built by sentencepiece.vocab_from_spm_model. GGUF does not store the normalizer
  options; they follow llama.cpp's rules for this model type: `add_dummy_prefix` is
  `tokenizer.ggml.add_space_prefix` (default true; Gemma's GGUFs store false),
  `remove_extra_whitespaces` is `tokenizer.ggml.remove_extra_whitespaces` (default false),
  the normalizer is the identity and spaces are escaped as `▁`. llama.cpp writes user-defined
  pieces with spaces where the model has `▁` (Gemma's whitespace runs); they are turned back.
* `gemma4` (llama.cpp's BPE with merges over `▁`-escaped text: Gemma 4): HF's BPE with
  byte_fallback, normalizer Replace(' ', '▁'), no dummy prefix, built by
  vocab.char_bpe.vocab_from_hf_json from the same description a tokenizer.json holds; control
  tokens are special tokens matched when allowed, user-defined ones are always matched.

Anything else (byte-level `gpt2` vocabularies with a named pre-tokenizer, Unigram `t5`, WPM,
RWKV, ...) is refused with a message naming the model type.
"""

from __future__ import annotations

import dataclasses
import mmap
import os
import struct
from pathlib import Path

import numpy as np

from .model import Vocab, VocabError

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 had 32-bit counts (and no file of it is in use)
SUPPORTED_MODELS = ("llama", "gemma4")

# GGUF value types (ggml/include/gguf.h): numbers as little-endian numpy dtypes.
_NUMBERS = {
    0: "<u1",
    1: "<i1",
    2: "<u2",
    3: "<i2",
    4: "<u4",
    5: "<i4",
    6: "<f4",
    7: "<u1",
    10: "<u8",
    11: "<i8",
    12: "<f8",
}
_STRING, _ARRAY, _BOOL = 8, 9, 7

# llama.cpp's token types (llama_token_type; the same numbers as SentencePiece's piece types).
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6


def is_gguf(head: bytes) -> bool:
    return head[:4] == MAGIC


class _Reader:
    def __init__(self, buf, where: str):
        self.buf, self.where, self.at = buf, where, 0

    def need(self, size: int, what: str):
        if self.at + size > len(self.buf):
            raise VocabError(
                f"{self.where}: truncated GGUF header ({what} at byte {self.at} needs "
                f"{size} bytes, the file has {len(self.buf)})"
            )

    def unpack(self, fmt: str, what: str):
        size = struct.calcsize(fmt)
        self.need(size, what)
        out = struct.unpack_from(fmt, self.buf, self.at)
        self.at += size
        return out

    def string(self, what: str) -> str:
        (n,) = self.unpack("<Q", what)
        self.need(n, what)
        raw = bytes(self.buf[self.at : self.at + n])
        self.at += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise VocabError(f"{self.where}: {what} is not valid UTF-8") from None

    def value(self, kind: int, what: str):
        if kind == _STRING:
            return self.string(what)
        if kind == _ARRAY:
            inner, n = self.unpack("<IQ", what)
            if inner in _NUMBERS:
                dtype = np.dtype(_NUMBERS[inner])
                self.need(n * dtype.itemsize, what)
                a = np.frombuffer(self.buf, dtype, n, self.at).copy()
                self.at += a.nbytes
                return a.astype(bool) if inner == _BOOL else a
            return [self.value(inner, f"{what}[{k}]") for k in range(n)]
        if kind not in _NUMBERS:
            raise VocabError(f"{self.where}: {what}: unknown GGUF value type {kind}")
        dtype = np.dtype(_NUMBERS[kind])
        self.need(dtype.itemsize, what)
        v = np.frombuffer(self.buf, dtype, 1, self.at)[0].item()
        self.at += dtype.itemsize
        return bool(v) if kind == _BOOL else v


def gguf_metadata(path: str | os.PathLike) -> dict:
    """The key/value header of a GGUF file: strings and numbers as Python values, arrays of
    numbers as numpy arrays, arrays of strings as lists. Reads only the header."""
    return _read_header(path)[0]


def header_size(path: str | os.PathLike) -> int:
    """Bytes of the file up to the end of its key/value header: a copy of that prefix loads
    as the whole file does (the tokenizer without the tensors)."""
    return _read_header(path)[1]


def _read_header(path: str | os.PathLike) -> tuple[dict, int]:
    where = str(path)
    try:
        with open(path, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            buf = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if size else b""
    except OSError as e:
        raise VocabError(f"{where}: cannot read: {e}") from e
    try:
        if buf[:4] != MAGIC:
            raise VocabError(f"{where}: not a GGUF file (magic {bytes(buf[:4])!r}, expected {MAGIC!r})")
        r = _Reader(buf, where)
        r.at = 4
        (version,) = r.unpack("<I", "version")
        if version not in VERSIONS:
            raise VocabError(
                f"{where}: GGUF version {version} is not supported (only {', '.join(map(str, VERSIONS))})"
            )
        _, n_kv = r.unpack("<QQ", "tensor and key counts")
        meta: dict = {}
        for k in range(n_kv):
            key = r.string(f"key {k}")
            (kind,) = r.unpack("<I", f"type of {key}")
            meta[key] = r.value(kind, key)
        return meta, r.at
    finally:
        if isinstance(buf, mmap.mmap):
            buf.close()


def _get(meta: dict, key: str, where: str, kind: type | tuple):
    if key not in meta:
        raise VocabError(f"{where}: missing key {key}")
    value = meta[key]
    if not isinstance(value, kind):
        raise VocabError(f"{where}: {key} has the wrong type ({type(value).__name__})")
    return value


def load_gguf(path: str | os.PathLike) -> Vocab:
    """The Vocab of a GGUF file's tokenizer (see the module docstring)."""
    where = str(path)
    meta = gguf_metadata(path)
    model = _get(meta, "tokenizer.ggml.model", where, str)
    if model not in SUPPORTED_MODELS:
        raise VocabError(
            f"{where}: tokenizer.ggml.model {model!r} is not supported from GGUF "
            f"(only {', '.join(map(repr, SUPPORTED_MODELS))}: SentencePiece-style BPE)"
        )
    tokens = _get(meta, "tokenizer.ggml.tokens", where, list)
    types = _get(meta, "tokenizer.ggml.token_type", where, np.ndarray).tolist()
    if len(types) != len(tokens):
        raise VocabError(
            f"{where}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens"
        )
    if BYTE not in types:
        raise VocabError(
            f"{where}: no BYTE tokens <0x00>..<0xFF>: models without byte fallback are not supported"
        )
    name = Path(path).name
    unk = meta.get("tokenizer.ggml.unknown_token_id")
    if model == "llama":
        return _spm_vocab(meta, tokens, types, unk, where, name)
    return _gemma4_vocab(meta, tokens, types, where, name)


def _spm_vocab(meta: dict, tokens: list, types: list, unk, where: str, name: str) -> Vocab:
    from .sentencepiece import SpmModel, vocab_from_spm_model

    scores = _get(meta, "tokenizer.ggml.scores", where, np.ndarray).tolist()
    if len(scores) != len(tokens):
        raise VocabError(f"{where}: tokenizer.ggml.scores has {len(scores)} entries for {len(tokens)} tokens")
    pieces = []
    for i, (tok, kind, score) in enumerate(zip(tokens, types, scores)):
        if kind == USER_DEFINED:
            tok = tok.replace(" ", "\u2581")
        pieces.append((tok, float(score), UNKNOWN if i == unk else kind))
    spm = SpmModel(
        pieces=pieces,
        add_dummy_prefix=bool(meta.get("tokenizer.ggml.add_space_prefix", True)),
        remove_extra_whitespaces=bool(meta.get("tokenizer.ggml.remove_extra_whitespaces", False)),
    )
    return vocab_from_spm_model(spm, where, name)


def _gemma4_vocab(meta: dict, tokens: list, types: list, where: str, name: str) -> Vocab:
    from .char_bpe import SPACE, vocab_from_hf_json

    merges = _get(meta, "tokenizer.ggml.merges", where, list)
    if meta.get("tokenizer.ggml.add_space_prefix", False):
        raise VocabError(
            f"{where}: tokenizer.ggml.add_space_prefix is not supported with tokenizer.ggml.model 'gemma4'"
        )
    added = [
        {"id": i, "content": t, "special": k == CONTROL}
        for i, (t, k) in enumerate(zip(tokens, types))
        if k in (CONTROL, USER_DEFINED)
    ]
    doc = {
        "model": {
            "type": "BPE",
            "vocab": {t: i for i, t in enumerate(tokens)},
            "merges": merges,
            "byte_fallback": True,
        },
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
        "added_tokens": added,
    }
    vocab = vocab_from_hf_json(doc, where)
    user_defined = tuple(t for t, k in zip(tokens, types) if k == USER_DEFINED)
    return dataclasses.replace(vocab, name=name, always_special=user_defined)
