"""tiktoken-format vocabularies: `.tiktoken` / Llama 3 `tokenizer.model` files and tiktoken
`Encoding` objects."""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import os
from pathlib import Path
from types import MappingProxyType
from typing import Mapping, NamedTuple

import numpy as np

from ..disk_cache import kept_npz
from .model import MAX_TOKEN_ID, Vocab, VocabError, check_id, vocab_from_ranks
from .patterns import KNOWN_PATTERNS, pattern_of


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


class KnownFile(NamedTuple):
    """What a known tiktoken-format file's bytes stand for."""

    file_name: str  # the name its publisher gives it
    name: str  # the encoding's name (Vocab.name)
    pattern: str
    special_tokens: Mapping[str, int]  # (read-only: a copy for each Vocab)


def _known(file_name: str, name: str, pattern: str, specials: Mapping[str, int]) -> KnownFile:
    return KnownFile(file_name, name, KNOWN_PATTERNS[pattern], MappingProxyType(dict(specials)))


# Known tiktoken-format files by the sha256 of their bytes: the four .tiktoken files with the
# expected_hash tiktoken_ext/openai_public.py checks each download against (p50k_edit shares
# p50k_base's file; gpt2 is not a .tiktoken file), and Meta's Llama 3 tokenizer.model (the
# sha256 Meta publishes for Llama 3's original/tokenizer.model; llama-models ships the same).
# tests/vocab/test_vocab_by_content.py checks the tiktoken ones against tiktoken_ext.
KNOWN_TIKTOKEN_FILES: Mapping[str, KnownFile] = MappingProxyType(
    {
        "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930": _known(
            "r50k_base.tiktoken", "r50k_base", "r50k", {_ENDOFTEXT: 50256}
        ),
        "94b5ca7dff4d00767bc256fdd1b27e5b17361d7b8a5f968547f9f23eb70d2069": _known(
            "p50k_base.tiktoken", "p50k_base", "r50k", {_ENDOFTEXT: 50256}
        ),
        "223921b76ee99bde995b7ff738513eef100fb51d18c93597a113bcffe865b2a7": _known(
            "cl100k_base.tiktoken", "cl100k_base", "cl100k", _CL100K_SPECIALS
        ),
        "446a9538cb6c348e3516120d7c08b09f57c36495e2acfffe59a5bf8b0cfb1a2d": _known(
            "o200k_base.tiktoken", "o200k_base", "o200k", {_ENDOFTEXT: 199999, "<|endofprompt|>": 200018}
        ),
        "82e9d31979e92ab929cd544440f129d9ecd797b69e327f80f17e1c50d5551b55": _known(
            "tokenizer.model",
            "llama3",
            "llama3",
            {text: 128000 + i for i, text in enumerate(LLAMA3_SPECIAL_TOKENS)},
        ),
    }
)


def known_tiktoken_contents(digest: str | bytes) -> tuple[str, str, dict[str, int]] | None:
    """(name, pattern, special_tokens) of the known file whose bytes have this sha256 (hex
    string or raw digest), or None."""
    known = KNOWN_TIKTOKEN_FILES.get(digest.hex() if isinstance(digest, bytes) else digest)
    return None if known is None else (known.name, known.pattern, dict(known.special_tokens))


def known_tiktoken_file_defaults(filename: str | os.PathLike) -> tuple[str, str | None, dict[str, int]]:
    """(name, pattern, special_tokens) of the known file that its publisher names as
    `filename`'s base name (r50k_base / p50k_base / cl100k_base / o200k_base ``.tiktoken``,
    Llama 3's ``tokenizer.model``); otherwise (stem, None, {}). A lookup by name only:
    `load_tiktoken_file` goes by the file's contents (`known_tiktoken_contents`), not its name.
    """
    base = Path(filename).name
    for known in KNOWN_TIKTOKEN_FILES.values():
        if known.file_name == base:
            return known.name, known.pattern, dict(known.special_tokens)
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
    does. A file is known by its contents (the sha256 of its bytes, `KNOWN_TIKTOKEN_FILES`:
    tiktoken's files and Llama 3's rank file under any name, tiktoken's cache files among them),
    which gives the arguments left as None (name, special_tokens, pattern); an unknown file
    gets its stem, no specials and no pattern (exact mode then needs `pattern`). Pass
    ``special_tokens={}`` for no specials. `pattern`: a regex, or a known pattern's name
    (`KNOWN_PATTERNS`: "cl100k", "o200k", "r50k", "llama3"; or an encoding's, "cl100k_base").
    """
    path = Path(path)
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
    digest = hashlib.sha256(contents).digest()  # (the file's one pass of hashing: both uses)
    default_name, default_pattern, default_specials = known_tiktoken_contents(digest) or (path.stem, None, {})

    ranks = _ranks(contents, digest, path)
    if not ranks:
        raise VocabError(f"{path}: file is empty (no tokens)")

    return vocab_from_ranks(
        ranks=ranks,
        where=str(path),
        name=name if name is not None else default_name,
        special_tokens=special_tokens if special_tokens is not None else default_specials,
        pattern=pattern_of(pattern) if pattern is not None else default_pattern,
        source=str(path),
    )


def from_tiktoken_encoding(enc) -> Vocab:
    """Build a Vocab from a ``tiktoken.Encoding`` (its mergeable ranks, specials and pattern)."""
    if not all(hasattr(enc, a) for a in ("name", "_mergeable_ranks", "_special_tokens", "_pat_str")):
        hint = " (for an encoding's name, Tokenizer.from_tiktoken_name)" if isinstance(enc, str) else ""
        raise TypeError(f"expected a tiktoken.Encoding, got {type(enc).__name__}{hint}")
    where = f"tiktoken.Encoding({enc.name!r})"
    ranks: dict[bytes, int] = dict(enc._mergeable_ranks)
    seen: dict[int, bytes] = {}
    for token, rank in ranks.items():
        check_id(lambda token=token: f"{where}: token {token!r}", rank)
        if rank in seen:
            raise VocabError(f"{where}: tokens {seen[rank]!r} and {token!r} share rank {rank}")
        seen[rank] = token
    return vocab_from_ranks(
        ranks=ranks,
        where=where,
        name=enc.name,
        special_tokens=dict(enc._special_tokens),
        pattern=enc._pat_str,
        source=where,
    )


def _ranks(contents: bytes, digest: bytes, path: Path) -> dict[bytes, int]:
    """The rank file's tokens and ranks: from the disk cache (ranks/, keyed by the file's
    bytes, `digest` their sha256, and this parser's source) when it holds them, else parsed
    line by line and kept (the line loop over 100-200k lines is most of a start-up's
    vocabulary load)."""
    return kept_npz(
        "ranks",
        hashlib.sha256(_parser_digest() + digest).hexdigest()[:32],
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
