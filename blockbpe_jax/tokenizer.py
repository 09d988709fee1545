"""`Tokenizer`: a vocabulary, its host tables, its device tables, and host conveniences."""

from __future__ import annotations

import functools
import json
import os
from typing import Iterable, Iterator, Sequence

import jax
import numpy as np

from . import pretok, staging
from .text_rows import pack_strings, text_list, without_surrogates
from .vocab import gguf, sentencepiece, tekken
from .ops import primitive
from .tables import sets, specials
from .vocab import Vocab, from_tiktoken_encoding, load_tiktoken_file
from .vocab.hf_fields import read_json
from .vocab.hf_json import vocab_from_tokenizer_json


class Tokenizer:
    """Byte-level BPE vocabulary ready for `blockbpe_jax.encode`.

    Build one with `Tokenizer.from_file(path)` (a `.tiktoken` rank file, a Llama-3
    `tokenizer.model`, or an HF `tokenizer.json`), `from_tiktoken(encoding)`,
    `from_tiktoken_name("cl100k_base")` or `from_hf(tokenizers.Tokenizer)`.
    Tables are built at their first use: the vocabulary's once on the host and once per
    device, what depends on the allowed specials for the last few sets (tables/sets.py). A
    Tokenizer pickles by its content (no file needed to unpickle it), as tiktoken's Encoding.
    """

    def __init__(self, vocab: Vocab):
        self.vocab = vocab
        # Tables, device copies and host encoders, built at their first use (tables/sets.py).
        self._sets = sets.TableSets(vocab)

    def __reduce__(self):
        """Pickled by content (the vocabulary, `Vocab.__reduce__`), as tiktoken's `Encoding`: the
        copy needs no file, and builds its tables and caches at its first use."""
        return (type(self), (self.vocab,))

    @property
    def _tables(self):
        return self._sets.vocab_tables

    # -- construction ---------------------------------------------------------------------
    @classmethod
    def from_file(cls, path: str | os.PathLike, **kwargs) -> "Tokenizer":
        path = os.fspath(path)
        try:
            with open(path, "rb") as f:
                head = f.read(64)
        except OSError:
            head = b""  # (the loader that reads it says why)
        if gguf.is_gguf(head):
            return cls.from_gguf(path)
        if sentencepiece.is_sentencepiece_model(head):
            return cls(sentencepiece.load_sentencepiece_model(path))
        if path.endswith(".json"):  # HF tokenizer.json or Mistral Tekken
            doc = read_json(path)
            if tekken.is_tekken_json(doc):
                return cls(tekken.vocab_from_tekken(doc, path))
            return cls(vocab_from_tokenizer_json(doc, path))
        return cls(load_tiktoken_file(path, **kwargs))

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Tokenizer":
        """From a GGUF file's tokenizer (llama.cpp's Llama 2, Gemma 3/4), its header enough: vocab/gguf.py."""
        return cls(gguf.load_gguf(path))

    @classmethod
    def from_sentencepiece(cls, model) -> "Tokenizer":
        """From a SentencePiece BPE model: a `.model` path or a
        `sentencepiece.SentencePieceProcessor` (its serialized model)."""
        if isinstance(model, (str, os.PathLike)):
            return cls(sentencepiece.load_sentencepiece_model(model))
        if not callable(getattr(model, "serialized_model_proto", None)):
            raise TypeError(
                f"expected a .model path or a sentencepiece.SentencePieceProcessor, got {type(model).__name__}"
            )
        return cls(
            sentencepiece.vocab_from_sentencepiece(
                model.serialized_model_proto(), "<sentencepiece.SentencePieceProcessor>"
            )
        )

    @classmethod
    def from_tiktoken(cls, encoding) -> "Tokenizer":
        """From a `tiktoken.Encoding` (its ranks, specials and pattern)."""
        return cls(from_tiktoken_encoding(encoding))

    @classmethod
    def from_tiktoken_name(cls, name: str) -> "Tokenizer":
        """From a tiktoken encoding name, through tiktoken's cache (TIKTOKEN_CACHE_DIR works
        offline)."""
        import tiktoken

        return cls.from_tiktoken(tiktoken.get_encoding(name))

    @classmethod
    def from_hf(cls, tokenizer) -> "Tokenizer":
        """From a `tokenizers.Tokenizer` (byte-level BPE), via its JSON serialisation."""
        if not callable(getattr(tokenizer, "to_str", None)):
            hint = (
                " (for a tokenizer.json file, Tokenizer.from_file)"
                if isinstance(tokenizer, (str, os.PathLike))
                else ""
            )
            raise TypeError(f"expected a tokenizers.Tokenizer, got {type(tokenizer).__name__}{hint}")
        doc = json.loads(tokenizer.to_str())
        return cls(vocab_from_tokenizer_json(doc, "<tokenizers.Tokenizer>"))

    def __repr__(self) -> str:
        return (
            f"Tokenizer({self.vocab.name!r}, n_vocab={self.vocab.n_vocab}, "
            f"pattern={self.vocab.pattern_name}, specials={len(self.vocab.special_tokens)})"
        )

    @functools.cached_property
    def n_vocab(self) -> int:
        """The largest token id + 1, as tiktoken's `Encoding.n_vocab` (`max_token_value + 1`)."""
        return specials.n_vocab(self.vocab)

    @property
    def eot_token(self) -> int:
        """The end-of-text special's id, as tiktoken's `Encoding.eot_token`, by family
        (`specials.EOT_NAMES`); KeyError when the vocabulary has none."""
        return specials.eot_token(self.vocab)

    # -- tables ---------------------------------------------------------------------------
    @property
    def max_piece_len(self) -> int:
        return self._tables.max_piece_len

    def _special_key(self, allowed_special) -> tuple:
        if allowed_special is None or allowed_special == "none":
            return ()
        if allowed_special == "all":
            return tuple(sorted(self.vocab.special_tokens))
        if isinstance(allowed_special, str):
            what = f"the string {allowed_special!r}"
            raise ValueError(
                f"allowed_special must be 'all', 'none' or a collection of special tokens, got {what}"
            )
        try:
            names = tuple(sorted(set(allowed_special)))
        except TypeError:  # (not iterable, or items that do not sort: not token strings)
            raise TypeError(
                "allowed_special must be 'all', 'none' or a collection of special tokens, "
                f"got {type(allowed_special).__name__}"
            ) from None
        unknown = [s for s in names if s not in self.vocab.special_tokens]
        if unknown:
            raise ValueError(f"not special tokens of {self.vocab.name}: {unknown}")
        return names

    def host_tables(self, allowed_special="none") -> tuple[np.ndarray, ...]:
        """The FFI operands after (data, lengths), as NumPy arrays."""
        return self._sets.host_arrays(self._special_key(allowed_special))

    @property
    def nfc(self) -> bool:
        """Whether the tokenizer's normalizer is NFC (exact mode requires text in NFC)."""
        return bool(self.vocab.pretokenizer and self.vocab.pretokenizer.nfc)

    @property
    def lowercase(self) -> bool:
        """Whether the tokenizer's normalizer has Lowercase (exact mode lowercases the text)."""
        return bool(self.vocab.pretokenizer and self.vocab.pretokenizer.lowercase)

    @property
    def normalizes(self) -> bool:
        """Whether exact mode has a normalizer (NFC, Lowercase): `normalize` applies it."""
        return self.nfc or self.lowercase

    @property
    def _device_normalizes(self) -> bool:
        """Whether exact mode leaves the normalizer to the executors (`Normalizer.on_device`):
        encode_batch then sends the text as it is and normalizes the rows they report."""
        return bool(self.vocab.pretokenizer) and self.vocab.pretokenizer.normalizer.on_device

    def _pretok(self) -> tuple[np.ndarray, int, str | None]:
        """(operand, stages, None) of the pre-tokenizer, or (placeholder, -1, why exact mode is
        unavailable). Compiled once, at the first use."""
        return self._sets.pretok()

    def tables(self, allowed_special="none", device=None, *, host: bool = False) -> primitive.EncodeTables:
        """The encode operands on `device` (default: JAX's default device), cached: a pytree
        to pass to jitted functions as an argument. host=True: the same over the NumPy arrays
        (for `primitive.host_encoder`). The vocabulary's arrays are copied to a device once; what
        depends on the allowed specials is kept for the last `TableSets.MAX_SETS` sets."""
        device = "host" if host else device or jax.devices()[0]
        return self._sets.encode_tables(self._special_key(allowed_special), device)

    def table_nbytes(self, allowed_special="none") -> int:
        return sum(a.nbytes for a in self.host_tables(allowed_special))

    # -- host conveniences ----------------------------------------------------------------
    def encode_batch(
        self,
        texts: Sequence[str | bytes],
        *,
        max_tokens: int | None = None,
        max_len: int | None = None,
        allowed_special="none",
        mode: str = "exact",
        pad_id: int = 0,
        block_size: int = 256,
        device=None,
    ) -> primitive.Encoded:
        """Packs strings into uint8[B, L] and calls `encode` on `device` (default: JAX's
        default device).

        L is `max_len` or the longest string rounded up to a power of two (so repeated calls
        reuse compiled shapes); `max_tokens` defaults to the most tokens L bytes can give, which
        never truncates: L, or L + 1 where a SentencePiece dummy prefix may come first. On a CUDA
        GPU the strings are packed into pinned memory and copied by one DMA
        (`blockbpe_jax/staging.py`); elsewhere the NumPy arrays travel with the call. The
        normalizer (NFC, Lowercase) is the executors' (`pretok.Normalizer.on_device`, else it
        runs here first); the rare rows they report (NFC wider than L, hundreds of marks on a
        letter, a code point such as U+0130 not lowercased in place) are normalized here and
        encoded again, which waits for the counts. A str's
        surrogates are as tiktoken has them: a pair joined into its code point, a lone one U+FFFD.
        """
        return self._staged_batch(
            texts,
            max_tokens=max_tokens,
            max_len=max_len,
            allowed_special=allowed_special,
            mode=mode,
            pad_id=pad_id,
            block_size=block_size,
            device=device,
        ).encode()

    def encode_stream(
        self, batches: Iterable[Sequence[str | bytes]], **kwargs
    ) -> Iterator[primitive.Encoded]:
        """`encode_batch(batch, **kwargs)` of each batch, in order, as a generator. On a CUDA
        GPU each batch is packed into pinned memory and its copy started before the batch
        before it is encoded, so that packing, copying and encoding overlap (elsewhere this is
        encode_batch in a loop). The results are dispatched, not waited for, but a normalizing
        tokenizer's, whose counts are read for reported rows once they are ready or two later
        batches are dispatched (staging.MAX_UNFINISHED). A bad batch raises after the result
        of the batch before it."""
        return staging.pipelined(lambda batch: self._staged_batch(batch, **kwargs), batches)

    @functools.cached_property
    def _prefix_tokens(self) -> int:
        """Tokens a text may have beyond its bytes: 1 with a dummy prefix (vocab/char_bpe.py keeps
        every count <= bytes + 1), else 0."""
        cl = self.vocab.char_level
        return int(cl is not None and cl.prefix_id >= 0)

    def _staged_batch(
        self,
        texts,
        *,
        max_tokens=None,
        max_len=None,
        allowed_special="none",
        mode="exact",
        pad_id=0,
        block_size=256,
        device=None,
    ) -> staging.StagedBatch:
        """encode_batch's first half: the texts checked, normalized and packed (on a CUDA GPU:
        into pinned memory, their copy to the device started)."""
        raw = text_list(texts, max_len)
        texts, normalized, split = self._normalized(raw, mode, allowed_special)
        target = device or jax.devices()[0]

        on_device = mode == "exact" and self._device_normalizes

        # Packing guarantees 0 <= lengths <= L: no need for the handler's read-back.
        def run(data, lengths, normalized=normalized, allowed=allowed_special, width=max_tokens):
            return primitive.encode(
                data,
                lengths,
                self.tables(allowed, device),
                max_tokens=width if width is not None else data.shape[1] + self._prefix_tokens,
                pad_id=pad_id,
                mode=mode,
                block_size=block_size,
                check_lengths=False,
                assume_normalized=normalized,
            )

        finish = None
        if (on_device and not normalized) or split:

            def finish(out):  # (waits for the counts: encode_stream once ready or two batches on)
                return self._rows_on_host(out, raw, split, allowed_special, run, max_tokens is None, pad_id)

        if staging.available(target) and len(texts) > 0 and max_len != 0:
            # GPU: pinned staging, one DMA, a DLPack view (staging.py says why and how).
            try:
                staged = staging.stage_strings(texts, max_len=max_len, device=target)
            except UnicodeEncodeError:  # surrogates: as tiktoken (the slot was given back)
                texts, split = self._normalized(without_surrogates(raw), mode, allowed_special)[::2]
                staged = staging.stage_strings(texts, max_len=max_len, device=target)
            return staging.StagedBatch(run, staged=staged, finish=finish)
        try:
            data, lengths = pack_strings(texts, max_len=max_len)
        except UnicodeEncodeError:
            texts, split = self._normalized(without_surrogates(raw), mode, allowed_special)[::2]
            data, lengths = pack_strings(texts, max_len=max_len)
        if device is not None and device != jax.devices()[0]:
            data, lengths = jax.device_put((data, lengths), device)
        # (else the NumPy arrays ride along with the jitted call to the default device)
        return staging.StagedBatch(run, arrays=(data, lengths), finish=finish)

    def _normalized(self, texts: list, mode: str, allowed_special="none", *, on_host=False) -> tuple:
        """(the texts as encode sees them, whether they were normalized, the rows to encode in
        parts): exact mode on a tokenizer with a normalizer normalizes first (encode then
        trusts the text), but not where the executors do (`_device_normalizes`) unless
        `on_host`. A row whose normalized text the encode would match other specials in
        (`_normalize_around_specials`) is left empty here, its parts (normalized gaps, special
        ids) returned for `_join_parts`."""
        if not (mode == "exact" and self.normalizes and (on_host or not self._device_normalizes)):
            return texts, False, {}
        out, parts = self._normalize_around_specials(texts, allowed_special)
        return [t[:0] if k in parts else t for k, t in enumerate(out)], True, parts

    def _normalize_texts(self, texts: list) -> list:
        """The normalizer on whole texts (`normalize` without specials)."""
        norm = self.vocab.pretokenizer.normalizer
        return sets.normalize_texts(norm if self.lowercase else pretok.Normalizer(("nfc",)), texts)

    def _normalize_around_specials(self, texts: list, allowed_special) -> tuple[list, dict]:
        """(the texts normalized around the specials encode accepts in them, the rows to
        encode in parts): `specials.normalize_around` with this tokenizer's tables."""
        tables = self.tables(allowed_special, host=True)
        escaped = specials.specials_escaped(self.vocab)
        return specials.normalize_around(tables, escaped, self._normalize_texts, texts)

    def _rows_on_host(self, out, texts, split, allowed_special, run, widen: bool, pad_id: int):
        """`out` with some rows encoded again: those the executors reported (count -2: the
        row's NFC does not fit its width, or has a segment of hundreds of combining marks, or
        may change in a call with specials on the GPU, or a code point is not lowercased in place)
        and those in `split` (packed empty: `_normalized`), from their raw `texts` (their
        surrogates as tiktoken has them, as packed), normalized here around their specials.
        Reads the counts back (waits for the call; one pinned copy, staging.read_back: JAX's
        own copy has a large fixed cost); widens the ids where a row's tokens need more columns
        than `out` has and the caller did not fix max_tokens."""
        import jax.numpy as jnp

        (counts,) = staging.read_back([out.counts])
        bad = np.union1d(np.flatnonzero(counts == -2), np.asarray(sorted(split), dtype=np.int64))
        if not bad.size:
            return out
        # (surrogates looked for in these rows alone: a regex over a whole batch of strs costs
        # milliseconds, where the batch's encode takes one)
        sub, parts = self._normalize_around_specials(
            without_surrogates([texts[i] for i in bad]), allowed_special
        )
        device = next(iter(out.ids.devices()))
        whole = [j for j in range(len(sub)) if j not in parts]
        if parts:

            def encode_gaps(gaps):
                enc = run(
                    *jax.device_put(pack_strings(gaps), device), normalized=True, allowed="none", width=None
                )
                ids, counts = staging.read_back([enc.ids, enc.counts])
                return [ids[k, : counts[k]].tolist() for k in range(len(gaps))]

            joined = self._join_parts([parts.get(j) for j in range(len(sub))], encode_gaps)
            sub_counts = np.asarray([len(toks) for toks in joined], dtype=np.int32)
            sub_ids = np.full((len(sub), max(1, int(sub_counts.max()))), pad_id, dtype=np.int32)
            for j, toks in enumerate(joined):
                sub_ids[j, : len(toks)] = toks
            if whole:  # (the rows in parts joined by the others, encoded whole)
                data, lengths = pack_strings([sub[j] for j in whole])
                fixed = run(*jax.device_put((data, lengths), device), normalized=True)
                ids_w, counts_w = staging.read_back([fixed.ids, fixed.counts])
                sub_ids = _padded(sub_ids, ids_w.shape[1], pad_id)
                sub_ids[whole, : ids_w.shape[1]] = ids_w
                sub_counts[whole] = counts_w
            fixed = primitive.Encoded(*jax.device_put((sub_ids, sub_counts), device))
        else:
            data, lengths = pack_strings(sub)
            data, lengths = jax.device_put((data, lengths), device)
            fixed = run(data, lengths, normalized=True)
        ids, sub_ids = out.ids, fixed.ids
        if widen and sub_ids.shape[1] > ids.shape[1]:
            ids = jnp.pad(ids, ((0, 0), (0, sub_ids.shape[1] - ids.shape[1])), constant_values=pad_id)
        if sub_ids.shape[1] < ids.shape[1]:  # (the reported rows packed narrower than the batch)
            sub_ids = jnp.pad(sub_ids, ((0, 0), (0, ids.shape[1] - sub_ids.shape[1])), constant_values=pad_id)
        sub_ids = sub_ids[:, : ids.shape[1]]
        idx = jnp.asarray(bad)
        return primitive.Encoded(ids.at[idx].set(sub_ids), out.counts.at[idx].set(fixed.counts))

    def _join_parts(self, rows: list, encode_gaps) -> list[list[int]]:
        """`specials.join_parts`; a SentencePiece-style vocabulary's gaps would need its
        dummy-prefix rule and its always-matched pieces: not done, so such a row raises."""
        if any(row is not None for row in rows) and (
            self.vocab.char_level is not None or self.vocab.always_special
        ):
            raise NotImplementedError(
                f"{self.vocab.name}: a text whose normalized form spells a special token that its raw text"
                " does not have, with SentencePiece-style symbols (not supported): encode it without"
                " allowed specials"
            )
        return specials.join_parts(rows, encode_gaps)

    def as_tiktoken(self, device=None):
        """tiktoken's `Encoding` API over this tokenizer (`blockbpe_jax.compat.tiktoken_api`); device:
        None (the CPU), a JAX device, or "auto" (long texts on the accelerator)."""
        from .compat.tiktoken_api import Encoding

        return Encoding(self, device=device)

    def __call__(self, texts, **kwargs) -> dict:
        """HF-style batch call -> jax arrays (`blockbpe_jax.compat.hf_batch.hf_call`)."""
        from .compat.hf_batch import hf_call

        return hf_call(self, texts, **kwargs)

    def encode_files(self, paths, out_prefix, **kwargs) -> dict:
        """The corpus job (`blockbpe-jax encode`): files into flat shards (`corpus.job.encode_files`)."""
        from .corpus import job

        return job.encode_files(self, paths, out_prefix, **kwargs)

    def encode_files_to_arrays(self, paths, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        """`encode_files` with the ids left in memory (`corpus.job.encode_files_to_arrays`)."""
        from .corpus import job

        return job.encode_files_to_arrays(self, paths, **kwargs)

    def encode_arrow(self, column, **kwargs) -> tuple[np.ndarray, np.ndarray]:
        """An Arrow string column in memory, `ds.data.column("text")` (`corpus.job.encode_arrow`)."""
        from .corpus import job

        return job.encode_arrow(self, column, **kwargs)

    def encode_dataset(self, ds, column: str = "text", **kwargs):
        """An HF datasets.Dataset with `column`'s ids added as `input_ids` (list<int32>), through
        `encode_arrow`: no Python string per row (`compat.hf_datasets.encode_dataset`)."""
        from .compat.hf_datasets import encode_dataset

        return encode_dataset(self, ds, column, **kwargs)

    def normalize(self, texts: Sequence[str | bytes], allowed_special="none") -> list:
        """The texts as the tokenizer's normalizer leaves them (NFC and/or Lowercase in its order,
        or unchanged). `encode` on raw bytes checks NFC and lowercases most code points itself,
        and reports (count -2, ffi/pretok/nfc.h and lowercase.h) a string that may not be in NFC
        or has a code point whose lowercase changes length, so normalize first where that may
        happen (NFC alone, the executors normalize: nothing is reported but rows whose NFC
        outgrows their width). Bytes that are not valid UTF-8 keep those bytes, and their valid
        parts are normalized (as the executors do). With allowed_special, the specials that encode
        accepts in a text (matched in the raw text) stay as they are and only the text between
        them is normalized, as HF does with its added tokens."""
        if not self.normalizes:
            return list(texts)
        return self._normalize_around_specials(list(texts), allowed_special)[0]

    def decode_bytes(self, ids, counts) -> list[bytes]:
        """Token ids (padded rows plus counts) back to byte strings."""
        ids, counts = staging.read_back([ids, counts])
        if not np.issubdtype(ids.dtype, np.integer) or not np.issubdtype(counts.dtype, np.integer):
            raise TypeError(f"decode: ids and counts must be integers, got {ids.dtype} and {counts.dtype}")
        if ids.ndim < 1 or counts.shape != ids.shape[:-1]:
            raise ValueError(
                f"decode: counts must have the shape of the ids' rows, {list(ids.shape[:-1])}, "
                f"got {list(counts.shape)}"
            )
        if (counts < 0).any():
            b = int(np.flatnonzero(counts.reshape(-1) < 0)[0])
            raise ValueError(
                f"decode: counts[{b}] = {int(counts.reshape(-1)[b])} is negative "
                f"(-1 flags a row whose input length was invalid)"
            )
        counts = np.minimum(counts, ids.shape[-1])
        tb = self.vocab.token_bytes
        dummy_prefix = self._prefix_tokens > 0
        out = []
        for row, n in zip(ids.reshape(-1, ids.shape[-1]), counts.reshape(-1)):
            row = row[: int(n)].tolist()
            bad = [i for i in row if not 0 <= i < len(tb) or tb[i] is None]
            if bad:
                raise ValueError(f"decode: ids not in the vocabulary: {bad[:10]}")
            text = b"".join(tb[i] for i in row)
            # SentencePiece's decoder drops the space its dummy prefix put in front.
            out.append(text[1:] if dummy_prefix and text[:1] == b" " else text)
        return out

    def decode(self, ids, counts, errors: str = "replace") -> list[str]:
        """Token ids back to strings (`errors` as in bytes.decode, like tiktoken's)."""
        return [b.decode("utf-8", errors=errors) for b in self.decode_bytes(ids, counts)]


def _padded(ids: np.ndarray, width: int, pad_id: int) -> np.ndarray:
    """ids with at least `width` columns (pad_id after), writable."""
    if ids.shape[1] >= width:
        return np.array(ids)
    return np.pad(ids, ((0, 0), (0, width - ids.shape[1])), constant_values=pad_id)
