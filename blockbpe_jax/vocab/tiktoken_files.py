"""tiktoken-format vocabularies: `.tiktoken` / Llama 3 `tokenizer.model` files and tiktoken
`Encoding` objects."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
from pathlib import Path
from typing import Mapping

import numpy as np

from ..disk_cache import kept_npz
from .model import MAX_TOKEN_ID, Vocab, VocabError, _check_id, _vocab_from_ranks
from .patterns import KNOWN_PATTERNS


# Meta Llama 3 (8B / 70B, Instruct): 256 specials from id 128000, in this order. Llama 3.1+
# renamed some reserved slots, but the shared tokenizer.json (Meta-Llama-3-8B-Instruct) has
# exactly these; tests check that the two agree.
LLAMA3_SPECIAL_TOKENS: tuple[str, ...] = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|reserved_special_token_2|>",
    "<|reserved_special_token_3|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|reserved_special_token_4|>",
    "<|eot_id|>",
    *(f"<|reserved_special_token_{i}|>" for i in range(5, 251)),
)
assert len(LLAMA3_SPECIAL_TOKENS) == 256

_ENDOFTEXT = "<|endoftext|>"
_CL100K_SPECIALS = {
    _ENDOFTEXT: 100257,
    "<|fim_prefix|>": 100258,
    "<|fim_middle|>": 100259,
    "<|fim_suffix|>": 100260,
    "<|endofprompt|>": 100276,
}


def known_tiktoken_file_defaults(filename: str | os.PathLike) -> tuple[str, str | None, dict[str, int]]:
    """(name, pattern, special_tokens) for a known tiktoken-format file, judged by its base name.

    Known: r50k_base / p50k_base / cl100k_base / o200k_base ``.tiktoken`` (as tiktoken_ext.
    openai_public defines them) and Llama 3's ``tokenizer.model``. Otherwise (stem, None, {}).
    """
    base = Path(filename).name
    known = {
        "r50k_base.tiktoken": ("r50k_base", KNOWN_PATTERNS["r50k"], {_ENDOFTEXT: 50256}),
        "p50k_base.tiktoken": ("p50k_base", KNOWN_PATTERNS["r50k"], {_ENDOFTEXT: 50256}),
        "cl100k_base.tiktoken": ("cl100k_base", KNOWN_PATTERNS["cl100k"], dict(_CL100K_SPECIALS)),
        "o200k_base.tiktoken": (
            "o200k_base",
            KNOWN_PATTERNS["o200k"],
            {_ENDOFTEXT: 199999, "<|endofprompt|>": 200018},
        ),
        "tokenizer.model": (
            "llama3",
            KNOWN_PATTERNS["llama3"],
            {text: 128000 + i for i, text in enumerate(LLAMA3_SPECIAL_TOKENS)},
        ),
    }
    if base in known:
        name, pattern, specials = known[base]
        return name, pattern, dict(specials)
    return Path(filename).stem, None, {}


def load_tiktoken_file(
    path: str | os.PathLike,
    *,
    name: str | None = None,
    special_tokens: Mapping[str, int] | None = None,
    pattern: str | None = None,
) -> Vocab:
    """Load a tiktoken-format file: one ``<base64 token> <rank>`` per line.

    Ranks need not be dense (unused ids become holes). Blank lines are ignored, as tiktoken
    does. Arguments left as None take known_tiktoken_file_defaults(path) (the file's base name
    decides); pass ``special_tokens={}`` for no specials.
    """
    path = Path(path)
    default_name, default_pattern, default_specials = known_tiktoken_file_defaults(path)
    try:
        contents = path.read_bytes()
    except OSError as e:
        raise VocabError(f"{path}: cannot read: {e}") from e
    if contents[:4] == b"GGUF":
        raise VocabError(f"{path}: a GGUF file; reading vocabularies from GGUF is not supported")
    if contents[:1] == b"\n" and "\u2581".encode() in contents[:65536]:
        raise VocabError(
            f"{path}: a SentencePiece model (protobuf); SentencePiece BPE "
            f"(merges over characters, byte fallback) is not supported yet"
        )

    ranks = _ranks(contents, path)
    if not ranks:
        raise VocabError(f"{path}: file is empty (no tokens)")

    return _vocab_from_ranks(
        ranks=ranks,
        where=str(path),
        name=name if name is not None else default_name,
        special_tokens=special_tokens if special_tokens is not None else default_specials,
        pattern=pattern if pattern is not None else default_pattern,
        source=str(path),
    )


def from_tiktoken_encoding(enc) -> Vocab:
    """Build a Vocab from a ``tiktoken.Encoding`` (its mergeable ranks, specials and pattern)."""
    where = f"tiktoken.Encoding({enc.name!r})"
    ranks: dict[bytes, int] = dict(enc._mergeable_ranks)
    seen: dict[int, bytes] = {}
    for token, rank in ranks.items():
        _check_id(lambda token=token: f"{where}: token {token!r}", rank)
        if rank in seen:
            raise VocabError(f"{where}: tokens {seen[rank]!r} and {token!r} share rank {rank}")
        seen[rank] = token
    return _vocab_from_ranks(
        ranks=ranks,
        where=where,
        name=enc.name,
        special_tokens=dict(enc._special_tokens),
        pattern=enc._pat_str,
        source=where,
    )


def _ranks(contents: bytes, path: Path) -> dict[bytes, int]:
    """The rank file's tokens and ranks: from the disk cache (ranks/, keyed by the file's
    bytes and this parser's source) when it holds them, else parsed line by line and kept
    (the line loop over 100-200k lines is most of a start-up's vocabulary load)."""
    h = hashlib.sha256(_parser_digest())
    h.update(contents)
    return kept_npz(
        "ranks",
        h.hexdigest()[:32],
        lambda: _ranks_by_line(contents, path),
        to_arrays=lambda ranks: dict(
            tokens=np.frombuffer(b"".join(ranks), np.uint8),
            ends=np.cumsum([len(t) for t in ranks], dtype=np.int64),
            ranks=np.fromiter(ranks.values(), np.int64, len(ranks)),
        ),
        from_arrays=_ranks_of_arrays,
    )


def _ranks_of_arrays(z) -> dict[bytes, int]:
    blob, ends = z["tokens"].tobytes(), z["ends"].tolist()
    starts = [0, *ends[:-1]]
    return dict(zip([blob[a:b] for a, b in zip(starts, ends)], z["ranks"].tolist()))


@functools.lru_cache(maxsize=1)
def _parser_digest() -> bytes:
    return hashlib.sha256(Path(__file__).read_bytes()).digest()


def _ranks_by_line(contents: bytes, path: Path) -> dict[bytes, int]:
    """Every line's token and rank, each rule checked, the first line that breaks one named
    (VocabError)."""
    ranks: dict[bytes, int] = {}
    line_of_token: dict[bytes, int] = {}  # only consulted to word a duplicate error
    line_of_rank: dict[int, int] = {}
    for line_no, line in enumerate(contents.split(b"\n"), start=1):
        line = line.rstrip(b"\r")
        if not line.strip():
            continue
        fields = line.split(b" ")
        if len(fields) != 2 or not fields[0] or not fields[1]:
            raise VocabError(f"{path}:{line_no}: expected '<base64 token> <rank>', got {line[:80]!r}")
        token_b64, rank_text = fields
        try:
            token = base64.b64decode(token_b64, validate=True)
        except (binascii.Error, ValueError):
            raise VocabError(f"{path}:{line_no}: token {token_b64[:80]!r} is not valid base64") from None
        if not token:
            raise VocabError(f"{path}:{line_no}: empty token")
        if not rank_text.isdigit():  # bytes.isdigit: ASCII digits only, no sign, no spaces
            raise VocabError(f"{path}:{line_no}: rank {rank_text[:40]!r} is not a non-negative integer")
        rank = int(rank_text)
        if rank > MAX_TOKEN_ID:
            raise VocabError(f"{path}:{line_no}: rank {rank} exceeds {MAX_TOKEN_ID}")
        if token in ranks:
            raise VocabError(
                f"{path}:{line_no}: duplicate token {token!r} (first on line {line_of_token[token]})"
            )
        if rank in line_of_rank:
            raise VocabError(f"{path}:{line_no}: duplicate rank {rank} (first on line {line_of_rank[rank]})")
        ranks[token] = rank
        line_of_token[token] = line_no
        line_of_rank[rank] = line_no
    return ranks
