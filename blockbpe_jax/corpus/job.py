"""The corpus job: text/JSONL(.gz/.zst) files -> documents -> byte-sized batches -> `encode` ->
flat token shards (`blockbpe_jax/corpus/shards/flat.py`: `<prefix>_<k>.bin` ids + `.idx` int64 offsets +
`<prefix>.json`), or padded .npz/.npy shards; and `verify`, which re-encodes a sample with the
reference library. `blockbpe-jax encode|verify` are thin wrappers around `encode_files` and
`verify`. The engine (planning calls, encoding on the device, compaction, overlap) is
corpus/engine.py.

Every bad input raises CorpusError with one line naming the file and line.
"""

from __future__ import annotations

import os
import random
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from .background import in_background, stop_background
from .inputs.compressed import is_compressed
from .documents import WINDOW_BYTES, iter_documents, iter_windows, parse_split
from .eod import AppendEod, eod_id
from .shards.array_records import ArrayRecordWriter, read_array_records  # noqa: F401
from .shards.megatron import MegatronWriter
from .inputs.files import check_inputs, first_stream, input_sizes
from .shards import EVERY_TOKEN_FORMATS, FORMATS
from .shards.padded import PaddedWriter
from .shards.flat import (
    DEFAULT_SHARD_TOKENS,
    ArraysWriter,
    FlatWriter,
    check_output,
    load_sidecar,
    open_shard,
    read_shards,  # noqa: F401 (with read_array_records: the readers of what the job writes)
    sidecar_inputs,
)
from .types import CorpusError, VerifyError, check_positive
from .progress import Progress


from .device import pow2  # noqa: E402
from .engine import JoinInto, encode_documents  # noqa: E402,F401
from .plan import DEFAULT_BATCH_BYTES, DEFAULT_PACK_WIDTH, first_pass_tokens, plan_batches  # noqa: E402,F401


def enable_executable_cache() -> str | None:
    """Turns on the corpus job's executables kept on disk (executable_cache: a second run of
    the job loads them instead of compiling them again) at ~/.cache/blockbpe_jax/executables
    (next to the table cache, under $BLOCKBPE_CACHE_DIR when set); returns that directory, or
    None where BLOCKBPE_XLA_CACHE=0 or BLOCKBPE_CACHE_DIR="" turns it off. The CLI calls it;
    `encode_files` does not (a user's process decides what it writes to disk). JAX's own
    persistent cache is left as the user set it: while JAX uses it, nothing is kept here
    (executable_cache says why)."""
    from . import executable_cache
    from ..disk_cache import cache_dir

    directory = None if os.environ.get("BLOCKBPE_XLA_CACHE", "1") == "0" else cache_dir("executables")
    executable_cache.enable(directory)
    return None if directory is None else str(directory)


class ReadAhead:
    """`read_ahead`'s windows: the files' documents, read by a thread from its call on."""

    def __init__(self, paths, split: str, jsonl_field, window_bytes: int):
        split_kind, chunk = parse_split(split)
        checked = check_inputs(paths)
        self.inputs = (tuple(checked), split, jsonl_field, window_bytes)
        self.join = JoinInto()
        self._windows = in_background(
            iter_windows(checked, split_kind, chunk, jsonl_field, window_bytes, join=self.join),
            1,
            name="blockbpe-split",
        )

    def windows(self, paths, split: str, jsonl_field, window_bytes: int):
        """The windows, once, for encode_files with the same inputs (ValueError otherwise), and
        the JoinInto their reader was given."""
        inputs = (tuple(check_inputs(paths)), split, jsonl_field, window_bytes)
        if inputs != self.inputs or self._windows is None:
            raise ValueError("encode_files: `read` was made by read_ahead for other inputs, or used already")
        windows, self._windows = self._windows, None
        return windows, self.join

    def close(self) -> None:
        """Stops the reading (if encode_files did not take the windows) and waits for it."""
        if self._windows is not None:
            stop_background(self._windows)
            self._windows = None


def read_ahead(paths, *, split="lines", jsonl_field=None, window_bytes=WINDOW_BYTES) -> ReadAhead:
    """Starts reading the files (a window ahead) for a later `encode_files(..., read=...)` with
    the same paths, split, jsonl_field and window_bytes: the command reads its input while the
    vocabulary and the accelerator load."""
    check_read_options(jsonl_field, window_bytes)
    return ReadAhead(paths, split, jsonl_field, window_bytes)


def check_tokenizer(tok) -> None:
    """TypeError unless `tok` is a blockbpe_jax.Tokenizer (by what the job uses of it: the
    tokenizer module imports this one)."""
    if not (hasattr(tok, "vocab") and callable(getattr(tok, "tables", None))):
        raise TypeError(f"tok must be a blockbpe_jax.Tokenizer, got {type(tok).__name__}")


def check_read_options(jsonl_field, window_bytes) -> None:
    """TypeError / ValueError for a JSONL field that is not a name, or window bytes that are not
    a positive int."""
    if jsonl_field is not None and not isinstance(jsonl_field, str):
        raise TypeError(f"jsonl_field must be a field name (str) or None, got {type(jsonl_field).__name__}")
    check_positive(("window_bytes", window_bytes))


def encode_files(
    tok,
    paths: Sequence[str | os.PathLike],
    out_prefix: str | os.PathLike,
    *,
    fmt="flat",
    shard_tokens=DEFAULT_SHARD_TOKENS,
    shard_docs=None,
    max_tokens=None,
    pad_id=0,
    overwrite=False,
    meta=None,
    append_eod=False,
    **options,
) -> dict:
    """Tokenizes text/JSONL(.gz/.zst) files (and parquet files, column `jsonl_field`, when pyarrow is
    installed) into shards at `out_prefix` (DIR/NAME; the directory is created) and returns the
    sidecar (`<prefix>.json`; `<prefix>manifest.json` for fmt "npz" or "npy"). fmt "flat":
    .bin/.idx shards; "arrayrecord": one record per document (`read_array_records`); "megatron":
    Megatron-LM's .bin/.idx pairs (`megatron_shards`). Flat, ArrayRecord and Megatron shards
    hold every document's full ids, equal to `tok.encode_batch`'s. append_eod: True (the
    vocabulary's end-of-text id) or an id to append after every document, as Megatron's
    `preprocess_data --append-eod` (`corpus.eod`; the sidecar's "append_eod" names it). Raises
    CorpusError (one line, file:line) on a bad input or an existing output without overwrite.
    options: how the inputs are read and encoded (`encode_documents_of`)."""
    check_tokenizer(tok)
    if fmt not in FORMATS:
        raise ValueError(f"fmt must be one of {FORMATS}, got {fmt!r}")
    if fmt in EVERY_TOKEN_FORMATS and (max_tokens is not None or pad_id != 0):
        raise ValueError(f"max_tokens and pad_id apply to fmt npz / npy ({fmt} shards keep every token)")
    check_positive(("shard_tokens", shard_tokens), ("shard_docs", shard_docs), ("max_tokens", max_tokens))
    paths = check_inputs(paths)
    eod = eod_id(tok, append_eod)
    directory, name = os.path.split(os.path.expanduser(os.fspath(out_prefix)))
    directory = Path(directory or ".")
    if fmt in EVERY_TOKEN_FORMATS and not name:
        raise CorpusError(f"{out_prefix}: a {fmt} output needs a file name prefix (DIR/NAME)")
    created = make_output_directory(directory)
    try:
        check_output(directory, name, overwrite, fmt)
        if fmt == "flat":
            writer = FlatWriter(directory / name, tok.vocab.n_vocab, shard_tokens, shard_docs)
        elif fmt == "arrayrecord":
            writer = ArrayRecordWriter(directory / name, tok.vocab.n_vocab, shard_tokens, shard_docs)
        elif fmt == "megatron":
            writer = MegatronWriter(directory / name, tok.vocab.n_vocab, shard_tokens, shard_docs)
        else:
            writer = PaddedWriter(directory, name, fmt, max_tokens, pad_id, shard_docs or 65536)
        if eod is not None:
            writer = AppendEod(writer, eod)
        info = encode_documents_of(tok, paths, writer, **options)
        try:
            return writer.finish({**info, "append_eod": eod, **(meta or {})})
        except BaseException:
            writer.abort()
            raise
    except BaseException:
        remove_directories(created)  # (the writer removed its files: `encode_documents_of`)
        raise


def make_output_directory(directory: Path) -> list[Path]:
    """Makes the output directory (and its missing parents), checked writable; returns those it
    made, deepest first (`remove_directories` takes them away again when the job fails).
    One-line CorpusError when it cannot be made or written."""
    made, at = [], directory
    while not at.exists() and at.parent != at:
        made.append(at)
        at = at.parent
    if at.exists() and not at.is_dir():
        what = "exists and is not a directory" if at == directory else f"{at} is not a directory"
        raise CorpusError(f"{directory}: cannot create the output directory: {what}")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        remove_directories(made)
        raise CorpusError(f"{directory}: cannot create the output directory: {_reason(e)}") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise CorpusError(f"{directory}: cannot write to the output directory: permission denied")
    return made


def remove_directories(made: list[Path]) -> None:
    """Removes the directories `make_output_directory` made, deepest first, while they are
    empty (a file in one, put there by another process, keeps it and those above it)."""
    for d in made:
        try:
            d.rmdir()
        except OSError:
            return


def _reason(e: OSError) -> str:
    return (e.strerror or type(e).__name__).lower()


def encode_files_to_arrays(
    tok, paths: Sequence[str | os.PathLike], *, append_eod=False, **options
) -> tuple[np.ndarray, np.ndarray]:
    """The corpus job with its result in memory instead of shards: (ids, offsets), every
    document's ids back to back (uint16 when the vocabulary fits, else uint32) and int64
    offsets, one per document plus one (document j is ids[offsets[j]:offsets[j + 1]]), the
    flat layout of `encode_files`. append_eod, options: as encode_files'."""
    check_tokenizer(tok)
    paths = check_inputs(paths)
    eod = eod_id(tok, append_eod)
    writer = ArraysWriter(tok.vocab.n_vocab, input_bytes=_input_bytes(paths) or 0)
    encode_documents_of(tok, paths, writer if eod is None else AppendEod(writer, eod), **options)
    return writer.finish({})


def encode_arrow(
    tok, column, *, window_bytes=WINDOW_BYTES, append_eod=False, **engine
) -> tuple[np.ndarray, np.ndarray]:
    """`encode_files_to_arrays` on an Arrow string column in memory (a pyarrow Array or
    ChunkedArray of string, large_string or string_view: a datasets.Dataset's
    `ds.data.column("text")`, a table read by pyarrow): its rows go to the engine as views of the
    column's buffers, no Python object per row; document j is row j (a null: CorpusError naming
    its row). append_eod: as encode_files' (the id after every row's ids). engine: as
    encode_files' (mode, allowed_special, max_len, batch_bytes, ...)."""
    from .inputs.parquet import column_windows  # (pyarrow only when asked for)

    eod = eod_id(tok, append_eod)
    writer = ArraysWriter(tok.vocab.n_vocab, input_bytes=int(getattr(column, "nbytes", 0)))
    wrapped = writer if eod is None else AppendEod(writer, eod)
    encode_documents(tok, column_windows(column, window_bytes), wrapped, [Path("encode_arrow")], **engine)
    return writer.finish({})


def _input_bytes(paths: Sequence[Path]) -> int | None:
    """The inputs' size, where it is that of their documents (None for compressed inputs and streams)."""
    if any(is_compressed(p) or p.suffix == ".parquet" for p in paths):
        return None
    sizes = input_sizes(paths)
    return None if None in sizes else sum(sizes)


def encode_documents_of(
    tok,
    paths: Sequence[Path],
    writer,
    *,
    split="lines",
    jsonl_field=None,
    window_bytes=WINDOW_BYTES,
    mode="exact",
    allowed_special="none",
    max_len=None,
    progress=False,
    read=None,
    device_split=None,
    **engine,
) -> dict:
    """Reads the (checked) inputs' documents and hands their ids to `writer`; returns the
    job's description for the sidecar. On an error the writer's output is removed (`abort`).
    The input is read in windows of about `window_bytes` of input (read: `read_ahead(paths,
    ...)`'s, whose thread is already reading the same inputs); mode, allowed_special, max_len
    and the engine's other options (batch_bytes, max_docs, pack_width, block_size, device):
    `encode_documents`. device_split: blocks of lines and JSONL split, checked and decoded on
    the device (corpus/device_split.py; the same documents and errors); None: as
    BLOCKBPE_DEVICE_SPLIT (1 or 0) says where it is set, else on where the device is a GPU
    (`device_split.wanted`). Ignored where the host normalizes (below),
    for parquet inputs and `split` file or chunk:N. The engine's option device_normalizer (None:
    on where available; False: off): a normalizer the executors apply (NFC, Lowercase, NFC then
    Lowercase) left to the encode calls on the device, the host normalizing only the rows they
    report (corpus/device_normalizer.py; docs/corpus.md, "The normalizer: on the device or on
    the host"); else the host normalizes every window."""
    check_read_options(jsonl_field, window_bytes)  # (its callers checked tok)
    split_kind, chunk = parse_split(split)
    bar = Progress(_input_bytes(paths), enabled=progress)
    t0 = time.perf_counter()
    try:
        if read is None:
            join = JoinInto()
            windows = iter_windows(paths, split_kind, chunk, jsonl_field, window_bytes, join=join)
        else:
            windows, join = read.windows(paths, split, jsonl_field, window_bytes)
        encode_documents(
            tok,
            windows,
            writer,
            paths,
            mode=mode,
            allowed_special=allowed_special,
            max_len=max_len,
            progress=bar,
            join=join,
            device_split=device_split,
            **engine,
        )
    except BaseException:
        writer.abort()  # no partial output is left behind
        raise
    finally:
        bar.close()
    v = tok.vocab
    return dict(
        vocab=v.name,
        vocab_source=v.source,
        n_vocab=v.n_vocab,
        mode=mode,
        split=split,
        jsonl_field=jsonl_field,
        max_len=max_len,
        allowed_special=sorted(allowed_special)
        if isinstance(allowed_special, (set, frozenset, list))
        else allowed_special,
        inputs=[os.path.abspath(p) for p in paths],  # (verify reads them from any directory)
        seconds=round(time.perf_counter() - t0, 3),
        vocab_arg=dict(vocab=str(Path(v.source).resolve())) if Path(v.source).is_file() else {},
    )


# --------------------------------------------------------------------------------------------
# verify
# --------------------------------------------------------------------------------------------


def reference_encoder(tok, mode: str, allowed_special):
    """(name, texts -> list of id lists): tiktoken for tiktoken-format vocabularies (.tiktoken
    files, tiktoken encodings, Llama 3's tokenizer.model) when importable, else the
    tokenizer's own CPU path."""
    v = tok.vocab
    tiktoken_like = (
        v.char_level is None
        and not tok.nfc
        and not v.source.endswith(".json")
        and (v.pattern is not None or mode == "bytes")
    )
    try:
        import tiktoken
    except ImportError:
        tiktoken_like = False
    if tiktoken_like:
        from ..testing import BYTES_MODE_PATTERN

        specials = set(v.special_tokens.values())
        enc = tiktoken.Encoding(
            f"{v.name}_reference",
            special_tokens=dict(v.special_tokens),
            pat_str=v.pattern if mode == "exact" else BYTES_MODE_PATTERN,
            mergeable_ranks={
                b: i for i, b in enumerate(v.token_bytes) if b is not None and i not in specials
            },
        )
        if allowed_special == "none":
            return "tiktoken", lambda texts: enc.encode_ordinary_batch([t.decode() for t in texts])
        allowed = "all" if allowed_special == "all" else set(allowed_special)
        return "tiktoken", lambda texts: [
            enc.encode(t.decode(), allowed_special=allowed, disallowed_special=()) for t in texts
        ]
    import jax

    cpu = jax.devices("cpu")[0]

    def cpu_path(texts):
        out = []
        for t in texts:
            ids, counts = jax.device_get(
                tok.encode_batch(
                    [t], max_tokens=pow2(len(t)) + 1, mode=mode, allowed_special=allowed_special, device=cpu
                )
            )
            out.append(ids[0, : counts[0]].tolist())
        return out

    return "blockbpe_jax CPU path", cpu_path


def verify(prefix: str | os.PathLike, tok, *, sample: int = 1000, seed: int = 0) -> dict:
    """Checks every shard's .idx/.bin against each other and the sidecar (sizes, offsets, ids
    below n_vocab), then re-reads the inputs and re-encodes `sample` random documents (all when
    sample >= documents) with the reference. Raises VerifyError naming the shard and document."""
    meta, directory = load_sidecar(prefix)
    opened = [open_shard(directory, s, meta["dtype"], meta["n_vocab"]) for s in meta["shards"]]
    starts = np.cumsum([0] + [s["documents"] for s in meta["shards"]])
    n = int(starts[-1])
    if n != meta["documents"]:
        raise VerifyError(f"{directory}: shards hold {n} documents, the sidecar says {meta['documents']}")
    picks = sorted(random.Random(seed).sample(range(n), min(max(sample, 0), n)))
    split, chunk = parse_split(meta["split"])
    paths = check_inputs(sidecar_inputs(meta, directory))
    stream = first_stream(paths)
    if stream is not None:
        raise VerifyError(f"{stream}: a stream (standard input, a pipe) cannot be read again to verify")
    docs, want = {}, set(picks)
    for i, d in enumerate(iter_documents(paths, split, chunk, meta.get("jsonl_field"))):
        if i >= n:
            raise VerifyError(
                f"{paths[d.file_index]}:{d.position}: the inputs hold more documents than the "
                f"shards ({n}): the inputs changed or the output is incomplete"
            )
        if i in want:
            docs[i] = d
    if len(docs) < len(want):
        raise VerifyError(f"the inputs hold fewer documents than the shards ({n}): they changed")
    name, ref = reference_encoder(tok, meta["mode"], meta["allowed_special"])
    eod = meta.get("append_eod")  # (None when the job appended nothing)
    for lo in range(0, len(picks), 256):
        group = picks[lo : lo + 256]
        for i, expect in zip(group, ref([docs[i].data for i in group])):
            expect = list(expect) if eod is None else [*expect, eod]
            k = int(np.searchsorted(starts, i, "right")) - 1
            tokens, idx = opened[k]
            j = i - int(starts[k])
            got = tokens[idx[j] : idx[j + 1]].tolist()
            if got != expect:
                t = next(
                    (t for t, (a, b) in enumerate(zip(got, expect)) if a != b), min(len(got), len(expect))
                )
                d = docs[i]
                raise VerifyError(
                    f"{directory / meta['shards'][k]['bin']}: document {j} ({paths[d.file_index]}:"
                    f"{d.position}) differs from {name} at token {t}: {got[t : t + 3]} vs {expect[t : t + 3]} "
                    f"({len(got)} vs {len(expect)} tokens)"
                )
    return dict(documents=n, tokens=meta["tokens"], shards=len(opened), checked=len(picks), reference=name)
