"""A `Tokenizer`'s tables as its encode calls need them: built at their first use (so that a
tokenizer unpickled in a worker process costs nothing until it encodes), shared by every set
of allowed specials, and cached within bounds.

The vocabulary's tables (tens of MB) exist once on the host and once per device that encodes.
What depends on the allowed specials is small (their bytes and ids: `SpecialTables`) and is
kept per set in least-recently-used caches bounded by entries and bytes, as are the host
encoders (`primitive.host_encoder` copies the tables it binds: one per set would be MBs each).
"""

from __future__ import annotations

import functools
import os
import threading

import jax
import numpy as np

from ..ops import primitive
from .. import pretok
from .cache import vocab_tables
from ..pretok import normalizer
from .build import SPECIAL_OPERANDS, SpecialTables, build_special_tables
from .lru import BoundedCache


# The misses' cache on each device (ffi/cuda/miss_cache.cuh): rows of 32 int32, 2**18 of them
# (32 MB) unless BLOCKBPE_MISS_CACHE_ROWS says otherwise (a power of two; 1 or 0: none). The host's
# tables get none (the CPU encoder does not use it).
MISS_CACHE_ROW_INTS = 32
MISS_CACHE_ROWS = 1 << 18
_NO_MISS_CACHE = np.zeros((1, MISS_CACHE_ROW_INTS), dtype=np.int32)


def miss_cache_rows() -> int:
    """The rows of a new device's misses' cache (BLOCKBPE_MISS_CACHE_ROWS, else MISS_CACHE_ROWS)."""
    raw = os.environ.get("BLOCKBPE_MISS_CACHE_ROWS")
    if raw is None:
        return MISS_CACHE_ROWS
    try:
        rows = int(raw)
    except ValueError:
        rows = -1
    if rows < 0 or (rows > 1 and rows & (rows - 1)):
        raise ValueError(f"BLOCKBPE_MISS_CACHE_ROWS must be 0, 1 or a power of two, got {raw!r}")
    return max(rows, 1)


def _special_bytes(t: SpecialTables | primitive.EncodeTables) -> int:
    """What a set of allowed specials holds of its own: its special arrays (NumPy's or JAX's; the
    rest of an EncodeTables is shared)."""
    return sum(getattr(t, n).nbytes for n in SPECIAL_OPERANDS)


class TableSets:
    """The built state of one vocabulary: its host tables, pre-tokenizer operand, device copies
    and host encoders, each built at its first use."""

    MAX_SETS = 64  # special sets kept per cache
    MAX_SET_BYTES = 16 << 20  # their special tables' bytes, per cache
    MAX_HOST_ENCODERS = 4  # host encoders kept (each holds a copy of the tables)

    def __init__(self, vocab):
        self.vocab = vocab
        self._lock = threading.Lock()
        self._vocab_tables = None
        self._pretok: tuple | None = None
        self._nfc_pairs = None
        self._specials = BoundedCache(self.MAX_SETS, self.MAX_SET_BYTES)
        self._bases: dict = {}  # device -> the vocabulary's arrays there (shared by every set)
        self._tables = BoundedCache(self.MAX_SETS, self.MAX_SET_BYTES)  # (device, key) -> EncodeTables
        self._encoders = BoundedCache(self.MAX_HOST_ENCODERS, 1 << 62)
        self._matcher = None

    @functools.cached_property
    def ordinary_ids(self) -> dict:
        """{bytes: id} of the ordinary (non-special) tokens (the tiktoken view's lookups)."""
        tb, specials = self.vocab.token_bytes, self.vocab.special_ids
        return {b: i for i, b in enumerate(tb) if b is not None and i not in specials}

    @property
    def matcher(self):
        """`tables.specials.SpecialMatcher` over the vocabulary's special tokens."""
        if self._matcher is None:
            from .specials import SpecialMatcher

            self._matcher = SpecialMatcher(self.vocab.special_tokens)
        return self._matcher

    @property
    def vocab_tables(self):
        if self._vocab_tables is None:
            with self._lock:
                if self._vocab_tables is None:
                    self._vocab_tables = vocab_tables(self.vocab)
        return self._vocab_tables

    def pretok(self) -> tuple[np.ndarray, int, str | None]:
        if self._pretok is None:
            with self._lock:
                if self._pretok is None:
                    self._pretok = pretok_operand(self.vocab)
        return self._pretok

    def _normalizer(self) -> tuple[bool, bool]:
        p = self.vocab.pretokenizer
        return bool(p and p.nfc), bool(p and p.lowercase)

    def special_tables(self, key: tuple) -> SpecialTables:
        return self._specials.get_or_build(key, lambda: build_special_tables(self.vocab, key), _special_bytes)

    def host_arrays(self, key: tuple) -> tuple[np.ndarray, ...]:
        """The FFI operands after (data, lengths) for the allowed specials `key`."""
        t, sp = self.vocab_tables, self.special_tables(key)
        if self._nfc_pairs is None:
            p = self.vocab.pretokenizer
            rewrite = bool(p) and pretok.device_normalizes(p.normalizer)
            self._nfc_pairs = pretok.nfc_pairs(*self._normalizer(), rewrite=rewrite)
        return (
            *(t.pair_table, t.byte_ids, t.piece_table, t.token_offsets, t.token_data),
            *(getattr(sp, n) for n in SPECIAL_OPERANDS),
            *(self.pretok()[0], self._nfc_pairs, t.char_table, _NO_MISS_CACHE),
        )

    def encode_tables(self, key: tuple, device) -> primitive.EncodeTables:
        """EncodeTables for `key` on `device` ("host": over the NumPy arrays)."""
        return self._tables.get_or_build(
            (device, key), lambda: self._build_tables(key, device), _special_bytes
        )

    def _build_tables(self, key: tuple, device) -> primitive.EncodeTables:
        arrays = list(self.host_arrays(key))
        if device != "host":
            names = primitive.TABLE_OPERANDS
            # Concrete arrays even when first asked for inside a trace (no tracer is cached).
            with jax.ensure_compile_time_eval():
                base = self._bases.get(device)
                if base is None:
                    # (the vocabulary's arrays, shared by every set of allowed specials)
                    base = {
                        n: jax.device_put(a, device)
                        for n, a in zip(names, arrays)
                        if n not in SPECIAL_OPERANDS and n != "miss_cache"
                    }
                    # (zeros made there: a fresh cache per device, never copied from another)
                    rows = miss_cache_rows() if getattr(device, "platform", "") == "gpu" else 1
                    base["miss_cache"] = jax.numpy.zeros((rows, MISS_CACHE_ROW_INTS), np.int32, device=device)
                    with self._lock:
                        base = self._bases.setdefault(device, base)
                arrays = [base[n] if n in base else jax.device_put(a, device) for n, a in zip(names, arrays)]
        vocab, t = self.vocab, self.vocab_tables
        _, exact, error = self.pretok()
        nfc, lowercase = self._normalizer()
        return primitive.EncodeTables(
            *arrays,
            name=vocab.name,
            exact_stages=exact,
            exact_error=error,
            symbols=t.symbols,
            char_runs=t.char_runs,
            nfc=nfc,
            lowercase=lowercase,
            # (every vocabulary's piece table is exact: build.whole_piece_ids; SentencePiece BPE's
            # holds its characters)
            max_piece_len=t.max_piece_len,
            rank_is_id=t.rank_is_id,
            specials=key,
        )

    def host_encoder(self, key: tuple, mode: str, assume_normalized: bool):
        """`primitive.host_encoder` of the tables for `key`, the few last used kept."""
        return self._encoders.get_or_build(
            (key, mode, assume_normalized),
            lambda: primitive.host_encoder(
                self.encode_tables(key, "host"), mode=mode, assume_normalized=assume_normalized
            ),
            lambda _: 1,
        )


def pretok_operand(vocab) -> tuple[np.ndarray, int, str | None]:
    """(operand, stages, None) of `vocab`'s pre-tokenizer, or (placeholder, -1, why exact mode
    is unavailable)."""
    placeholder = pretok.BYTES_MODE.operand()
    if vocab.unsupported:
        return placeholder, -1, vocab.unsupported
    if vocab.char_level is not None:  # SentencePiece BPE: no pre-tokenizer
        return placeholder, 0, None
    if vocab.pretokenizer is None:
        from ..vocab.patterns import KNOWN_PATTERNS

        names = ", ".join(KNOWN_PATTERNS)
        return (
            placeholder,
            -1,
            "it has no pre-tokenizer pattern: give it one when loading the file, in Python "
            f"`Tokenizer.from_file(path, pattern=...)` (a known pattern's name: {names}; or a "
            f"regex), on the command line `--pattern NAME|REGEX`",
        )
    try:
        return vocab.pretokenizer.operand(), len(vocab.pretokenizer.stages), None
    except pretok.PretokenizerUnsupported as e:
        return placeholder, -1, str(e)


def normalize_texts(norm, texts) -> list:
    """`Tokenizer.normalize`'s loop: each str through `norm`; bytes decoded first, and where
    they are not valid UTF-8, normalized in their valid parts, each other byte a starter kept
    as it is (as the executors do: ffi/pretok/nfc_normalize.h, lowercase.h). Every step list
    runs natively over all texts at once (`_normalize_natively`); a text that cannot (a str
    with a lone surrogate) goes through `normalizer.apply`, one that is neither str nor bytes
    is kept as it is.

    Args:
        norm: the `normalizer.Normalizer`.
        texts: str and bytes.

    Returns:
        The normalized texts in their order, each str or bytes as it came.
    """
    texts = list(texts)
    out, natively, raw = list(texts), [], []  # (natively: the indices of raw's rows)
    for k, t in enumerate(texts):
        if isinstance(t, str):
            try:
                raw.append(t.encode("utf-8"))
            except UnicodeEncodeError:  # (a lone surrogate: the text alone)
                out[k] = normalizer.apply(norm, t)
                continue
        elif isinstance(t, bytes):
            raw.append(t)
        else:
            continue
        natively.append(k)
    for k, row in zip(natively, _normalize_natively(norm.steps, raw)):
        out[k] = row if isinstance(texts[k], bytes) else row.decode("utf-8")
    return out


def _normalize_natively(steps, raw: list[bytes]) -> list[bytes]:
    """The steps over UTF-8 rows (invalid UTF-8 kept, as `normalizer.apply` on the text decoded
    with surrogateescape), each step over all rows in one native call on host threads
    (pretok.nfc_data.normalize_batch, pretok.lower_data.lowercase_batch): the per-text Python
    path runs a few MB/s. A row that lowercase_batch flags (a code point whose lowercase is not
    rewritten in place: U+0130, U+2126, ...) takes normalizer.lowercase for that step."""
    from ..pretok import lower_data, nfc_data

    if not steps or not raw:
        return list(raw)
    data, offsets = _flat(raw)
    for step in steps:
        if step == "nfc":
            data, offsets = nfc_data.normalize_batch(data, offsets)
            continue
        data, flagged = lower_data.lowercase_batch(data, offsets)
        if flagged.any():
            rows = _split(data, offsets)
            for k in np.flatnonzero(flagged).tolist():
                rows[k] = _lowercase_row(rows[k])
            data, offsets = _flat(rows)
    return _split(data, offsets)


def _flat(rows: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """(data uint8, offsets int64[rows + 1]) of the rows."""
    offsets = np.zeros(len(rows) + 1, np.int64)
    np.cumsum(np.fromiter(map(len, rows), np.int64, len(rows)), out=offsets[1:])
    return np.frombuffer(b"".join(rows), np.uint8), offsets


def _split(data: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    buf, ends = data.tobytes(), offsets.tolist()
    return [buf[a:b] for a, b in zip(ends[:-1], ends[1:])]


def _lowercase_row(row: bytes) -> bytes:
    """normalizer.lowercase of a UTF-8 row, each byte of invalid UTF-8 kept (surrogateescape:
    Lowercase leaves the escapes' code points alone)."""
    return normalizer.lowercase(row.decode("utf-8", "surrogateescape")).encode("utf-8", "surrogateescape")
