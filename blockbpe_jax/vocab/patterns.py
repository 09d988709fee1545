"""The pre-tokenizer patterns we know by name (tiktoken's and Llama 3's), and recognising a
pattern string as one of them whatever its spelling."""

from __future__ import annotations

import functools
import re


# Verbatim from tiktoken_ext/openai_public.py (r50k, cl100k, o200k) and Meta's Llama 3
# tokenizer (llama3). p50k_base uses r50k's pattern. tests/vocab/test_vocab_patterns.py checks these against
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


# tiktoken's encoding names for the patterns they use (p50k_base and p50k_edit: r50k's).
ENCODING_PATTERNS: dict[str, str] = {
    "gpt2": "r50k",
    "r50k_base": "r50k",
    "p50k_base": "r50k",
    "p50k_edit": "r50k",
    "cl100k_base": "cl100k",
    "o200k_base": "o200k",
}


def pattern_name_known(text: str) -> str | None:
    """The KNOWN_PATTERNS name `text` names (a pattern's name, or a tiktoken encoding's), or None."""
    return text if text in KNOWN_PATTERNS else ENCODING_PATTERNS.get(text)


def pattern_of(name_or_regex: str) -> str:
    """The regex of a known pattern's name ("cl100k", "o200k", "r50k", "llama3", or a tiktoken
    encoding's name such as "cl100k_base"); any other text is taken as the regex itself."""
    name = pattern_name_known(name_or_regex)
    return KNOWN_PATTERNS[name] if name is not None else name_or_regex


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
