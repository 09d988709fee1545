"""The HF-style batch call, `tok(texts, padding=..., truncation=..., max_length=...)`: jax
arrays of ids and attention mask, as transformers returns them with `return_tensors`."""

from __future__ import annotations

from typing import Sequence

import jax.numpy as jnp
import numpy as np

from ..ops.postprocess import finalize
from ..staging import read_back

__all__ = ["hf_call"]


_PADDING = {
    True: "longest",
    "longest": "longest",
    "max_length": "max_length",
    False: None,
    None: None,
    "do_not_pad": None,
}
_TRUNCATION = {
    True: True,
    "longest_first": True,
    "only_first": True,
    False: False,
    None: False,
    "do_not_truncate": False,
}


def hf_call(
    tok,
    texts: str | Sequence[str],
    *,
    padding=False,
    truncation=False,
    max_length: int | None = None,
    pad_to_multiple_of: int | None = None,
    padding_side: str = "right",
    truncation_side: str = "right",
    return_attention_mask: bool = True,
    bos_id=None,
    eos_id=None,
    pad_id: int = 0,
    allowed_special="all",
    mode: str = "exact",
    device=None,
) -> dict:
    """HF-style `tok(texts, padding=..., truncation=..., max_length=...)` -> jax arrays.

    As transformers with `return_tensors`: padding True/"longest" (the longest row after
    truncation), "max_length", or False/"do_not_pad"; truncation True/"longest_first" cuts
    rows to `max_length` (BOS/EOS ids kept, as tokenizers' post-processor counts them);
    `pad_to_multiple_of` rounds the padded width up. Rows of unequal length without padding
    raise ValueError (no tensor can hold them), as transformers does. A single string is a
    batch of one. `allowed_special="all"` by default: HF matches special tokens in text.
    Returns {"input_ids": int32[B, T], "attention_mask": int32[B, T] (1 = real id)} on the
    device (default: JAX's default device).
    """
    if padding not in _PADDING or truncation not in _TRUNCATION:
        raise ValueError(f"padding={padding!r} / truncation={truncation!r} not supported")
    padding, truncation = _PADDING[padding], _TRUNCATION[truncation]
    if (truncation or padding == "max_length") and max_length is None:
        raise ValueError(
            "max_length is required with truncation or padding='max_length' "
            "(there is no model_max_length here)"
        )
    texts = [texts] if isinstance(texts, (str, bytes)) else list(texts)
    n_special = len(np.atleast_1d(bos_id if bos_id is not None else [])) + len(
        np.atleast_1d(eos_id if eos_id is not None else [])
    )
    enc = tok.encode_batch(texts, allowed_special=allowed_special, mode=mode, device=device)
    counts = read_back([enc.counts])[0]
    if (counts < 0).any():
        raise RuntimeError(f"encode failed: counts {counts.tolist()}")
    lengths = counts + n_special
    if truncation:
        lengths = np.minimum(lengths, max_length)
    content = int(lengths.max(initial=0))
    target = {"longest": content, "max_length": max_length, None: 0}[padding]
    if padding and pad_to_multiple_of and target % pad_to_multiple_of:
        target += pad_to_multiple_of - target % pad_to_multiple_of
    final = np.maximum(lengths, target)
    if len(set(final.tolist())) > 1:
        raise ValueError(
            "Unable to create tensor: rows have different lengths; activate "
            "padding=True and/or truncation=True"
        )
    width = int(final.max(initial=target))
    out = finalize(
        enc,
        max_length=max(content, n_special, 1),
        bos_id=bos_id,
        eos_id=eos_id,
        pad_id=pad_id,
        padding_side=padding_side,
        truncation_side=truncation_side,
    )
    ids = out.ids[:, :content] if content < out.ids.shape[1] else out.ids  # (content 0: no columns)
    extra = width - ids.shape[1]
    if extra:  # content is left- or right-aligned already; pad the rest on the same side
        pad = ((0, 0), (extra, 0)) if padding_side == "left" else ((0, 0), (0, extra))
        ids = jnp.pad(ids, pad, constant_values=pad_id)
    result = {"input_ids": ids}
    if return_attention_mask:
        real = jnp.asarray(lengths, jnp.int32)[:, None]
        col = jnp.arange(width, dtype=jnp.int32)[None, :]
        mask = col >= width - real if padding_side == "left" else col < real
        result["attention_mask"] = mask.astype(jnp.int32)
    return result
