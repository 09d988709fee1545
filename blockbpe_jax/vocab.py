"""Load a byte-level BPE vocabulary (tiktoken file, tiktoken Encoding, or HF tokenizer.json)
into one Python model, :class:`Vocab`, from which ``tables.py`` builds the device tables.

Two BPE semantics meet here, and the model holds both in the same shape:

* tiktoken ranks a pair by the rank of its concatenated bytes, and the merged token's id *is*
  that rank. So ``merges`` holds every split (prefix, suffix) of every token where both halves
  are tokens too; BPE never forms a pair outside that set.
* HF ``tokenizers`` ranks a pair by its index in ``model.merges``; the merged id is
  ``vocab[a + b]``.

``whole_piece_shortcut`` is tiktoken's rule "a pre-tokenized piece that is itself a token is
returned as that token without merging" (HF: ``ignore_merges: true``, as in Llama 3).

Every validation failure raises :class:`VocabError`, whose message starts with the file and,
where there is one, the 1-based line (``path:12: ...``) or the JSON path
(``path: model.merges[7]: ...``).
"""

from __future__ import annotations

import base64
import binascii
import functools
import json
import os
import re
import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Mapping

from . import pretok
from .pretok import HF_BYTELEVEL_PATTERN, Pretokenizer

if TYPE_CHECKING:
    from .char_bpe import CharLevel

__all__ = [
    "VocabError",
    "Vocab",
    "KNOWN_PATTERNS",
    "HF_BYTELEVEL_PATTERN",
    "LLAMA3_SPECIAL_TOKENS",
    "recognise_pattern",
    "bytes_to_unicode",
    "load_tiktoken_file",
    "load_tokenizer_json",
    "from_tiktoken_encoding",
    "known_tiktoken_file_defaults",
]

# Ids index Python tuples and int32 device tables. A huge rank in a file (a typo, or a hostile
# file) would otherwise allocate a tuple of that many holes; real vocabularies stay below 2**18.
MAX_TOKEN_ID = 2**24 - 1


class VocabError(ValueError):
    """A vocabulary file is malformed. The message names the file and line / JSON path."""


# --------------------------------------------------------------------------------------------
# Pre-tokenizer patterns
# --------------------------------------------------------------------------------------------

# Verbatim from tiktoken_ext/openai_public.py (r50k, cl100k, o200k) and Meta's Llama 3
# tokenizer (llama3). p50k_base uses r50k's pattern. tests/test_vocab.py checks these against
# tiktoken_ext when it is importable.
KNOWN_PATTERNS: dict[str, str] = {
    "r50k": r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s""",
    "cl100k": r"""'(?i:[sdmt]|ll|ve|re)|[^\r\n\p{L}\p{N}]?+\p{L}++|\p{N}{1,3}+| ?[^\s\p{L}\p{N}]++[\r\n]*+|\s++$|\s*[\r\n]|\s+(?!\S)|\s""",
    "o200k": "|".join(
        [
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?""",
            r"""\p{N}{1,3}""",
            r""" ?[^\s\p{L}\p{N}]+[\r\n/]*""",
            r"""\s*[\r\n]+""",
            r"""\s+(?!\S)""",
            r"""\s+""",
        ]
    ),
    "llama3": r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+""",
}


# Which spelling in the shared tokenizer.json files maps to which name:
#   gpt2/tokenizer.json       ByteLevel(use_regex=true) = HF_BYTELEVEL_PATTERN      -> "r50k"
#   llama3/tokenizer.json     Split regex, verbatim KNOWN_PATTERNS["llama3"]        -> "llama3"
#   o200k_hf/tokenizer.json   Split regex, verbatim KNOWN_PATTERNS["o200k"]         -> "o200k"
#   cl100k_hf/tokenizer.json  Split regex, verbatim KNOWN_PATTERNS["llama3"]        -> "llama3"
# The last one is NOT "cl100k": the HF port carries tiktoken's pre-2024 cl100k spelling, which
# Llama 3 copied. It differs from today's cl100k pattern on trailing whitespace that contains a
# newline at the very end of the text ("x\n " -> cl100k: "x","\n "; llama3: "x","\n"," "),
# because cl100k's `\s++$` has no counterpart there. The name names the scanner, not the vocab.

_CONTRACTIONS = ("'s", "'t", "'re", "'ve", "'m", "'ll", "'d")
_QUANTIFIER_BRACES = re.compile(r"\{\d+(?:,\d*)?\}")


def _split_top_level_alternatives(pattern: str) -> list[str]:
    """Split a regex on the `|` that are outside groups and character classes."""
    parts, start, depth, in_class, i = [], 0, 0, False, 0
    while i < len(pattern):
        c = pattern[i]
        if c == "\\":
            i += 2
            continue
        if in_class:
            if c == "]":
                in_class = False
        elif c == "[":
            in_class = True
            # A `]` right after `[` or `[^` is a literal, not the end of the class.
            if pattern[i + 1 : i + 2] == "^":
                i += 1
            if pattern[i + 1 : i + 2] == "]":
                i += 1
        elif c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
        elif c == "|" and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
        i += 1
    parts.append(pattern[start:])
    return parts


def _strip_final_possessive(alternative: str) -> str:
    """`X++` -> `X+` (also `*+`, `?+`, `{m,n}+`) when it is the last thing in the alternative.

    Safe: possessive and greedy differ only when something after the quantifier fails and forces
    backtracking into it; at the end of a top-level alternative nothing follows, the match has
    already succeeded, and leftmost-first matching returns it. A possessive in the middle
    (`[^\\r\\n\\p{L}\\p{N}]?+\\p{L}`) is left alone, so we never claim more than we can argue.
    """
    i, in_class, after_quantifier, ends_possessive = 0, False, False, False
    while i < len(alternative):
        c = alternative[i]
        ends_possessive = False
        if c == "\\":
            step = 2
            if alternative[i + 1 : i + 2] in ("p", "P", "x") and alternative[i + 2 : i + 3] == "{":
                step = alternative.index("}", i) + 1 - i
            i += step
            after_quantifier = False
            continue
        if in_class:
            in_class = c != "]"
            after_quantifier = False
        elif c == "[":
            in_class = True
            after_quantifier = False
        elif c == "+" and after_quantifier:
            ends_possessive, after_quantifier = True, False
        elif c == "?" and after_quantifier:  # lazy marker: not safe to touch, and not a quantifier
            after_quantifier = False
        elif c == "?" and i > 0 and alternative[i - 1] == "(":  # group syntax `(?:`, `(?i:`, `(?!`
            after_quantifier = False
        elif c in "*+?":
            after_quantifier = True
        elif c == "{" and (m := _QUANTIFIER_BRACES.match(alternative, i)):
            i = m.end()
            after_quantifier = True
            continue
        else:
            after_quantifier = False
        i += 1
    return alternative[:-1] if ends_possessive else alternative


def _normalise_pattern(pattern: str) -> tuple[str, ...]:
    """Rewrite a pattern into a canonical list of top-level alternatives.

    Only rewrites whose equivalence we can argue are applied (leftmost-first matching, `$` = end
    of text as in tiktoken's fancy-regex); anything else must match verbatim:
    1. the seven alternatives `'s|'t|'re|'ve|'m|'ll|'d` (any order; they are mutually exclusive:
       each is an apostrophe plus a distinct first letter) == `'(?:[sdmt]|ll|ve|re)`, and
       `(?i:'s|'t|...|'d)` == `'(?i:[sdmt]|ll|ve|re)` (an apostrophe has no case);
    2. a trailing possessive marker is dropped (see _strip_final_possessive);
    3. the tail `\\s++$|\\s+(?!\\S)|\\s` == `\\s+(?!\\S)|\\s+`: at a whitespace run of length n
       that reaches the end, both take n; otherwise both take n-1 when n >= 2 (`\\s+(?!\\S)`)
       and 1 when n == 1. (The possessive `\\s++$` is required: greedy `\\s+$` could differ
       under engines whose `$` also matches before a newline.)
    """
    alternatives = _split_top_level_alternatives(pattern)
    out: list[str] = []
    i = 0
    while i < len(alternatives):
        if set(alternatives[i : i + len(_CONTRACTIONS)]) == set(_CONTRACTIONS):
            out.append("'(?:[sdmt]|ll|ve|re)")
            i += len(_CONTRACTIONS)
            continue
        alt = alternatives[i]
        if alt == "(?i:" + "|".join(_CONTRACTIONS) + ")":
            alt = "'(?i:[sdmt]|ll|ve|re)"
        out.append(_strip_final_possessive(alt))
        i += 1
    for k in range(len(out) - 2):
        if out[k : k + 3] == [r"\s++$", r"\s+(?!\S)", r"\s"]:
            out[k : k + 3] = [r"\s+(?!\S)", r"\s+"]
            break
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _canonical_pattern_names() -> dict[tuple[str, ...], str]:
    table = {_normalise_pattern(p): name for name, p in KNOWN_PATTERNS.items()}
    assert len(table) == len(KNOWN_PATTERNS), "two known patterns normalise to the same form"
    return table


def recognise_pattern(pattern: str | None) -> str | None:
    """The KNOWN_PATTERNS name `pattern` is equivalent to, or None when we cannot tell."""
    if pattern is None:
        return None
    return _canonical_pattern_names().get(_normalise_pattern(pattern))


# --------------------------------------------------------------------------------------------
# Known tiktoken files
# --------------------------------------------------------------------------------------------

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


# --------------------------------------------------------------------------------------------
# The model
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Vocab:
    """One byte-level BPE vocabulary, whatever file it came from.

    token_bytes[i] is the byte string of id i (None for an unused id); special tokens are
    included at their ids. merges maps (left_id, right_id) -> (rank, merged_id), lower rank
    first. "Mergeable" tokens are the ids that are not special: BPE and the whole-piece
    shortcut only ever see those.
    """

    name: str
    token_bytes: tuple[bytes | None, ...]
    merges: dict[tuple[int, int], tuple[int, int]]
    byte_ids: tuple[int, ...]
    special_tokens: dict[str, int]
    pattern: str | None
    pattern_name: str | None
    whole_piece_shortcut: bool
    # The pre-tokenizer as data (blockbpe_jax/pretok), None when the file names none; compiled
    # at the first exact-mode use.
    pretokenizer: Pretokenizer | None
    unsupported: str | None
    source: str
    # SentencePiece-style BPE (merges over characters; blockbpe_jax/char_bpe.py), else None.
    char_level: "CharLevel | None" = None
    # Special tokens matched in text whatever the allowed specials (SentencePiece user-defined
    # pieces).
    always_special: tuple[str, ...] = ()

    @property
    def n_vocab(self) -> int:
        return len(self.token_bytes)

    @functools.cached_property
    def special_ids(self) -> frozenset[int]:
        return frozenset(self.special_tokens.values())

    @functools.cached_property
    def mergeable_ids(self) -> tuple[int, ...]:
        """Ids of the non-special tokens, ascending."""
        specials = self.special_ids
        return tuple(
            i for i, b in enumerate(self.token_bytes) if b is not None and i not in specials
        )

    def __repr__(self) -> str:
        return (
            f"Vocab(name={self.name!r}, n_vocab={self.n_vocab}, merges={len(self.merges)}, "
            f"specials={len(self.special_tokens)}, pattern_name={self.pattern_name!r}, "
            f"whole_piece_shortcut={self.whole_piece_shortcut}, source={self.source!r})"
        )


def _check_id(where: str, token_id: object) -> int:
    if isinstance(token_id, bool) or not isinstance(token_id, int):
        raise VocabError(f"{where}: id {token_id!r} is not an integer")
    if not 0 <= token_id <= MAX_TOKEN_ID:
        raise VocabError(f"{where}: id {token_id} is outside 0..{MAX_TOKEN_ID}")
    return token_id


def _place_specials(
    where: str, token_bytes: list[bytes | None], special_tokens: Mapping[str, int]
) -> list[bytes | None]:
    """Put special tokens' UTF-8 bytes at their ids, growing the list; reject collisions with a
    mergeable token of different bytes (the same bytes at the same id is fine: HF files list
    their specials in model.vocab too). Several special strings may share an id, as tiktoken
    allows (gpt-oss's o200k_harmony has '<|endofprompt|>' and '<|reserved_200018|>'): each
    encodes to it, and it decodes to the first one listed."""
    seen_ids: dict[int, str] = {}
    for text, token_id in special_tokens.items():
        _check_id(f"{where}: special token {text!r}", token_id)
        if token_id in seen_ids:
            continue
        seen_ids[token_id] = text
        if not text:
            raise VocabError(f"{where}: special token with id {token_id} is empty")
        data = text.encode("utf-8")
        if token_id >= len(token_bytes):
            token_bytes.extend([None] * (token_id + 1 - len(token_bytes)))
        existing = token_bytes[token_id]
        if existing is not None and existing != data:
            raise VocabError(
                f"{where}: special token {text!r} has id {token_id}, which is already the "
                f"mergeable token {existing!r}"
            )
        token_bytes[token_id] = data
    return token_bytes


def _missing_bytes_message(missing: list[int]) -> str:
    shown = ", ".join(f"0x{b:02x}" for b in missing[:8])
    more = f" and {len(missing) - 8} more" if len(missing) > 8 else ""
    return f"missing single-byte tokens for {len(missing)} byte values ({shown}{more}); all 256 bytes must be tokens"


def _merges_from_ranks(ranks: Mapping[bytes, int]) -> dict[tuple[int, int], tuple[int, int]]:
    """tiktoken semantics: every split (prefix, suffix) of a token where both halves are tokens
    becomes a merge whose rank and merged id are the token's rank.

    A plain loop over the ~540k splits of cl100k (about 0.7 s here); no two tokens can claim the
    same pair, because a pair's concatenation is one byte string, hence one token."""
    merges: dict[tuple[int, int], tuple[int, int]] = {}
    get = ranks.get
    for token, rank in ranks.items():
        for cut in range(1, len(token)):
            left = get(token[:cut])
            if left is not None:
                right = get(token[cut:])
                if right is not None:
                    merges[(left, right)] = (rank, rank)
    return merges


def _vocab_from_ranks(
    *,
    ranks: Mapping[bytes, int],
    where: str,
    name: str,
    special_tokens: Mapping[str, int],
    pattern: str | None,
    source: str,
) -> Vocab:
    """Shared tail of the tiktoken loaders (ranks already free of duplicates)."""
    if not ranks:
        raise VocabError(f"{where}: no tokens")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise VocabError(f"{where}: {_missing_bytes_message(missing)}")
    token_bytes: list[bytes | None] = [None] * (max(ranks.values()) + 1)
    for data, rank in ranks.items():
        token_bytes[rank] = data
    token_bytes = _place_specials(where, token_bytes, special_tokens)
    return Vocab(
        name=name,
        token_bytes=tuple(token_bytes),
        merges=_merges_from_ranks(ranks),
        byte_ids=tuple(ranks[bytes([b])] for b in range(256)),
        special_tokens=dict(special_tokens),
        pattern=pattern,
        pattern_name=recognise_pattern(pattern),
        whole_piece_shortcut=True,
        pretokenizer=None if pattern is None else pretok.from_tiktoken_pattern(pattern),
        unsupported=None,
        source=source,
    )


# --------------------------------------------------------------------------------------------
# tiktoken
# --------------------------------------------------------------------------------------------


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
        raise VocabError(f"{path}: a SentencePiece model (protobuf); SentencePiece BPE "
                         f"(merges over characters, byte fallback) is not supported yet")

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
            raise VocabError(
                f"{path}:{line_no}: duplicate rank {rank} (first on line {line_of_rank[rank]})"
            )
        ranks[token] = rank
        line_of_token[token] = line_no
        line_of_rank[rank] = line_no
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
        _check_id(f"{where}: token {token!r}", rank)
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


# --------------------------------------------------------------------------------------------
# HF tokenizer.json
# --------------------------------------------------------------------------------------------


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
        text, token_id = entry["content"], _check_id(at, entry.get("id"))
        if seen.setdefault(text, token_id) != token_id:
            raise VocabError(f"{at}: {text!r} is also added with id {seen[text]}")
        out.append((at, text, token_id, [f for f in ("lstrip", "rstrip", "single_word") if entry.get(f)]))
    return out


def parse_hf_merges(path, merges_json: list, vocab_json: dict, prefix_len: int = 0
                    ) -> dict[tuple[int, int], tuple[int, int]]:
    """model.merges of a tokenizer.json: (left id, right id) -> (rank = list index, merged id);
    a pair listed twice takes its last rank, as in HF."""
    merges: dict[tuple[int, int], tuple[int, int]] = {}
    for rank, merge in enumerate(merges_json):
        at = f"{path}: model.merges[{rank}]"
        if isinstance(merge, str):
            parts = merge.split(" ")
        elif isinstance(merge, list) and all(isinstance(p, str) for p in merge):
            parts = merge
        else:
            raise VocabError(f"{at}: expected \"a b\" or [a, b], got {merge!r}")
        if len(parts) != 2:
            raise VocabError(f"{at}: expected two tokens, got {merge!r}")
        left, right = parts
        for part in parts:
            if part not in vocab_json:
                raise VocabError(f"{at}: merge {merge!r} refers to unknown token {part!r}")
        merged = vocab_json.get(left + right[prefix_len:])
        if merged is None:
            raise VocabError(f"{at}: merge result {left + right[prefix_len:]!r} is not in model.vocab")
        merges[(vocab_json[left], vocab_json[right])] = (rank, merged)
    return merges


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

    for key, token_id in vocab_json.items():
        _check_id(f"{path}: model.vocab[{key!r}]", token_id)
    token_bytes: list[bytes | None] = [None] * (max(vocab_json.values(), default=-1) + 1)
    for key, token_id in vocab_json.items():
        at = f"{path}: model.vocab[{key!r}]"
        data = _decode_byte_level(key)
        if data is None or not data:
            if added_text_of_id.get(token_id) == key:
                data = key.encode("utf-8")
            else:
                raise VocabError(f"{at}: key is not a byte-level encoded token")
        if token_bytes[token_id] is not None:
            other = next(k for k, v in vocab_json.items() if v == token_id and k != key)
            raise VocabError(f"{at}: duplicate id {token_id} (also {other!r})")
        token_bytes[token_id] = data

    missing = [b for b, ch in bytes_to_unicode().items() if ch not in vocab_json]
    if missing:
        raise VocabError(f"{path}: model.vocab: {_missing_bytes_message(missing)}")
    byte_ids = tuple(vocab_json[bytes_to_unicode()[b]] for b in range(256))

    # HF drops the continuing-subword prefix from the right half when it names the result.
    merges = parse_hf_merges(path, merges_json, vocab_json, len(model.get("continuing_subword_prefix") or ""))

    token_bytes = _place_specials(str(path), token_bytes, added)

    try:
        nfc = pretok.nfc_from_hf(doc.get("normalizer"))
    except pretok.PretokenizerUnsupported as e:
        nfc = False
        reasons.insert(0, str(e))
    try:
        pretokenizer = dataclasses.replace(pretok.from_hf(doc.get("pre_tokenizer")), nfc=nfc)
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

    name = path.parent.name if path.name == "tokenizer.json" and path.parent.name else path.stem
    return Vocab(
        name=name,
        token_bytes=tuple(token_bytes),
        merges=merges,
        byte_ids=byte_ids,
        special_tokens=added,
        pattern=pattern,
        pattern_name=recognise_pattern(pattern),
        whole_piece_shortcut=bool(model.get("ignore_merges", False)),
        pretokenizer=pretokenizer,
        unsupported="; ".join(reasons) or None,
        source=str(path),
    )
