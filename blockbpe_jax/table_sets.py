"""A `Tokenizer`'s tables as its encode calls need them, built at their first use."""

from __future__ import annotations

import numpy as np

from . import pretok
from .pretok import normalizer


def pretok_operand(vocab) -> tuple[np.ndarray, int, str | None]:
    """(operand, stages, None) of `vocab`'s pre-tokenizer, or (placeholder, -1, why exact mode
    is unavailable)."""
    placeholder = pretok.BYTES_MODE.operand()
    if vocab.unsupported:
        return placeholder, -1, vocab.unsupported
    if vocab.char_level is not None:  # SentencePiece BPE: no pre-tokenizer
        return placeholder, 0, None
    if vocab.pretokenizer is None:
        return (
            placeholder,
            -1,
            "it has no pre-tokenizer pattern (pass pattern= when loading a .tiktoken file)",
        )
    try:
        return vocab.pretokenizer.operand(), len(vocab.pretokenizer.stages), None
    except pretok.PretokenizerUnsupported as e:
        return placeholder, -1, str(e)


def normalize_texts(norm, texts) -> list:
    """`Tokenizer.normalize`'s loop: each str through `norm`; bytes decoded first, and where
    they are not valid UTF-8, left as they are (NFC alone) or normalized in their valid parts
    (with Lowercase, as the device does)."""
    lowercase = norm.lowercase
    out = []
    for t in texts:
        if isinstance(t, bytes):
            try:
                t = normalizer.apply(norm, t.decode("utf-8")).encode("utf-8")
            except UnicodeDecodeError:
                if lowercase:
                    t = normalizer.apply(norm, t.decode("utf-8", "surrogateescape")).encode(
                        "utf-8", "surrogateescape"
                    )
        elif isinstance(t, str):
            t = normalizer.apply(norm, t)
        out.append(t)
    return out
