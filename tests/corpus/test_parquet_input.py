"""Parquet inputs read ahead (blockbpe_jax/corpus/inputs/parquet.py): row groups gathered into tasks of
about a window, decoded on several threads in input order, a large row group read in batches by
a thread of its own. The documents, rows and inputs must be those pyarrow reads, whatever the
layout; a file's error comes at its turn, after every earlier document. An Arrow column in
memory (`corpus.encode_arrow`, `Tokenizer.encode_arrow`): the ids of the same texts read from JSONL."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from blockbpe_jax.corpus import job as corpus, documents
from blockbpe_jax.corpus.inputs import parquet as parquet_input
from blockbpe_jax.corpus.types import CorpusError

import corpus_shared

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")
root, r50k = corpus_shared.root, corpus_shared.r50k  # (module-scoped fixtures, requested by name)


def texts(seed: int, n: int) -> list[str]:
    rng = np.random.default_rng(seed)
    words = ["tokens", "ünïcödé", "🎉", " ", "\n", "1234", "x" * 50, ""]
    return ["".join(rng.choice(words, int(k))) for k in rng.integers(0, 40, n)]


@pytest.fixture
def small_limits(monkeypatch):
    """Limits small enough that these files exercise every path: tasks of several row groups,
    tasks of one group larger than a window, large groups read batch by batch, the budget."""
    monkeypatch.setattr(parquet_input, "THREADS", 3)
    monkeypatch.setattr(parquet_input, "BYTES_AHEAD", 64 << 10)
    monkeypatch.setattr(parquet_input, "LARGE_GROUP", 48 << 10)


def read(paths, window_bytes=8192):
    windows = list(documents.iter_windows(paths, jsonl_field="text", window_bytes=window_bytes))
    return (
        [b.decode() for w in windows for b in w.blobs],
        [p for w in windows for p in w.positions.tolist()],
        [f for w in windows for f in w.file_indices.tolist()],
        windows,
    )


def test_layouts_give_pyarrows_rows(tmp_path, small_limits):
    """Files of tiny, window-sized and large row groups, an empty file and a JSONL input among
    them: each document, its row and its input as pyarrow and the JSONL reader give them."""
    layouts = [("tiny", 40, 700), ("mixed", 300, 1500), ("large", 5000, 6000), ("empty", 10, 0)]
    paths, want_texts, want_rows, want_files = [], [], [], []
    for k, (name, group, n) in enumerate(layouts):
        rows = texts(k, n)
        path = tmp_path / f"{name}.parquet"
        kind = pa.large_string() if k % 2 else pa.string()
        pq.write_table(
            pa.table({"id": np.arange(n), "text": pa.array(rows, kind)}), path, row_group_size=group
        )
        if k == 1:  # a JSONL input between the parquet ones
            jsonl = tmp_path / "between.jsonl"
            jsonl.write_text('{"text": "from json"}\n\n{"text": "second"}\n')
            paths.append(jsonl)
            want_texts += ["from json", "second"]
            want_rows += [1, 3]
            want_files += [len(paths) - 1] * 2
        paths.append(path)
        want_texts += rows
        want_rows += list(range(n))
        want_files += [len(paths) - 1] * n
    assert pq.ParquetFile(tmp_path / "tiny.parquet").metadata.num_row_groups > 10
    got_texts, got_rows, got_files, windows = read(paths)
    assert got_texts == want_texts
    assert got_rows == want_rows
    assert got_files == want_files
    # windows of at most about a window's bytes (a row larger than a window is one window)
    for w in windows:
        assert w.offsets[-1] <= 8192 or w.ndocs == 1


def test_error_at_its_turn(tmp_path, small_limits):
    """A file that is not parquet, a missing column, a null in a later row group: every earlier
    document comes first, then the one-line error naming the file (and the file's row)."""
    good = tmp_path / "good.parquet"
    rows = texts(7, 900)
    pq.write_table(pa.table({"text": rows}), good, row_group_size=100)
    not_parquet = tmp_path / "not.parquet"
    not_parquet.write_bytes(b"this is not parquet\n")
    no_column = tmp_path / "nocol.parquet"
    pq.write_table(pa.table({"body": ["a"]}), no_column)
    null = tmp_path / "null.parquet"
    values = texts(8, 500)
    values[437] = None
    pq.write_table(pa.table({"text": values}), null, row_group_size=50)

    def failing(paths) -> tuple[list, str]:
        seen = []
        with pytest.raises(CorpusError) as e:
            for w in documents.iter_windows(paths, jsonl_field="text", window_bytes=4096):
                seen += [b.decode() for b in w.blobs]
        return seen, str(e.value)

    seen, message = failing([good, not_parquet, good])
    assert seen == rows and message.startswith(f"{not_parquet}: cannot read parquet: ")
    seen, message = failing([good, no_column])
    assert seen == rows and message == f"{no_column}: no column 'text' (--field); columns: body"
    seen, message = failing([good, null])
    assert seen[: len(rows)] == rows and seen[len(rows) :] == values[: len(seen) - len(rows)]
    assert message == f"{null}: row 437: column 'text' is null"


@pytest.mark.parametrize("group", [100, 3000])
def test_stopped_early_leaves_no_thread(tmp_path, small_limits, group):
    """A job that stops after its first window stops the decoding threads (small row groups:
    the pool's; large ones: each large group's own)."""
    path = tmp_path / "many.parquet"
    pq.write_table(pa.table({"text": texts(9, 6000)}), path, row_group_size=group)
    sizes = pq.ParquetFile(path).metadata
    large = [
        sizes.row_group(g).total_byte_size >= parquet_input.LARGE_GROUP for g in range(sizes.num_row_groups)
    ]
    assert all(large) if group == 3000 else not any(large)
    windows = documents.iter_windows([path, path, path], jsonl_field="text", window_bytes=2048)
    next(windows)
    assert any(t.name.startswith("blockbpe-parquet") for t in threading.enumerate())
    windows.close()
    assert not any(t.name.startswith("blockbpe-parquet") for t in threading.enumerate())


def test_encode_arrow_an_in_memory_column(tmp_path, r50k):
    """corpus.encode_arrow on string, large_string, sliced and chunked columns (windows cut
    within and across chunks): the ids and offsets of the same texts as a JSONL file."""
    rows = texts(11, 3000)
    src = tmp_path / "same.jsonl"
    src.write_text("".join(json.dumps({"text": t}) + "\n" for t in rows))
    want_ids, want_offsets = r50k.encode_files_to_arrays([src], jsonl_field="text")
    assert len(want_offsets) == len(rows) + 1  # (an empty string is a document too)
    columns = {
        "string": pa.array(rows, pa.string()),
        "large_string": pa.array(rows, pa.large_string()),
        "sliced": pa.array(["drop me"] * 7 + rows, pa.string()).slice(7),
        "chunked": pa.chunked_array(
            [pa.array(rows[:1000]), pa.array(rows[1000:1001]), pa.array(rows[1001:])]
        ),
        "small chunks": pa.chunked_array([pa.array(rows[i : i + 7]) for i in range(0, len(rows), 7)]),
    }
    # (small chunks gathered into windows of about 64 KiB, not a window or more per chunk)
    one = len(list(parquet_input.column_windows(columns["string"], 1 << 16)))
    assert one < len(columns["small chunks"].chunks) // 4
    assert len(list(parquet_input.column_windows(columns["small chunks"], 1 << 16))) <= 2 * one
    for name, column in columns.items():
        ids, offsets = corpus.encode_arrow(r50k, column, window_bytes=4096)
        np.testing.assert_array_equal(offsets, want_offsets, err_msg=name)
        np.testing.assert_array_equal(ids, want_ids, err_msg=name)
    ids, offsets = r50k.encode_arrow(columns["chunked"], window_bytes=4096)  # (the Tokenizer method)
    np.testing.assert_array_equal(offsets, want_offsets)
    np.testing.assert_array_equal(ids, want_ids)


def test_encode_arrow_empty_and_stopped(r50k):
    for empty in (pa.array([], pa.string()), pa.chunked_array([], pa.large_string())):
        ids, offsets = corpus.encode_arrow(r50k, empty)
        assert len(ids) == 0 and offsets.tolist() == [0]
    windows = parquet_input.column_windows(pa.array(["x" * 100] * 100_000), 4096)
    next(windows)
    windows.close()  # (its checking threads stop with it)
    assert not any(t.name.startswith("blockbpe-arrow") for t in threading.enumerate())


def test_encode_arrow_errors(r50k):
    with pytest.raises(CorpusError, match=r"^encode_arrow: row 1002: the column is null$"):
        corpus.encode_arrow(r50k, pa.chunked_array([pa.array(["a"] * 1000), pa.array(["b", "c", None])]))
    with pytest.raises(TypeError, match="the column is int64, not a string column"):
        corpus.encode_arrow(r50k, pa.array([1, 2]))
    with pytest.raises(TypeError, match="expected a pyarrow Array or ChunkedArray, got list"):
        corpus.encode_arrow(r50k, ["a", "b"])
