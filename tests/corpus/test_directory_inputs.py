"""A directory as the corpus job's input (blockbpe_jax/corpus/inputs/files.py `files_under`): the regular
files under it, recursively, in the order of their paths' parts, hidden and `_` names left out
(as pyarrow's datasets leave them: .crc, _SUCCESS, _metadata); the same shards as those files
named one by one; an empty directory or a broken link, a one-line error."""

from __future__ import annotations

import gzip
import json
import os

import pytest

from blockbpe_jax import cli
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.types import CorpusError

import corpus_shared
from corpus_shared import encode_batch_ids
from helpers import encode_argv

# (corpus_shared's module-scoped fixtures)
root, r50k = corpus_shared.root, corpus_shared.r50k


def lines(*texts: str) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


@pytest.fixture
def tree(tmp_path):
    """data/ with nested folders, compressed files, links to a file and a folder outside and
    one back up the tree, a FIFO, hidden and `_` names -> (the folder, the files a job reads,
    in order)."""
    d = tmp_path / "data"
    (d / "sub" / "deeper").mkdir(parents=True)
    (d / ".git").mkdir()
    (d / "_tmp").mkdir()
    (d / "b.jsonl").write_bytes(lines("bee", "second of b"))
    (d / "a.jsonl").write_bytes(lines("first file"))
    (d / "sub" / "c.jsonl").write_bytes(lines("in sub", "ünïcödé 🎉"))
    (d / "sub" / "deeper" / "d.jsonl").write_bytes(lines("deeper"))
    (d / "z.jsonl.gz").write_bytes(gzip.compress(lines("zipped", "last")))
    outside = tmp_path / "outside.jsonl"
    outside.write_bytes(lines("through a link"))
    (d / "link.jsonl").symlink_to(outside)
    for left_out in (".hidden.jsonl", "_SUCCESS", ".git/HEAD", "_tmp/part.jsonl", "sub/.c.jsonl.crc"):
        (d / left_out).write_bytes(b"not a document\n")
    os.mkfifo(d / "sub" / "fifo")  # (not a regular file: left out, never opened)
    (d / "sub" / "deeper" / "up").symlink_to(d / "sub")  # (a link back up the tree: not a loop)
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "e.jsonl").write_bytes(lines("in a linked folder"))
    (d / "linked").symlink_to(extra)
    want = ["a.jsonl", "b.jsonl", "link.jsonl", "linked/e.jsonl", "sub/c.jsonl", "sub/deeper/d.jsonl"]
    want += ["z.jsonl.gz"]
    return d, [d / name for name in want]


def test_a_directory_is_its_files_in_order(tree, tmp_path):
    d, files = tree
    assert corpus.check_inputs([d]) == files
    alone = tmp_path / "alone.jsonl"
    alone.write_bytes(lines("alone"))
    assert corpus.check_inputs([alone, d, alone, str(d) + "/"]) == [alone, *files, alone, *files]


def test_the_command_on_a_directory(tree, tmp_path, root, r50k, capsys):
    """The shards of `encode DIR` are those of `encode FILE...` with its files; the sidecar
    names the files."""
    d, files = tree
    vocab = root / "vocab/tiktoken/r50k_base.tiktoken"
    argv = encode_argv(d, tmp_path / "o1", vocab, "--field", "text")
    assert cli.main(argv) == 0, capsys.readouterr().err
    named = encode_argv(files[0], tmp_path / "o2", vocab, "--field", "text")
    named[2:2] = [str(f) for f in files[1:]]
    assert cli.main(named) == 0, capsys.readouterr().err
    got = [a.tolist() for a in corpus.read_shards(tmp_path / "o1" / "shard")]
    assert got == [a.tolist() for a in corpus.read_shards(tmp_path / "o2" / "shard")]
    texts = ["first file", "bee", "second of b", "through a link", "in a linked folder", "in sub"]
    texts += ["ünïcödé 🎉", "deeper"]
    texts += ["zipped", "last"]
    assert got == encode_batch_ids(r50k, [t.encode() for t in texts])
    meta = json.loads((tmp_path / "o1" / "shard.json").read_text())
    assert meta["inputs"] == [str(f) for f in files]


def test_directory_errors(tmp_path):
    empty = tmp_path / "empty"
    (empty / "_logs").mkdir(parents=True)
    (empty / ".DS_Store").write_bytes(b"")
    with pytest.raises(CorpusError) as e:
        corpus.check_inputs([empty])
    assert str(e.value) == f"{empty}: a directory with no input files (names starting with . or _ left out)"
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "a.jsonl").write_bytes(lines("a"))
    (broken / "gone.jsonl").symlink_to(tmp_path / "nowhere.jsonl")
    with pytest.raises(CorpusError) as e:
        corpus.check_inputs([broken])
    assert str(e.value) == f"{broken / 'gone.jsonl'}: no such file (a broken symbolic link)"
