"""Strings into the encode's rows: `pack_strings` and the checks every packing path makes (the
tokenizer's, the pinned staging's), with str surrogates taken as tiktoken takes them."""

from __future__ import annotations

import re
from typing import Sequence

import numpy as np

from . import _blockbpe_cpu

_SURROGATE = re.compile("[\ud800-\udfff]")


def pack_strings(
    texts: Sequence[str | bytes], *, max_len: int | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """list of str/bytes -> (uint8[B, L] zero-padded, int32[B] byte lengths), natively.

    L is `max_len`, or the longest string rounded up to a power of two (at least 16) so that
    repeated calls reuse compiled shapes. Raises ValueError if a string exceeds `max_len`, and
    UnicodeEncodeError (a ValueError) naming the item whose str holds a surrogate."""
    texts, limit = text_list(texts, max_len), -1 if max_len is None else int(max_len)
    try:
        return _blockbpe_cpu.pack_strings(texts, limit)
    except UnicodeEncodeError as e:
        k = next(k for k, t in enumerate(texts) if isinstance(t, str) and has_surrogate(t))
        raise UnicodeEncodeError(
            e.encoding, e.object, e.start, e.end,
            f"{e.reason}: texts[{k}] holds a surrogate (Tokenizer.encode_batch and the tiktoken "
            f"view take it as tiktoken does: a pair joined, a lone one U+FFFD)",
        ) from None  # fmt: skip


def has_surrogate(text: str) -> bool:
    """Whether a str holds a surrogate (an ASCII str cannot: the scan is skipped)."""
    return not text.isascii() and _SURROGATE.search(text) is not None


def surrogates_as_tiktoken(text: str) -> str:
    """The str with its surrogates as tiktoken treats them: a pair joined into its code point,
    a lone one replaced by U+FFFD (UTF-8 has no surrogates)."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def without_surrogates(texts: list) -> list:
    """The texts, each str's surrogates as tiktoken treats them (`surrogates_as_tiktoken`)."""
    return [surrogates_as_tiktoken(t) if isinstance(t, str) and has_surrogate(t) else t for t in texts]


def text_list(texts, max_len) -> list:
    """The checks every packing path makes before the native packer sees `texts`."""
    if isinstance(texts, (str, bytes)):
        raise TypeError(
            f"pack_strings: texts must be a sequence of str/bytes, not a single {type(texts).__name__}"
        )
    if max_len is not None and (not isinstance(max_len, (int, np.integer)) or max_len < 0):
        raise ValueError(f"pack_strings: max_len must be a non-negative int or None, got {max_len!r}")
    if isinstance(texts, list):
        return texts
    try:
        return list(texts)
    except TypeError:
        raise TypeError(
            f"pack_strings: texts must be a sequence of str/bytes, got {type(texts).__name__}"
        ) from None
