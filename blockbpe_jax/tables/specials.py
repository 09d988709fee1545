"""Special tokens as a tokenizer's host side sees them: where they occur in a text (the
tiktoken view splits a text at its allowed specials, as tiktoken does, so that one host encoder
serves every set of allowed specials), and the end-of-text id by family."""

from __future__ import annotations

import re

import numpy as np

from .lru import BoundedCache

# The end-of-text special by family, the first one found wins: OpenAI's and Qwen's, Llama 3's,
# DeepSeek's, SentencePiece's and Mistral's, Gemma's.
EOT_NAMES = ("<|endoftext|>", "<|end_of_text|>", "<\uff5cend\u2581of\u2581sentence\uff5c>", "</s>", "<eos>")


def eot_token(vocab) -> int:
    """The id of the first of `EOT_NAMES` that `vocab` has as a special token; KeyError (as
    tiktoken's `Encoding.eot_token`) naming the vocabulary when it has none."""
    specials = vocab.special_tokens
    for name in EOT_NAMES:
        if name in specials:
            return specials[name]
    shown = sorted(specials)[:8]
    raise KeyError(
        f"{vocab.name} has no end-of-text special token (looked for {', '.join(EOT_NAMES)}); "
        f"its specials: {shown}{' ...' if len(specials) > len(shown) else ''}: pass the id you mean"
    )


def specials_escaped(vocab) -> bool:
    """Whether a `▁` of the vocabulary's specials also matches a space (SentencePiece's escaped
    specials: the char table's flag, and the special_starts table built for them)."""
    return vocab.char_level is not None and vocab.char_level.escaped_specials


def n_vocab(vocab) -> int:
    """The largest id + 1 (tiktoken's `max_token_value + 1`)."""
    tb = vocab.token_bytes
    return next((i + 1 for i in range(len(tb) - 1, -1, -1) if tb[i] is not None), 0)


class SpecialMatcher:
    """Where a vocabulary's special tokens occur in a text, for any subset of them, with one
    regex over all of them (compiled once): at the leftmost position where a special of the
    subset starts, the longest such, which is what the encode primitive matches (its special
    tables are sorted longest first). The regex finds the longest special at a position; a
    shorter one there is one of its prefixes, listed per special."""

    def __init__(self, names):
        names = sorted(set(names), key=lambda n: (-len(n), n))
        self.names = frozenset(names)
        self._search = re.compile(_trie_pattern(names)).search if names else None
        self._prefixes = {}
        for n in names:
            shorter = [n[:k] for k in range(len(n) - 1, 0, -1) if n[:k] in self.names]
            if shorter:
                self._prefixes[n] = shorter

    def find(self, text: str, subset, pos: int = 0) -> tuple[int, str] | None:
        """(start, name) of the first special of `subset` in text[pos:], or None."""
        search = self._search
        if search is None:
            if not isinstance(text, str):
                raise TypeError(f"expected string, got {type(text).__name__}")
            return None
        while (m := search(text, pos)) is not None:
            name = m.group()
            if name in subset:
                return m.start(), name
            for shorter in self._prefixes.get(name, ()):
                if shorter in subset:
                    return m.start(), shorter
            pos = m.start() + 1
        return None


class NotIn:
    """The names not in `allowed`, as a container for `SpecialMatcher.find` (tiktoken's
    default disallowed_special, every special not allowed, without building that set)."""

    def __init__(self, allowed):
        self.allowed = allowed

    def __contains__(self, name) -> bool:
        return name not in self.allowed


def _trie_pattern(names) -> str:
    """A regex matching any of `names`, as a trie (alternatives factored by their common
    prefixes: one pass over the text, not one try per name at each position), the longest name
    at a position first (a name that ends where a longer one goes on is the fallback, `?`)."""
    trie: dict = {}
    for name in names:
        node = trie
        for ch in name:
            node = node.setdefault(ch, {})
        node[""] = {}

    def build(node: dict) -> str:
        branches = [re.escape(ch) + build(child) for ch, child in sorted(node.items()) if ch]
        if not branches:
            return ""
        body = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
        return f"(?:{body})?" if "" in node else body

    return build(trie)


_LITERALS = BoundedCache(32, 1 << 20)


def literal_search(strings: frozenset):
    """The search function of a regex over arbitrary strings (tiktoken's disallowed_special may
    name strings that are not special tokens), the last few kept (bounded by their bytes)."""
    return _LITERALS.get_or_build(
        strings,
        lambda: (
            re.compile("|".join(re.escape(s) for s in sorted(strings, key=lambda s: (-len(s), s)))).search
        ),
        lambda _: 64 + 8 * sum(len(s) for s in strings),
    )


def accepted_spans(tables, escaped: bool, texts: list[bytes]) -> list[list[tuple[int, int, int]]]:
    """The specials of `tables` (a tokenizer's host `EncodeTables`) that the executors accept in
    each text: (start byte, end byte, index in the special tables) in order, by the CPU module's
    special_spans (ffi/core/special_tokens.h: matched where they start, accepted leftmost-first).
    escaped: a `▁` of a special also matches a space (SentencePiece's escaped specials)."""
    from .. import native

    offsets = np.zeros(len(texts) + 1, dtype=np.int64)
    np.cumsum([len(t) for t in texts], out=offsets[1:])
    data = np.frombuffer(b"".join(texts), dtype=np.uint8)
    spans = native.cpu.special_spans(
        np.asarray(tables.special_offsets, dtype=np.int32),
        np.asarray(tables.special_data, dtype=np.uint8),
        np.asarray(tables.special_starts, dtype=np.uint8),
        escaped,
        data,
        offsets,
    )
    out: list[list[tuple[int, int, int]]] = [[] for _ in texts]
    for row, start, end, index in spans.tolist():
        out[row].append((start, end, index))
    return out


def normalize_around(tables, escaped: bool, normalize, texts: list) -> tuple[list, dict]:
    """(the texts normalized, the rows to encode in parts). HF extracts its added tokens from
    the raw text and normalizes only the text between them; so does this, with the specials
    that the executors accept in the raw text (`accepted_spans`), whose bytes stay as they are;
    `normalize(list) -> list` is the normalizer on whole texts. The encode matches specials
    again in the text it is given, and a normalizer can spell one where the raw text has none
    (U+212A KELVIN SIGN is 'K' in NFC; "<|ENDOFTEXT|>" lowercases to "<|endoftext|>"): a row
    whose normalized text it would match otherwise is returned in the dict, as (its gaps
    normalized, the ids of the specials between them), for `join_parts`."""
    if len(tables.special_ids) == 0 or int(tables.special_offsets[-1]) == 0:
        return normalize(texts), {}
    raw = [_utf8(t) for t in texts]
    spans = accepted_spans(tables, escaped, raw)
    pieces, where = [], []  # the gaps to normalize, each as its text's type; (first piece, count)
    for k, (t, b) in enumerate(zip(texts, raw)):
        first, at = len(pieces), 0
        for start, end, _ in spans[k]:
            pieces.append(_like(t, b[at:start]))
            at = end
        pieces.append(t if not spans[k] else _like(t, b[at:]))
        where.append((first, len(spans[k]) + 1))
    done = normalize(pieces)
    out, moved = [], []  # moved: each row's specials where its normalized text has them
    for k, (t, b) in enumerate(zip(texts, raw)):
        first, count = where[k]
        if count == 1:
            out.append(done[first])
            moved.append([])
            continue
        parts, at, row_spans = [], 0, []
        for g, (start, end, index) in enumerate(spans[k]):
            gap = _utf8(done[first + g])
            parts += [gap, b[start:end]]
            row_spans.append((at + len(gap), at + len(gap) + end - start, index))
            at += len(gap) + end - start
        parts.append(_utf8(done[first + count - 1]))
        out.append(_like(t, b"".join(parts)))
        moved.append(row_spans)
    again = accepted_spans(tables, escaped, [_utf8(t) for t in out])
    split = {}
    for k in range(len(texts)):
        if again[k] != moved[k]:
            first, count = where[k]
            ids = [int(tables.special_ids[index]) for _, _, index in spans[k]]
            split[k] = (done[first : first + count], ids)
    return out, split


def join_parts(rows: list, encode_gaps) -> list[list[int]]:
    """The ids of rows given as (normalized gaps, the ids of the specials between them), or
    None (no ids): each gap encoded as a text of its own without specials
    (`encode_gaps(list) -> list[list[int]]`), which is how HF encodes the text between its
    added tokens, and the specials' ids put between."""
    gaps = [g for row in rows if row is not None for g in row[0] if len(g)]
    got = iter(encode_gaps(gaps) if gaps else ())
    joined = []
    for row in rows:
        toks = []
        for g, gap in enumerate(row[0] if row is not None else ()):
            if len(gap):
                toks += next(got)
            if g < len(row[1]):
                toks.append(row[1][g])
        joined.append(toks)
    return joined


def _utf8(text) -> bytes:
    """A text's bytes (a str's lone surrogates as Python writes them with surrogatepass)."""
    return text.encode("utf-8", "surrogatepass") if isinstance(text, str) else bytes(text)


def _like(text, b: bytes):
    """b as the type of `text`: bytes, or a str (read back as `_utf8` wrote it)."""
    return b.decode("utf-8", "surrogatepass") if isinstance(text, str) else b
