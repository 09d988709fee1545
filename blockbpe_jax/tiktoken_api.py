"""Familiar host APIs over a `Tokenizer`: tiktoken's `Encoding`, and an HF-style batch call.

    enc = tok.as_tiktoken()                  # blockbpe_jax.tiktoken_api.Encoding
    enc.encode("hello <|endoftext|>")        # ValueError, as tiktoken (a disallowed special)
    enc.encode("hello <|endoftext|>", allowed_special="all")   # [..., enc.eot_token]
    batch = tok(["a", "b c"], padding="longest", truncation=True, max_length=512)
    batch["input_ids"], batch["attention_mask"]                # int32[B, T] jax arrays

`Encoding` follows tiktoken's semantics (tiktoken/core.py): the same defaults
(`allowed_special=set()`, `disallowed_special="all"`), the same ValueError text for a disallowed
special token found in the text, KeyError for unknown ids / non-tokens, lone surrogates replaced
by U+FFFD. The ids come from the library's encode (default: the CPU, where the native encode
runs on the strings without an XLA call: `ops.host_encoder`), so they equal tiktoken's
for `.tiktoken` vocabularies. Differences: `num_threads` is accepted and
ignored (on the CPU a batch is split over the host's cores; on a device it is one or a few
calls, bucketed by length); `encode_with_unstable` and
pickling are not offered; `eot_token` raises KeyError when the vocabulary has no
`<|endoftext|>`, as tiktoken does.
"""

from __future__ import annotations

import functools
from typing import AbstractSet, Collection, Literal, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from . import ops
from .postprocess import finalize
from .staging import read_back

__all__ = ["Encoding", "hf_call"]

_ROWS_BYTES = 1 << 24  # padded bytes per device call in a batch


@functools.lru_cache(maxsize=128)
def _special_token_regex(tokens: frozenset):
    try:
        import regex as re
    except ImportError:  # (not a dependency; the standard module does for literal alternatives)
        import re
    return re.compile("(" + "|".join(re.escape(t) for t in tokens) + ")")


def raise_disallowed_special_token(token: str):
    """tiktoken's message, verbatim."""
    raise ValueError(
        f"Encountered text corresponding to disallowed special token {token!r}.\n"
        "If you want this text to be encoded as a special token, "
        f"pass it to `allowed_special`, e.g. `allowed_special={{{token!r}, ...}}`.\n"
        f"If you want this text to be encoded as normal text, disable the check for this token "
        f"by passing `disallowed_special=(enc.special_tokens_set - {{{token!r}}})`.\n"
        "To disable this check for all special tokens, pass `disallowed_special=()`.\n"
    )


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:  # surrogates: pairs joined, lone ones -> U+FFFD (as tiktoken)
        return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace").encode("utf-8")


class _HostEncoders(dict):
    """`ops.host_encoder` per allowed specials, built on first use (it binds the tables)."""

    def __init__(self, tokenizer, mode: str):
        super().__init__()
        self.tokenizer, self.mode = tokenizer, mode

    def __missing__(self, allowed):
        tok = self.tokenizer
        enc = self[allowed] = ops.host_encoder(
            tok.tables(allowed, host=True),
            mode=self.mode,
            assume_normalized=tok._normalized([], self.mode)[1],
        )
        return enc


class Encoding:
    """tiktoken's `Encoding` API over a `blockbpe_jax.Tokenizer` (host lists in and out).

    `device`: where encode runs: the CPU (default, `jax.devices("cpu")[0]`: the native encode
    without XLA, microseconds per short string), a JAX device, or "auto": the CPU for texts
    of fewer than `LONG_TEXT_BYTES` UTF-8 bytes and JAX's default device, when it is an
    accelerator, for the others (one text's GPU encode, ids back in a list, beats the host's
    at 32 KiB on every case of benchmarks/single_string.py and loses at 8 KiB on most). A
    new padded width compiles on its first call there (a second or so).
    """

    LONG_TEXT_BYTES = 1 << 14

    def __init__(self, tokenizer, *, device=None, mode: str = "exact"):
        self.tokenizer = tokenizer
        self._long_texts_on = None  # (device="auto": where texts of LONG_TEXT_BYTES go)
        if isinstance(device, str):
            if device != "auto":
                raise ValueError(f"device must be a JAX device, None or 'auto', got {device!r}")
            default = jax.devices()[0]
            self._long_texts_on = default if default.platform != "cpu" else None
            device = None
        self.device = device if device is not None else jax.devices("cpu")[0]
        self.mode = mode
        self._host_encoders = _HostEncoders(tokenizer, mode)
        self._on_host = self.device.platform == "cpu"
        self._normalizes = tokenizer.normalizes
        vocab = tokenizer.vocab
        self.name = vocab.name
        self._special_tokens = dict(vocab.special_tokens)
        self._special_token_values = set(self._special_tokens.values())
        tb = vocab.token_bytes
        self.max_token_value = max(i for i in range(len(tb)) if tb[i] is not None)

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r} (blockbpe_jax)>"

    # -- encoding ---------------------------------------------------------------------------
    def _allowed(self, allowed_special, disallowed_special, texts: Sequence[str]):
        """tiktoken's check; returns the allowed specials for the primitive."""
        if isinstance(allowed_special, str) and allowed_special != "all":
            raise TypeError(f"allowed_special must be 'all' or a set, got {allowed_special!r}")
        if allowed_special == "all":
            allowed_special = self.special_tokens_set
        if disallowed_special == "all":
            disallowed_special = self.special_tokens_set - set(allowed_special)
        if disallowed_special:
            pattern = _special_token_regex(frozenset(disallowed_special))
            for text in texts:
                if match := pattern.search(text):
                    raise_disallowed_special_token(match.group())
        # (tiktoken ignores allowed names that are not special tokens)
        return tuple(sorted(set(allowed_special) & self.special_tokens_set)) or "none"

    def _encode_many(self, texts: Sequence[str], allowed) -> list[list[int]]:
        if not self._on_host:
            return self._encode_on(self.device, texts, allowed)
        if self._long_texts_on is not None:
            long = [k for k, t in enumerate(texts) if self._is_long(t)]
            if long:
                out = [None] * len(texts)
                ids = self._encode_on(self._long_texts_on, [texts[k] for k in long], allowed)
                for k, row in zip(long, ids):
                    out[k] = row
                short = [k for k, row in enumerate(out) if row is None]
                for k, row in zip(short, self._encode_host([texts[k] for k in short], allowed)):
                    out[k] = row
                return out
        return self._encode_host(texts, allowed)

    def _encode_one(self, text: str, allowed) -> list[int]:
        # (_encode_many's routing for one text, without its lists, and _is_long called only
        # where the characters alone leave it open: each costs about as much as encoding a
        # short string)
        if not self._on_host:
            return self._encode_on(self.device, [text], allowed)[0]
        if self._long_texts_on is not None and 4 * len(text) >= self.LONG_TEXT_BYTES and self._is_long(text):
            return self._encode_on(self._long_texts_on, [text], allowed)[0]
        return self._encode_host((text,), allowed)[0]

    def _is_long(self, text) -> bool:
        """At least LONG_TEXT_BYTES bytes of UTF-8 (counted only where the length in characters
        leaves it open: a character is 1 to 4 bytes)."""
        n, limit = len(text), self.LONG_TEXT_BYTES
        if n >= limit or 4 * n < limit or isinstance(text, bytes) or text.isascii():
            return n >= limit
        return len(text.encode("utf-8", "surrogatepass")) >= limit

    def _encode_host(self, texts: Sequence[str], allowed) -> list[list[int]]:
        """The native encode on the strings themselves (no XLA call, no padded copy)."""
        encoder = self._host_encoders[allowed]
        if not self._normalizes:
            try:
                return encoder.encode(texts)  # (str read as its UTF-8 form, no copy)
            except UnicodeEncodeError:  # lone surrogates: replaced below, as tiktoken
                pass
        raw = [_utf8(t) for t in texts]
        return encoder.encode(self.tokenizer._normalized(raw, self.mode)[0])

    def _encode_on(self, device, texts: Sequence[str], allowed) -> list[list[int]]:
        """`Tokenizer.encode_batch` on `device`, the texts bucketed by padded width."""
        raw = [_utf8(t) for t in texts]
        out: list = [None] * len(raw)
        buckets: dict[int, list[int]] = {}
        for k, r in enumerate(raw):  # by padded width, so short texts don't pay for long ones
            buckets.setdefault(max(16, 1 << max(0, len(r) - 1).bit_length()), []).append(k)
        for width, rows in sorted(buckets.items()):
            step = max(1, _ROWS_BYTES // width)
            for s in range(0, len(rows), step):
                chunk = rows[s : s + step]
                ids, counts = self.tokenizer.encode_batch(
                    [raw[k] for k in chunk], max_len=width, allowed_special=allowed, mode=self.mode,
                    device=device,
                ).numpy()  # fmt: skip
                counts = counts.tolist()  # (Python ints: NumPy's reductions cost more on a few rows)
                if min(counts) < 0 or max(counts) > ids.shape[1]:
                    raise RuntimeError(f"encode failed: counts {counts} (width {width})")
                for j, k in enumerate(chunk):
                    out[k] = ids[j, : counts[j]].tolist()
        return out

    def encode_ordinary(self, text: str) -> list[int]:
        """`encode(text, disallowed_special=())`: special tokens' text is ordinary text."""
        return self._encode_one(text, "none")

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | AbstractSet[str] = set(),  # noqa: B006
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """tiktoken's `encode`: a disallowed special token in `text` raises ValueError."""
        return self._encode_one(text, self._allowed(allowed_special, disallowed_special, (text,)))

    def encode_to_numpy(self, text: str, **kwargs) -> np.ndarray:
        return np.asarray(self.encode(text, **kwargs), dtype=np.uint32)

    def encode_ordinary_batch(self, text: Sequence[str], *, num_threads: int = 8) -> list[list[int]]:
        return self._encode_many(list(text), "none")

    def encode_batch(
        self,
        text: Sequence[str],
        *,
        num_threads: int = 8,
        allowed_special: Literal["all"] | AbstractSet[str] = set(),  # noqa: B006
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[list[int]]:
        """Lists of ids (not `Tokenizer.encode_batch`'s padded arrays); `num_threads` is ignored."""
        text = list(text)
        return self._encode_many(text, self._allowed(allowed_special, disallowed_special, text))

    @functools.cached_property
    def _encoder(self) -> dict:
        tb, sv = self.tokenizer.vocab.token_bytes, self._special_token_values
        return {b: i for i, b in enumerate(tb) if b is not None and i not in sv}

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of a whole token (special tokens included); KeyError otherwise."""
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        if (token := self._encoder.get(text_or_bytes)) is not None:
            return token
        try:
            return self._special_tokens[text_or_bytes.decode("utf-8")]
        except (UnicodeDecodeError, KeyError):
            raise KeyError(text_or_bytes) from None

    # -- decoding ---------------------------------------------------------------------------
    def decode_single_token_bytes(self, token: int) -> bytes:
        tb = self.tokenizer.vocab.token_bytes
        if not isinstance(token, (int, np.integer)) or not 0 <= token < len(tb) or tb[token] is None:
            raise KeyError(str(token))
        return tb[token]

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        return [self.decode_single_token_bytes(t) for t in tokens]

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        text = b"".join(self.decode_tokens_bytes(tokens))
        # (SentencePiece: its decoder drops the dummy prefix)
        return text[1:] if self.tokenizer._prefix_tokens and text[:1] == b" " else text

    def decode(self, tokens: Sequence[int], errors: str = "replace") -> str:
        return self.decode_bytes(tokens).decode("utf-8", errors=errors)

    def decode_batch(
        self, batch: Sequence[Sequence[int]], *, errors: str = "replace", num_threads: int = 8
    ) -> list[str]:
        return [self.decode(t, errors=errors) for t in batch]

    def decode_bytes_batch(self, batch: Sequence[Sequence[int]], *, num_threads: int = 8) -> list[bytes]:
        return [self.decode_bytes(t) for t in batch]

    def decode_with_offsets(self, tokens: Sequence[int]) -> tuple[str, list[int]]:
        """tiktoken's rule: each token's offset is the index of the first character holding
        one of its bytes; raises on invalid UTF-8."""
        token_bytes = self.decode_tokens_bytes(tokens)
        text_len, offsets = 0, []
        for token in token_bytes:
            offsets.append(max(0, text_len - (0x80 <= token[0] < 0xC0)))
            text_len += sum(1 for c in token if not 0x80 <= c < 0xC0)
        return b"".join(token_bytes).decode("utf-8", errors="strict"), offsets

    # -- miscellaneous ----------------------------------------------------------------------
    def token_byte_values(self) -> list[bytes]:
        """The byte strings of the ordinary (non-special) tokens, sorted, as tiktoken."""
        return sorted(self._encoder)

    @property
    def eot_token(self) -> int:
        """The `<|endoftext|>` id; KeyError when the vocabulary has none (as tiktoken)."""
        return self._special_tokens["<|endoftext|>"]

    @functools.cached_property
    def special_tokens_set(self) -> set[str]:
        return set(self._special_tokens)

    def is_special_token(self, token: int) -> bool:
        return token in self._special_token_values

    @property
    def n_vocab(self) -> int:
        return self.max_token_value + 1


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
