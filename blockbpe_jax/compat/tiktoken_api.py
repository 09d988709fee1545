"""tiktoken's `Encoding` API over a `Tokenizer` (`tok.as_tiktoken()`).

    enc = tok.as_tiktoken()                  # blockbpe_jax.compat.tiktoken_api.Encoding
    enc.encode("hello <|endoftext|>")        # ValueError, as tiktoken (a disallowed special)
    enc.encode("hello <|endoftext|>", allowed_special="all")   # [..., enc.eot_token]

`Encoding` follows tiktoken's contract (tiktoken/core.py): the same defaults
(`allowed_special=set()`, `disallowed_special="all"`), the same ValueError text for a disallowed
special token found in the text, its exception types (TypeError for an `allowed_special` that is
not "all" or a set, for text that is not a str, for ids that are not integers; OverflowError for
ids outside 0..2**32-1; KeyError for ids and tokens not in the vocabulary; AssertionError from
`is_special_token` given a non-int), lone surrogates replaced by U+FFFD (but
`encode_to_numpy`, which raises UnicodeEncodeError on any surrogate, as tiktoken's does). It
pickles as tiktoken's does, by content. The ids come from the library's encode (default: the
CPU, where the native encode runs on the strings without an XLA call: `ops.host_encoder`), so
they equal tiktoken's for `.tiktoken` vocabularies. The allowed specials split a text into
segments, as tiktoken does, so one host encoder serves every set (no state per set).
Differences: `num_threads` is accepted and ignored (on the CPU a batch is split over the host's
cores; on a device it is one or a few calls, bucketed by length); `encode_with_unstable` and
the private methods (`_encode_bytes`, `_encode_single_piece`, ...) are not offered; `eot_token`
raises KeyError when the vocabulary has no `<|endoftext|>`, as tiktoken does. The HF-style batch
call (`tok(texts, ...)`) is `compat.hf_batch.hf_call`.
"""

from __future__ import annotations

import functools
import operator
from typing import AbstractSet, Collection, Literal, Sequence

import jax
import numpy as np

from .hf_batch import hf_call
from ..tables.specials import NotIn, literal_search
from ..text_rows import has_surrogate, surrogates_as_tiktoken

__all__ = ["Encoding", "hf_call"]

_ROWS_BYTES = 1 << 24  # padded bytes per device call in a batch


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
        return surrogates_as_tiktoken(text).encode("utf-8")


def _not_an_instance(value, of: str) -> TypeError:
    """TypeError in the words of tiktoken's native argument checks."""
    what = "'None'" if value is None else f"'{type(value).__name__}' object"
    return TypeError(f"{what} is not an instance of '{of}'")


def _token_id(token) -> int:
    """A token id as tiktoken's native decode takes it (an unsigned 32-bit integer)."""
    token = operator.index(token)  # TypeError for str, float, ... (numpy ints and bools pass)
    if not 0 <= token < 1 << 32:
        raise OverflowError("out of range integral type conversion attempted")
    return token


def _encoding_from_state(tokenizer, device, mode):
    if isinstance(device, tuple):  # (platform, id) of a JAX device
        device = jax.devices(device[0])[device[1]]
    return Encoding(tokenizer, device=device, mode=mode)


class Encoding:
    """tiktoken's `Encoding` API over a `blockbpe_jax.Tokenizer` (host lists in and out).

    `device`: where encode runs: the CPU (default, `jax.devices("cpu")[0]`: the native encode
    without XLA, microseconds per short string), a JAX device, or "auto": the CPU for texts
    of fewer than `LONG_TEXT_BYTES` UTF-8 bytes and JAX's default device, when it is an
    accelerator, for the others (one text's GPU encode, ids back in a list, beats the host's
    at 32 KiB on every case of benchmarks/single_string.py and loses at 8 KiB on most). A
    new padded width compiles on its first call there (a second or so). On the CPU no JAX
    backend is started (a worker process needs no GPU); devices are resolved at their first use.
    """

    LONG_TEXT_BYTES = 1 << 14

    def __init__(self, tokenizer, *, device=None, mode: str = "exact"):
        if isinstance(device, str) and device != "auto":
            raise ValueError(f"device must be a JAX device, None or 'auto', got {device!r}")
        self.tokenizer = tokenizer
        self._device_arg = device
        self.mode = mode
        self._on_host = device is None or device == "auto" or device.platform == "cpu"
        self._normalizes = tokenizer.normalizes
        vocab = tokenizer.vocab
        self.name = vocab.name
        self._special_tokens = vocab.special_tokens  # (read only, shared: a view costs little)
        self._special_token_values = vocab.special_ids
        self.max_token_value = tokenizer.n_vocab - 1
        self._sets = tokenizer._sets  # (host encoders and the specials' matcher, shared)
        # Texts split at their allowed specials (tiktoken's way) where the segments encode
        # alone as they do in the text: not SentencePiece's dummy prefix, nor specials matched
        # whatever is allowed, nor a normalizer applied to the whole text first.
        self._split = vocab.char_level is None and not vocab.always_special and not self._normalizes

    def __reduce__(self):
        """By content, as tiktoken's Encoding (the Tokenizer pickles its vocabulary)."""
        device = self._device_arg
        if device is not None and not isinstance(device, str):
            device = (device.platform, device.id)
        return (_encoding_from_state, (self.tokenizer, device, self.mode))

    def __repr__(self) -> str:
        return f"<Encoding {self.name!r} (blockbpe_jax)>"

    @functools.cached_property
    def device(self):
        device = self._device_arg
        return jax.devices("cpu")[0] if device is None or device == "auto" else device

    @functools.cached_property
    def _long_texts_on(self):
        """device="auto": where texts of LONG_TEXT_BYTES go (None: the host)."""
        if self._device_arg != "auto":
            return None
        default = jax.devices()[0]
        return default if default.platform != "cpu" else None

    # -- encoding ---------------------------------------------------------------------------
    def _allowed(self, allowed_special, disallowed_special, texts: Sequence[str]) -> frozenset:
        """tiktoken's checks; returns the allowed specials of the vocabulary."""
        specials = self._sets.matcher.names  # (a frozenset of every special, shared)
        if allowed_special == "all":
            allowed_special = specials
        elif texts or disallowed_special == "all":  # (tiktoken: "all" or a set of str)
            if not isinstance(allowed_special, (set, frozenset)):
                raise _not_an_instance(allowed_special, "set")
            if not allowed_special <= specials and any(
                not isinstance(s, str) for s in allowed_special - specials
            ):
                raise TypeError("allowed_special: every element must be a str")
        other_search = None
        if disallowed_special == "all":  # every special not allowed (no set built per call)
            disallowed_special = NotIn(allowed_special) if allowed_special is not specials else ()
        elif disallowed_special:
            disallowed_special = frozenset(disallowed_special)
            others = disallowed_special - specials
            other_search = literal_search(others) if others else None
        if disallowed_special:
            for text in texts:
                hit = self._sets.matcher.find(text, disallowed_special)
                if other_search is not None and (m := other_search(text)) is not None:
                    if hit is None or (m.start(), -len(m.group())) < (hit[0], -len(hit[1])):
                        hit = (m.start(), m.group())
                if hit is not None:
                    raise_disallowed_special_token(hit[1])
        for text in texts:
            if not isinstance(text, str):
                raise _not_an_instance(text, "str")
        # (tiktoken ignores allowed names that are not special tokens)
        return specials.intersection(allowed_special)

    def _encode_texts(self, texts: list[str], allowed: frozenset) -> list[list[int]]:
        """The ids of `texts` with the specials `allowed` matched."""
        if not allowed:
            return self._encode_plain(texts, ())
        find = self._sets.matcher.find
        if not self._split:  # one encoder for the specials found in the texts (a few kept)
            found = set()
            for t in texts:
                pos = 0
                while (hit := find(t, allowed, pos)) is not None:
                    found.add(hit[1])
                    pos = hit[0] + 1
            return self._encode_plain(texts, tuple(sorted(found)))
        segments: list[str] = []
        plans = []  # per text: segment indices, and ~id for a special
        found = False
        for t in texts:
            plan, pos = [], 0
            while (hit := find(t, allowed, pos)) is not None:
                start, name = hit
                if start > pos:
                    plan.append(len(segments))
                    segments.append(t[pos:start])
                plan.append(~self._special_tokens[name])
                pos, found = start + len(name), True
            if pos < len(t) or not plan:
                plan.append(len(segments))
                segments.append(t[pos:] if pos else t)
            plans.append(plan)
        ids = self._encode_plain(segments, ())
        if not found:  # no special in any text: a segment per text
            return ids
        out = []
        for plan in plans:
            row: list[int] = []
            for k in plan:
                if k >= 0:
                    row += ids[k]
                else:
                    row.append(~k)
            out.append(row)
        return out

    def _encode_plain(self, texts: Sequence[str], key: tuple) -> list[list[int]]:
        """The ids with the specials of `key` matched: on the host, the device, or by length."""
        if not self._on_host:
            return self._encode_on(self.device, texts, key)
        if self._device_arg == "auto" and any(self._may_be_long(t) for t in texts):
            long = [k for k, t in enumerate(texts) if self._is_long(t)]
            if long and self._long_texts_on is not None:
                out = [None] * len(texts)
                ids = self._encode_on(self._long_texts_on, [texts[k] for k in long], key)
                for k, row in zip(long, ids):
                    out[k] = row
                short = [k for k, row in enumerate(out) if row is None]
                for k, row in zip(short, self._encode_host([texts[k] for k in short], key)):
                    out[k] = row
                return out
        return self._encode_host(texts, key)

    def _may_be_long(self, text) -> bool:
        return 4 * len(text) >= self.LONG_TEXT_BYTES

    def _is_long(self, text) -> bool:
        """At least LONG_TEXT_BYTES bytes of UTF-8 (counted only where the length in characters
        leaves it open: a character is 1 to 4 bytes)."""
        n, limit = len(text), self.LONG_TEXT_BYTES
        if n >= limit or 4 * n < limit or isinstance(text, bytes) or text.isascii():
            return n >= limit
        return len(text.encode("utf-8", "surrogatepass")) >= limit

    def _encode_host(self, texts: Sequence[str], key: tuple) -> list[list[int]]:
        """The native encode on the strings themselves (no XLA call, no padded copy)."""
        tok = self.tokenizer
        encoder = self._sets.host_encoder(key, self.mode, tok._normalized([], self.mode)[1])
        if not self._normalizes:
            try:
                return encoder.encode(texts)  # (str read as its UTF-8 form, no copy)
            except UnicodeEncodeError:  # lone surrogates: replaced below, as tiktoken
                pass
        raw = [_utf8(t) for t in texts]
        normalized, assumed, parts = tok._normalized(raw, self.mode, key)
        try:
            out = encoder.encode(normalized)
        except RuntimeError as e:  # a row the executor reports (count -2: pretok/lowercase.h)
            if assumed or "reported count -2" not in str(e):
                raise
            normalized, assumed, parts = tok._normalized(raw, self.mode, key, on_host=True)
            out = self._sets.host_encoder(key, self.mode, assumed).encode(normalized)
        if parts:  # (rows whose normalized text spells other specials: Tokenizer._normalize_around_specials)
            gaps = self._sets.host_encoder((), self.mode, assumed)
            joined = tok._join_parts([parts.get(k) for k in range(len(out))], gaps.encode)
            for k in parts:
                out[k] = joined[k]
        return out

    def _encode_on(self, device, texts: Sequence[str], key: tuple) -> list[list[int]]:
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
                enc = self.tokenizer.encode_batch(
                    [raw[k] for k in chunk], max_len=width, allowed_special=key or "none",
                    mode=self.mode, device=device,
                )  # fmt: skip
                flat, counts = enc.flat_numpy()  # (the rows' ids alone cross to the host)
                counts = counts.tolist()  # (Python ints: NumPy's reductions cost more on a few rows)
                if min(counts) < 0 or max(counts) > enc.ids.shape[1]:
                    raise RuntimeError(f"encode failed: counts {counts} (width {width})")
                flat, at = flat.tolist(), 0
                for j, k in enumerate(chunk):
                    out[k] = flat[at : at + counts[j]]
                    at += counts[j]
        return out

    def encode_ordinary(self, text: str) -> list[int]:
        """`encode(text, disallowed_special=())`: special tokens' text is ordinary text."""
        if not isinstance(text, str):
            raise _not_an_instance(text, "str")
        if not self._on_host or (self._device_arg == "auto" and self._may_be_long(text)):
            return self._encode_plain([text], ())[0]
        return self._encode_host((text,), ())[0]

    def encode(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | AbstractSet[str] = set(),  # noqa: B006
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[int]:
        """tiktoken's `encode`: a disallowed special token in `text` raises ValueError."""
        allowed = self._allowed(allowed_special, disallowed_special, (text,))
        return self._encode_texts([text], allowed)[0]

    def encode_to_numpy(
        self,
        text: str,
        *,
        allowed_special: Literal["all"] | AbstractSet[str] = set(),  # noqa: B006
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> np.ndarray:
        """uint32 ids; as tiktoken's, a text holding a surrogate (lone or paired) raises
        UnicodeEncodeError (`encode` replaces them)."""
        allowed = self._allowed(allowed_special, disallowed_special, (text,))
        if has_surrogate(text):
            text.encode("utf-8")  # (raises tiktoken's UnicodeEncodeError)
        return np.asarray(self._encode_texts([text], allowed)[0], dtype=np.uint32)

    def encode_ordinary_batch(self, text: Sequence[str], *, num_threads: int = 8) -> list[list[int]]:
        texts = list(text)
        for t in texts:
            if not isinstance(t, str):
                raise _not_an_instance(t, "str")
        return self._encode_plain(texts, ())

    def encode_batch(
        self,
        text: Sequence[str],
        *,
        num_threads: int = 8,
        allowed_special: Literal["all"] | AbstractSet[str] = set(),  # noqa: B006
        disallowed_special: Literal["all"] | Collection[str] = "all",
    ) -> list[list[int]]:
        """Lists of ids (not `Tokenizer.encode_batch`'s padded arrays); `num_threads` is ignored."""
        texts = list(text)
        return self._encode_texts(texts, self._allowed(allowed_special, disallowed_special, texts))

    @property
    def _encoder(self) -> dict:
        return self._sets.ordinary_ids

    def encode_single_token(self, text_or_bytes: str | bytes) -> int:
        """The id of a whole token (special tokens included); KeyError otherwise."""
        if isinstance(text_or_bytes, str):
            text_or_bytes = text_or_bytes.encode("utf-8")
        if not isinstance(text_or_bytes, bytes):
            raise _not_an_instance(text_or_bytes, "bytes")
        if (token := self._encoder.get(text_or_bytes)) is not None:
            return token
        try:
            return self._special_tokens[text_or_bytes.decode("utf-8")]
        except (UnicodeDecodeError, KeyError):
            raise KeyError(text_or_bytes) from None

    # -- decoding ---------------------------------------------------------------------------
    def decode_single_token_bytes(self, token: int) -> bytes:
        """KeyError for an id not in the vocabulary; OverflowError / TypeError as tiktoken for
        one outside 0..2**32-1 / not an integer."""
        token = _token_id(token)
        tb = self.tokenizer.vocab.token_bytes
        if token >= len(tb) or tb[token] is None:
            raise KeyError(f"Invalid token for decoding: {token}")
        return tb[token]

    def decode_tokens_bytes(self, tokens: Sequence[int]) -> list[bytes]:
        return [self.decode_single_token_bytes(t) for t in tokens]

    def decode_bytes(self, tokens: Sequence[int]) -> bytes:
        if isinstance(tokens, (str, bytes)) or not hasattr(tokens, "__iter__"):
            raise _not_an_instance(tokens, "Sequence")
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
        assert isinstance(token, int)  # (tiktoken's check, to the letter)
        return token in self._special_token_values

    @property
    def n_vocab(self) -> int:
        return self.max_token_value + 1
