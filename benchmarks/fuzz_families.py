"""The fuzz campaign's tokenizer families (benchmarks/fuzz_campaign.py): each family's
tokenizer, its reference library, and the variants its strings are checked in.

A variant is a share of the strings with how they are made and encoded (mode, allowed specials,
invalid UTF-8 or not) and the reference's batch encoder for them. The shared vocabularies from
their .tiktoken files are checked in every variant against tiktoken (with the real pattern;
`(?s:.+)` for bytes mode); their tokenizer.json HF ports against HF tokenizers (which always
recognises its added tokens: every special allowed) and, in bytes mode, against tiktoken on the
same ranks. Invalid UTF-8 as tests/fuzz/test_fuzz_invalid_utf8.py compares it: the reference
splits the private-use view of the bytes and encodes each piece's raw bytes
(blockbpe_jax.testing tiktoken_raw_ids, hf_raw_ids). The families benchmarks/families.py builds
or finds: exact mode on valid text against the reference it names, the specials' text as that
reference treats it (HF: recognised, so allowed; the others: ordinary text).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import pathlib
import sys
from typing import Callable

import blockbpe_jax as bb
from blockbpe_jax import testing

HERE = pathlib.Path(__file__).resolve().parent

# families.py's families by campaign key (benchmarks/families.py: label -> tokenizer, reference)
OTHER_FAMILIES = {
    "qwen2": "Qwen2 split, no normalizer",
    "qwen2_nfc": "Qwen2 split + NFC",
    "lowercase": "Lowercase (cl100k tokenizer.json)",
    "deepseek_v3": "DeepSeek-V3",
    "tekken": "Mistral Tekken",
    "mistral_v1_spm": "Mistral v1 SentencePiece",
    "mistral_v7_spm": "Mistral v7 SentencePiece",
    "llama2_gguf": "Llama 2 (GGUF)",
    "gemma3_gguf": "Gemma 3 (GGUF)",
    "gemma4_gguf": "Gemma 4 (GGUF)",
}
TIKTOKEN_FAMILIES = ("r50k", "cl100k", "o200k", "llama3")
HF_FAMILIES = {"gpt2_hf": "r50k", "cl100k_hf": "cl100k", "o200k_hf": "o200k", "llama3_hf": "llama3"}
FAMILY_KEYS = [*TIKTOKEN_FAMILIES, *HF_FAMILIES, *OTHER_FAMILIES]


def bench_families():
    """benchmarks/families.py, imported under another name: tests/families.py (which it imports
    for the GGUF families) is the module named `families`."""
    name = "benchmark_families"
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, HERE / "families.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


@dataclasses.dataclass(frozen=True)
class Variant:
    """How a share of a family's strings is generated, encoded and checked."""

    name: str
    share: float
    mode: str  # "exact" | "bytes"
    allowed: object  # "none" | "all" | frozenset of special tokens
    invalid: bool  # the strings carry invalid UTF-8
    reference: Callable[[list[bytes]], list[list[int]]]


@dataclasses.dataclass
class Family:
    key: str
    tok: bb.Tokenizer
    reference: str
    variants: list[Variant]

    @property
    def specials(self) -> list[str]:
        return sorted(self.tok.vocab.special_tokens)


def _texts(batch: list[bytes]) -> list[str]:
    return [b.decode("utf-8") for b in batch]


def bytes_mode_variants(enc_bytes, specials: list[str], threads: int | None = None) -> list[Variant]:
    """The paper's bytes mode, valid and invalid UTF-8, against tiktoken `(?s:.+)` on the
    family's ranks (`enc_bytes`; `threads`: its reference threads, None: tiktoken's default)."""
    kw = {} if threads is None else {"num_threads": threads}
    return [
        Variant(
            "bytes/all",
            0.08,
            "bytes",
            "all",
            False,
            lambda b: enc_bytes.encode_batch(_texts(b), allowed_special="all", **kw),
        ),
        Variant(
            "bytes/invalid_utf8",
            0.07,
            "bytes",
            "all",
            True,
            lambda b: [testing.tiktoken_raw_ids(enc_bytes, s, specials) for s in b],
        ),
    ]


def tiktoken_family(root: pathlib.Path, name: str, threads: int) -> Family:
    """A .tiktoken vocabulary against tiktoken (its pattern; `(?s:.+)` for bytes mode)."""
    tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES[name][0])
    enc = testing.tiktoken_oracle(name, tok, tok.vocab.pattern)
    enc_bytes = testing.tiktoken_oracle(name, tok, testing.BYTES_MODE_PATTERN)
    specials = sorted(tok.vocab.special_tokens)
    subset = frozenset(specials[::2])
    return Family(
        name,
        tok,
        "tiktoken",
        [
            Variant(
                "exact/none",
                0.42,
                "exact",
                "none",
                False,
                lambda b: enc.encode_ordinary_batch(_texts(b), num_threads=threads),
            ),
            Variant(
                "exact/all",
                0.25,
                "exact",
                "all",
                False,
                lambda b: enc.encode_batch(_texts(b), num_threads=threads, allowed_special="all"),
            ),
            Variant(
                "exact/subset",
                0.15,
                "exact",
                subset,
                False,
                lambda b: enc.encode_batch(
                    _texts(b), num_threads=threads, allowed_special=subset, disallowed_special=()
                ),
            ),
            Variant(
                "exact/invalid_utf8",
                0.03,
                "exact",
                "all",
                True,
                lambda b: [testing.tiktoken_raw_ids(enc, s, specials) for s in b],
            ),
            *bytes_mode_variants(enc_bytes, specials, threads),
        ],
    )


def hf_family(root: pathlib.Path, key: str, threads: int | None = None) -> Family:
    """A shared tokenizer.json against HF tokenizers (which always recognises its added tokens,
    so every special is allowed; its own threads: RAYON_NUM_THREADS); bytes mode against
    tiktoken `(?s:.+)` on the same ranks with `threads` (None: tiktoken's default)."""
    from tokenizers import Tokenizer

    name = HF_FAMILIES[key]
    path = root / "vocab" / testing.VOCAB_FILES[name][1]
    tok = bb.Tokenizer.from_file(path)
    hf = Tokenizer.from_file(str(path))
    enc_bytes = testing.tiktoken_oracle(name, tok, testing.BYTES_MODE_PATTERN)
    specials = sorted(tok.vocab.special_tokens)
    special_ids = set(tok.vocab.special_tokens.values())
    return Family(
        key,
        tok,
        "HF tokenizers",
        [
            Variant(
                "exact/all",
                0.82,
                "exact",
                "all",
                False,
                lambda b: [e.ids for e in hf.encode_batch(_texts(b), add_special_tokens=False)],
            ),
            Variant(
                "exact/invalid_utf8",
                0.03,
                "exact",
                "all",
                True,
                lambda b: [testing.hf_raw_ids(hf, special_ids, s, "exact") for s in b],
            ),
            *bytes_mode_variants(enc_bytes, specials, threads),
        ],
    )


def other_family(root: pathlib.Path, key: str) -> Family | None:
    """One of benchmarks/families.py's families (None where its files are not there): exact
    mode on valid text against the reference families.py names."""
    label = OTHER_FAMILIES[key]
    found = [f for f in bench_families().families(root, label) if f[0] == label]
    if not found:
        return None
    _, tok, _, ref_name, ref = found[0]
    allowed = "all" if ref_name == "HF tokenizers" else "none"
    return Family(
        key,
        tok,
        ref_name,
        [Variant(f"exact/{allowed}", 1.0, "exact", allowed, False, lambda b: ref(_texts(b)))],
    )


def load_family(root: pathlib.Path, key: str, threads: int) -> Family | None:
    """Family `key` (None where its files or packages are not there); `threads`: tiktoken's
    threads per reference call."""
    if key in TIKTOKEN_FAMILIES:
        return tiktoken_family(root, key, threads)
    if key in HF_FAMILIES:
        return hf_family(root, key, threads)
    return other_family(root, key)
