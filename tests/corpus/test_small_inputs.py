"""Consecutive small plain inputs read together into one window (blockbpe_jax/corpus/documents.py,
`_small_inputs`): the same documents, lines and inputs as each file read alone, in order,
beside large and compressed inputs; a bad line still names its own file; the corpus job's ids
and padded shards' file indices as for one file."""

from __future__ import annotations

import gzip
import json
import random

import numpy as np
import pytest

from blockbpe_jax.corpus import job as corpus, documents
from blockbpe_jax import native
from blockbpe_jax.corpus.types import CorpusError

import corpus_shared

root, cl100k = corpus_shared.root, corpus_shared.cl100k  # (corpus_shared's module-scoped fixtures)


def _small_files(tmp_path, n: int, jsonl: bool) -> list:
    """n small inputs (empty ones, blank lines, CRLF, no newline at the end), one large input
    and one .gz among them."""
    rng = random.Random(11)
    paths = []
    for k in range(n):
        rows = []
        for i in range(rng.randrange(0, 12)):
            text = f"{k}.{i} " + "".join(
                rng.choice(["ab ", "é", "\t", "日本", " x\\y"]) for _ in range(rng.randrange(0, 40))
            )
            rows.append(json.dumps({"text": text, "n": i}) if jsonl else text)
            if rng.random() < 0.2:
                rows.append("  " if jsonl else "")
        data = ("\r\n" if k % 5 == 3 else "\n").join(rows) + ("" if k % 3 == 1 else "\n")
        name = f"in{k:02d}.{'jsonl' if jsonl else 'txt'}"
        if k == n // 2:  # a large one: read alone
            data = data + "".join(f'{{"text": "big {i}"}}\n' if jsonl else f"big {i}\n" for i in range(3000))
        if k == n // 3:
            (tmp_path / (name + ".gz")).write_bytes(gzip.compress(data.encode()))
            paths.append(tmp_path / (name + ".gz"))
            continue
        (tmp_path / name).write_bytes(data.encode())
        paths.append(tmp_path / name)
    return paths


@pytest.mark.parametrize("jsonl", [True, False])
def test_small_inputs_read_together(tmp_path, monkeypatch, jsonl):
    """Small inputs share windows (a window's `file_index` then per document) and give what
    each file read alone gives: documents, lines, inputs, in order."""
    monkeypatch.setattr(documents, "SMALL_INPUT", 4000)
    paths = _small_files(tmp_path, 40, jsonl)
    field = "text" if jsonl else None
    alone = [
        (fi, d.position, d.data)
        for fi, p in enumerate(paths)
        for d in documents.iter_documents([p], jsonl_field=field)
    ]
    windows = list(documents.iter_windows(paths, jsonl_field=field, window_bytes=1 << 14))
    got = [
        (fi, pos, blob)
        for w in windows
        for fi, pos, blob in zip(w.file_indices.tolist(), w.positions.tolist(), w.blobs)
    ]
    assert got == alone and len(alone) > 200
    shared = [w for w in windows if np.ndim(w.file_index)]
    assert len(windows) < 20 and len(shared) >= 2 and max(len(set(w.file_index.tolist())) for w in shared) > 3
    assert [d[:2] for d in documents.iter_documents(paths, jsonl_field=field)] == [
        (data, fi) for fi, _, data in alone
    ]


def test_a_bad_line_in_a_small_input_names_its_file(tmp_path):
    """A line the native split gives up on sends each small input through its own reader:
    the error names the file and line it is in."""
    paths = []
    for k in range(8):
        rows = [json.dumps({"text": f"{k} {i}"}) for i in range(5)]
        if k == 6:
            rows[2] = '{"text": "unterminated'
        paths.append(tmp_path / f"s{k}.jsonl")
        paths[-1].write_text("\n".join(rows) + "\n")
    with pytest.raises(CorpusError, match=r"s6\.jsonl:3: not valid JSON"):
        list(documents.iter_windows(paths, jsonl_field="text"))


def test_small_inputs_through_the_corpus_job(tmp_path, cl100k):
    """The job on many small inputs gives the ids and offsets of the same documents in one
    file, and padded shards' file_index / position name each document's own input and line."""
    paths = _small_files(tmp_path, 30, True)
    one = tmp_path / "all.jsonl"
    docs = documents.iter_documents(paths, jsonl_field="text")
    one.write_text("".join(json.dumps({"text": d.data.decode()}) + "\n" for d in docs))
    ids, offsets = cl100k.encode_files_to_arrays(paths, jsonl_field="text")
    want_ids, want_offsets = cl100k.encode_files_to_arrays([one], jsonl_field="text")
    np.testing.assert_array_equal(ids, want_ids)
    np.testing.assert_array_equal(offsets, want_offsets)
    out = tmp_path / "padded"
    out.mkdir()
    corpus.encode_files(cl100k, paths, out / "s", fmt="npz", max_tokens=64, jsonl_field="text")
    manifest = json.loads((out / "smanifest.json").read_text())
    got = [
        (int(f), int(p))
        for shard in manifest["shards"]
        for z in [np.load(out / shard["files"][0])]
        for f, p in zip(z["file_index"], z["position"])
    ]
    alone = [
        (fi, d.position)
        for fi, p in enumerate(paths)
        for d in documents.iter_documents([p], jsonl_field="text")
    ]
    assert got == alone


def test_read_files_block_and_lines(tmp_path):
    """The native reader of small inputs: the files in order, a newline added after one that
    lacks it (empty files add nothing), each file's first line; None where a file cannot be
    read or has grown past the size it was given (its own reader then takes it)."""
    rng = random.Random(5)
    blobs = [b"", b"a\nb", b"\n\n", b"x" * 70_000, b"last\r\n", b"", b"\xe6\x97\xa5 no end"]
    blobs += [bytes(rng.choice(b"ab\n") for _ in range(rng.randrange(0, 300))) for _ in range(200)]
    paths = []
    for k, blob in enumerate(blobs):
        paths.append(tmp_path / f"f{k:03d}")
        paths[-1].write_bytes(blob)
    sizes = np.array([len(b) for b in blobs], np.int64)
    names = [bytes(p) for p in paths]
    fixed = [b + b"\n" if b and not b.endswith(b"\n") else b for b in blobs]
    for threads in (1, 4):
        block, first_line = native.cpu.read_files(names, sizes, threads)
        assert block.tobytes() == b"".join(fixed)
        np.testing.assert_array_equal(first_line, np.cumsum([0] + [b.count(b"\n") for b in fixed]))
    shrunk = sizes.copy()
    shrunk[3] += 10  # (a file smaller than its size: read as it is)
    assert native.cpu.read_files(names, shrunk, 2)[0].tobytes() == b"".join(fixed)
    grown = sizes.copy()
    grown[3] -= 1
    assert native.cpu.read_files(names, grown, 2) is None
    assert native.cpu.read_files([*names, bytes(tmp_path / "missing")], np.append(sizes, 1), 2) is None
    with pytest.raises(ValueError, match="one size per path"):
        native.cpu.read_files(names, sizes[:-1], 2)


def test_a_small_input_that_grew_is_read_whole(tmp_path, monkeypatch):
    """A file larger than when its size was taken (stat'ed now, or by check_inputs before it
    grew): the inputs are read each alone, whole."""
    from blockbpe_jax.corpus.inputs import files as file_blocks

    paths = _small_files(tmp_path, 12, True)
    alone = [(d.file_index, d.data) for d in documents.iter_documents(paths, jsonl_field="text")]
    checked = corpus.check_inputs(paths)
    assert checked.sizes == [p.stat().st_size for p in paths] and corpus.check_inputs(checked) is checked
    with open(paths[2], "a") as f:  # (grown since it was checked)
        f.write('{"text": "one more"}\n')
    grown = alone[: sum(fi < 2 for fi, _ in alone)] + [
        (2, d.data) for d in documents.iter_documents([paths[2]], jsonl_field="text")
    ]
    grown += [doc for doc in alone if doc[0] > 2]
    assert [(d.file_index, d.data) for d in documents.iter_documents(checked, jsonl_field="text")] == grown
    sized = file_blocks.regular_file_size
    monkeypatch.setattr(file_blocks, "regular_file_size", lambda p: sized(p) and max(0, sized(p) - 5))
    assert [(d.file_index, d.data) for d in documents.iter_documents(paths, jsonl_field="text")] == grown


def test_groups_read_ahead_and_stopped_with_their_reader(tmp_path, monkeypatch):
    """Groups of small inputs are read by a thread a group ahead of their split: a reader
    stopped after its first window leaves no reading thread behind."""
    import threading
    import time

    monkeypatch.setattr(documents, "SMALL_INPUT", 4000)
    paths = _small_files(tmp_path, 40, True)
    readers, cpu = [], native.cpu

    class Recording:  # (the CPU module with read_files' threads recorded)
        def __getattr__(self, name):
            return getattr(cpu, name)

        def read_files(self, *args):
            readers.append(threading.current_thread().name)
            return cpu.read_files(*args)

    monkeypatch.setattr(native, "cpu", Recording())
    windows = documents.iter_windows(paths, jsonl_field="text", window_bytes=1 << 14)
    assert next(windows).ndocs > 0
    windows.close()
    assert readers and set(readers) == {"blockbpe-read"}
    for _ in range(100):  # (the thread ends at its next step)
        if not any(t.name == "blockbpe-read" and t.is_alive() for t in threading.enumerate()):
            break
        time.sleep(0.02)
    assert not any(t.name == "blockbpe-read" and t.is_alive() for t in threading.enumerate())


def test_split_file_reads_small_files_together(tmp_path, monkeypatch, cl100k):
    """`--split file` over many small files (a directory of source files): read together into
    shared windows (read_files without lines), each file one document as it is (empty files,
    CRLF, no newline at the end, multi-byte characters), in order, beside a large and a .gz
    input read alone; the job's ids are encode_batch's of the files' bytes."""
    monkeypatch.setattr(documents, "SMALL_INPUT", 4000)
    paths = _small_files(tmp_path, 40, False)
    want = [p.read_bytes() if p.suffix != ".gz" else gzip.decompress(p.read_bytes()) for p in paths]
    windows = list(documents.iter_windows(paths, "file", window_bytes=1 << 14))
    got = [
        (fi, pos, blob)
        for w in windows
        for fi, pos, blob in zip(w.file_indices.tolist(), w.positions.tolist(), w.blobs)
    ]
    assert got == [(fi, 0, data) for fi, data in enumerate(want)]
    assert len(windows) < 12 and max(w.ndocs for w in windows) > 5
    ids, offsets = cl100k.encode_files_to_arrays(paths, split="file")
    assert [ids[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])] == corpus_shared.encode_batch_ids(
        cl100k, want
    )


@pytest.mark.parametrize(
    "blobs, bad",
    [
        ([b"ok\n", b"bad \xff", b"fine"], 1),
        ([b"ends mid-character \xc3", b"\xa9 starts with its end"], 0),  # valid only together
        ([b"a", b"b \xe6\x97", b"", b"\xa5 c"], 1),
    ],
)
def test_split_file_invalid_utf8_names_its_file(tmp_path, blobs, bad):
    """A small file that is not UTF-8 is the error naming it, also where the block of files read
    together would be valid (a file cut mid-character, the next starting with the rest)."""
    paths = []
    for k, blob in enumerate(blobs + [b"tail"] * 3):
        paths.append(tmp_path / f"f{k}.txt")
        paths[-1].write_bytes(blob)
    with pytest.raises(CorpusError, match=rf"f{bad}\.txt:1: not valid UTF-8"):
        list(documents.iter_windows(paths, "file"))


def test_read_files_as_they_are(tmp_path):
    """read_files without lines: the files back to back as they are and where each starts."""
    blobs = [b"", b"a\nb", b"no end", b"\r\n", b"", b"x" * 5000]
    paths = []
    for k, blob in enumerate(blobs):
        paths.append(tmp_path / f"g{k}")
        paths[-1].write_bytes(blob)
    names, sizes = [bytes(p) for p in paths], np.array([len(b) for b in blobs], np.int64)
    for threads in (1, 3):
        block, starts = native.cpu.read_files(names, sizes, threads, False)
        assert block.tobytes() == b"".join(blobs)
        np.testing.assert_array_equal(starts, np.cumsum([0] + [len(b) for b in blobs]))
    grown = sizes.copy()
    grown[5] -= 1
    assert native.cpu.read_files(names, grown, 2, False) is None
