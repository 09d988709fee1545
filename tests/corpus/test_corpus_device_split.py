"""The corpus job with its blocks of lines split on the device (the option `device_split`,
corpus/device_split.py) against the same job without it (the host's native reader, whose
tests compare it with json.loads): the same ids and offsets, the same shards byte for byte,
the same one-line file:line errors, on the shared corpora cut into blocks at many places, on
long lines, blank lines and CRLF, and on generated JSONL. Each job runs on the CPU backend
(the split's CPU executor) and, for a few, on a GPU where JAX sees one."""

from __future__ import annotations

import gzip
import json
import threading
import types
from pathlib import Path

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbpe_jax.corpus import device_split as device_split_module
from blockbpe_jax.corpus import documents as documents_module
from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus.device import WindowBuffers
from blockbpe_jax.corpus.types import CorpusError

import corpus_shared
from corpus_shared import assert_same_outcome, instances_made, utf8_cut
from helpers import gpu_devices
from test_jsonl_device import bad_jsonl_block, jsonl_block

# corpus_shared's module-scoped fixtures, requested by name below
root, cl100k, war_and_peace = corpus_shared.root, corpus_shared.cl100k, corpus_shared.war_and_peace

DEVICES = [pytest.param("cpu", id="cpu")] + [
    pytest.param("gpu", id="gpu", marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX"))
]
FIELD = "text"


def device_of(kind: str):
    return jax.devices("cpu")[0] if kind == "cpu" else gpu_devices()[0]


@pytest.fixture
def splits(monkeypatch) -> list:
    """The DeviceSplit objects the jobs of a test make (their counts of blocks split on the
    device and given up on show which path a job took)."""
    return instances_made(monkeypatch, device_split_module.DeviceSplit)


def outcome(tok, paths, on: bool, **options):
    """(ids, offsets) of the job in memory, or the text of the CorpusError it raises."""
    try:
        ids, offsets = corpus.encode_files_to_arrays(tok, paths, device_split=on, **options)
    except CorpusError as e:
        return str(e)
    return ids, offsets


def assert_same(tok, paths, **options):
    """The job with the device split on gives what it gives off (ids and offsets, or the same
    error); returns the result off."""
    off = outcome(tok, paths, False, **options)
    on = outcome(tok, paths, True, **options)
    assert_same_outcome(on, off)
    return off


def used(splits) -> tuple[int, int]:
    """(blocks split on the device, of those given up on) by the jobs so far."""
    return sum(s.blocks for s in splits), sum(s.given_up for s in splits)


def gsm8k(root, tmp_path: Path, field: str) -> Path:
    """GSM8K's test set as JSONL with `field` the one the job reads (the other kept)."""
    lines = (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    path = tmp_path / f"gsm8k_{field}.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


# --------------------------------------------------------------------------------------------
# the shared corpora, cut into blocks in many places
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("window", [8 << 10, 64 << 10, 1 << 20])
@pytest.mark.parametrize("field", ["question", "answer"])
def test_gsm8k_jsonl(root, cl100k, tmp_path, splits, kind, window, field):
    path = gsm8k(root, tmp_path, field)
    ids, offsets = assert_same(cl100k, [path], jsonl_field=field, window_bytes=window, device=device_of(kind))
    assert len(offsets) == 1320 and len(ids) > 0
    blocks, given_up = used(splits)
    assert blocks >= path.stat().st_size // window and given_up == 0


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("window", [4 << 10, 32 << 10, 256 << 10])
def test_plain_text(root, cl100k, war_and_peace, tmp_path, splits, kind, window):
    """War and Peace's lines (blank ones between paragraphs, CRLF on some) and WikiText-2
    (gzip: decompressed, then split on the device)."""
    text = utf8_cut(war_and_peace[200_000:], 400_000)
    lines = text.split(b"\n")
    crlf = b"\n".join(x + b"\r" if i % 7 == 3 else x for i, x in enumerate(lines))
    (tmp_path / "wp.txt").write_bytes(crlf)
    wiki = gzip.decompress((root / "corpus/wikitext2_test.txt.gz").read_bytes())[:300_000]
    (tmp_path / "wiki.txt.gz").write_bytes(gzip.compress(wiki))
    paths = [tmp_path / "wp.txt", tmp_path / "wiki.txt.gz"]
    ids, offsets = assert_same(cl100k, paths, window_bytes=window, device=device_of(kind))
    assert len(offsets) > 1000
    blocks, given_up = used(splits)
    assert blocks >= 700_000 // window and given_up == 0


def long_lines(war_and_peace: bytes) -> tuple[bytes, bytes]:
    """(JSONL, plain text) of documents of 1 byte to 300 KB (lines over the split's 16 KiB
    pieces among short ones), blank and whitespace-only lines, CRLF and bare LF."""
    rng = np.random.default_rng(7)
    text = utf8_cut(war_and_peace, 2_000_000).decode()
    docs, at = [], 0
    for n in rng.choice([1, 50, 400, 5_000, 17_000, 70_000, 300_000], size=60).tolist():
        docs.append(text[at : at + n])
        at = (at + n) % (len(text) - 300_000)
    jsonl, plain = [], []
    for i, d in enumerate(docs):
        end = "\r\n" if i % 3 == 0 else "\n"
        jsonl.append(json.dumps({"id": i, FIELD: d}, ensure_ascii=i % 2 == 0) + end)
        plain.append(d.replace("\n", " ").replace("\r", " ") + end)
        if i % 5 == 1:
            jsonl.append([" \n", "\n", "\t\r\n", "\r\n"][i % 4])
            plain.append(["\n", "\r\n"][i % 2])
    return "".join(jsonl).encode(), "".join(plain).encode()


@pytest.mark.parametrize("window", [16 << 10, 100 << 10, 1 << 20])
@pytest.mark.parametrize("what", ["jsonl", "text"])
def test_long_lines_blank_lines_crlf(cl100k, war_and_peace, tmp_path, splits, window, what):
    jsonl, plain = long_lines(war_and_peace)
    path = tmp_path / f"long.{what}"
    path.write_bytes(jsonl if what == "jsonl" else plain)
    field = FIELD if what == "jsonl" else None
    ids, offsets = assert_same(cl100k, [path], jsonl_field=field, window_bytes=window)
    assert len(offsets) == 61
    blocks, given_up = used(splits)
    assert blocks >= 1 and given_up == 0


def test_written_shards_byte_for_byte(root, cl100k, tmp_path, splits):
    """encode_files' flat shards (several, small) and sidecar equal with the option on and off
    (the sidecar's timing aside)."""
    path = gsm8k(root, tmp_path, "answer")
    for on in (False, True):
        corpus.encode_files(
            cl100k,
            [path],
            tmp_path / f"out_{on}" / "shard",
            jsonl_field="answer",
            window_bytes=32 << 10,
            shard_tokens=50_000,
            device_split=on,
        )
    off_files = sorted(p.name for p in (tmp_path / "out_False").iterdir())
    assert off_files == sorted(p.name for p in (tmp_path / "out_True").iterdir()) and len(off_files) > 4
    for name in off_files:
        a, b = (tmp_path / f"out_{on}" / name for on in (False, True))
        if name.endswith(".json"):
            sidecars = [json.loads(p.read_text()) for p in (a, b)]
            for s in sidecars:
                s.pop("seconds")
            assert sidecars[0] == sidecars[1]
        else:
            assert a.read_bytes() == b.read_bytes(), name
    assert used(splits)[0] > 5


@pytest.mark.parametrize("pack_width", [0, 16384])
def test_the_gpus_host_bytes_on_the_cpu(root, cl100k, tmp_path, splits, monkeypatch, pack_width):
    """The window's host bytes as a GPU makes them (device_split._host_bytes): no separator
    (pack_width 0: a zero-stride view), else the documents read back into a kept buffer of
    the engine's pool (reused by later windows only once their calls have run: a window whose
    buffer were reused too early would pack from another window's bytes), with documents that
    hold the separator's bytes (encoded alone)."""
    monkeypatch.setattr(device_split_module, "DOCUMENTS_ON_HOST_ON_CPU", False)
    lines = (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()[:400]
    lines[150] = json.dumps({"question": "a <|endoftext|> b<|endoftext|>", "answer": "x"})
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert_same(
        cl100k,
        [path],
        jsonl_field="question",
        window_bytes=16 << 10,
        pack_width=pack_width,
        allowed_special="all",
    )
    assert_same(cl100k, [path], jsonl_field="question", window_bytes=16 << 10, pack_width=pack_width)
    assert used(splits)[0] > 4 and all(s.sep == (b"<|endoftext|>" if pack_width else b"") for s in splits)


@pytest.mark.parametrize("kind", DEVICES)
def test_blocks_go_to_the_device_from_where_they_were_read(root, cl100k, tmp_path, splits, monkeypatch, kind):
    """A file's blocks are read into the pool's buffers (page-locked on a GPU) and each goes to
    the device from there, its slot's host memory never written (filled with newlines here, so
    that reading it anywhere would show): the same documents and errors, with blocks the split
    gives up on and blocks of more lines than its first capacity (both read back from the
    device for the host). On the CPU backend by DIRECT_ON_CPU (DOCUMENTS_ON_HOST_ON_CPU off)."""
    monkeypatch.setattr(device_split_module, "DIRECT_ON_CPU", True)
    monkeypatch.setattr(device_split_module, "DOCUMENTS_ON_HOST_ON_CPU", False)
    take = WindowBuffers.flat_slot

    def stale(self, need):
        slot = take(self, need)
        slot.host[:] = ord("\n")
        return slot

    monkeypatch.setattr(WindowBuffers, "flat_slot", stale)
    device = device_of(kind)
    lines = gsm8k(root, tmp_path, "question").read_text().splitlines()
    lines[300] = f'{{"a": {"[" * 100 + "]" * 100}, "question": "deep nesting"}}'  # (given up on)
    lines[700] = '{"question": "' + "\\n" * 3000 + '"}'
    path = tmp_path / "q.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert_same(cl100k, [path], jsonl_field="question", window_bytes=16 << 10, device=device)
    assert used(splits)[1] >= 1
    short = tmp_path / "short.txt"  # (~8 bytes a line: more lines than a block's first guess)
    short.write_text("".join(f"w{k % 997}\n" for k in range(40000)))
    assert_same(cl100k, [short], window_bytes=64 << 10, device=device)
    assert splits[-1].max_lines >= 8192  # (grown past its first guess: 64 KiB blocks of ~8,000 lines)
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines[:900] + ['{"question": 3}'] + lines[900:]) + "\n")
    error = outcome(cl100k, [bad], True, jsonl_field="question", window_bytes=16 << 10, device=device)
    assert error == outcome(
        cl100k, [bad], False, jsonl_field="question", window_bytes=16 << 10, device=device
    )
    assert isinstance(error, str) and f"{bad}:901" in error
    # (every block went from where it was read: a job that raised dispatched some it never read back)
    assert all(s.direct_blocks >= s.blocks > 0 for s in splits) and used(splits)[0] > 10


# --------------------------------------------------------------------------------------------
# generated JSONL
# --------------------------------------------------------------------------------------------


@st.composite
def jsonl_file(draw, blocks):
    return b"\n".join(draw(st.lists(blocks, min_size=1, max_size=6)))


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=jsonl_file(jsonl_block()), window=st.sampled_from([64, 300, 2048]))
def test_generated_jsonl(cl100k, tmp_path_factory, splits, data, window):
    """Well-formed JSONL of every spelling (test_jsonl_device's blocks), in windows of a few
    lines: the same ids and offsets, every block split on the device."""
    path = tmp_path_factory.mktemp("gen") / "g.jsonl"
    path.write_bytes(data)
    before = used(splits)[0]
    assert not isinstance(assert_same(cl100k, [path], jsonl_field=FIELD, window_bytes=window), str)
    blocks, given_up = used(splits)
    assert given_up == 0 and (blocks > before or not data.strip())


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    data=jsonl_file(st.one_of(jsonl_block(lone=True), bad_jsonl_block(), jsonl_block())),
    window=st.sampled_from([64, 2048]),
)
def test_generated_bad_jsonl(cl100k, tmp_path_factory, data, window):
    """Lone surrogates in the field, invalid lines, missing fields: the same documents or the
    same one-line error."""
    path = tmp_path_factory.mktemp("gen") / "g.jsonl"
    path.write_bytes(data)
    assert_same(cl100k, [path], jsonl_field=FIELD, window_bytes=window)


# --------------------------------------------------------------------------------------------
# bad input, and blocks only the host takes
# --------------------------------------------------------------------------------------------

BAD_LINES = {
    "invalid JSON": (b'{"text": "a"', "not valid JSON"),
    "missing field": (b'{"other": "x"}', "no field 'text'"),
    "non-string field": (b'{"text": 5}', "field 'text' is int, not a string"),
    "not an object": (b'["text"]', "not a JSON object"),
    "invalid UTF-8": (b'{"text": "caf\xc3"}', "not valid UTF-8"),
    "lone surrogate": (b'{"text": "a\\ud800b"}', "lone surrogate"),
}


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_bad_line_same_error(root, cl100k, tmp_path, splits, kind, case):
    """A bad line after 900 good ones (many windows encoded before it): today's one-line
    file:line error."""
    bad, words = BAD_LINES[case]
    gsm = (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    lines = [json.dumps({FIELD: json.loads(x)["question"]}).encode() for x in gsm]
    lines.insert(900, bad)
    path = tmp_path / "bad.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    error = assert_same(cl100k, [path], jsonl_field=FIELD, window_bytes=16 << 10, device=device_of(kind))
    assert isinstance(error, str) and error.startswith(f"{path}:901: ") and words in error
    assert "\n" not in error
    blocks, given_up = used(splits)
    assert given_up >= 1 and blocks > given_up


@pytest.mark.parametrize("kind", DEVICES)
def test_bad_utf8_in_plain_text(war_and_peace, cl100k, tmp_path, splits, kind):
    lines = utf8_cut(war_and_peace, 200_000).split(b"\n")
    lines[2500] = lines[2500] + b"\xed\xa0\x80"
    path = tmp_path / "bad.txt"
    path.write_bytes(b"\n".join(lines))
    error = assert_same(cl100k, [path], window_bytes=16 << 10, device=device_of(kind))
    assert isinstance(error, str) and error.startswith(f"{path}:2501: not valid UTF-8")


@pytest.mark.parametrize("kind", DEVICES)
def test_blocks_only_json_loads_takes(root, cl100k, tmp_path, splits, kind):
    """Lines the shared rules give up on but json.loads accepts (nesting deeper than the
    split's 64 levels, a 120-digit number): the device gives up, the host reads that block,
    the documents are right."""
    lines = gsm8k(root, tmp_path, "question").read_text().splitlines()
    deep = "[" * 100 + "]" * 100
    lines[300] = f'{{"a": {deep}, "question": "deep nesting"}}'
    lines[700] = f'{{"n": {"9" * 120}, "question": "a long number"}}'
    path = tmp_path / "deep.jsonl"
    path.write_text("\n".join(lines) + "\n")
    ids, offsets = assert_same(
        cl100k, [path], jsonl_field="question", window_bytes=16 << 10, device=device_of(kind)
    )
    assert len(offsets) == 1320
    want = corpus_shared.encode_batch_ids(cl100k, [b"deep nesting", b"a long number"])
    assert [ids[offsets[k] : offsets[k + 1]].tolist() for k in (300, 700)] == want
    blocks, given_up = used(splits)
    assert given_up == 2 and blocks > given_up


# --------------------------------------------------------------------------------------------
# where the option changes nothing
# --------------------------------------------------------------------------------------------


def test_nfc_tokenizer(data_dir, tmp_path, splits):
    """An NFC tokenizer: with NFC on the device (the default where available) the blocks are
    split on the device too; where the host normalizes (device_normalizer=False, as for any other
    normalizer) they are not (plan_window normalizes the host's bytes). The same ids either way."""
    from helpers import unicodedata16
    from synthetic import nfc_tokenizer

    unicodedata16()
    tok, _ = nfc_tokenizer(data_dir)
    assert tok.nfc
    path = tmp_path / "nfc.jsonl"
    path.write_text("".join(json.dumps({FIELD: t}) + "\n" for t in ["cafe\u0301", "\u212b x", "plain"] * 50))
    host = assert_same(tok, [path], jsonl_field=FIELD, window_bytes=1024, device_normalizer=False)
    assert splits == []
    on = assert_same(tok, [path], jsonl_field=FIELD, window_bytes=1024)
    assert used(splits)[0] > 3
    assert np.array_equal(on[0], host[0]) and np.array_equal(on[1], host[1])


def test_parquet_and_split_file_keep_the_host_path(root, cl100k, tmp_path, splits):
    """Parquet inputs and `split` file or chunk:N are not read as lines: the option changes
    nothing (no block is split on the device)."""
    pq = pytest.importorskip("pyarrow.parquet")
    import pyarrow as pa

    questions = [
        json.loads(x)["question"] for x in (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    ]
    pq.write_table(pa.table({FIELD: questions}), tmp_path / "q.parquet", row_group_size=200)
    assert_same(cl100k, [tmp_path / "q.parquet"], jsonl_field=FIELD, window_bytes=16 << 10)
    (tmp_path / "a.txt").write_text("\n".join(questions[:300]))
    (tmp_path / "b.txt").write_text("\n".join(questions[300:]))
    for split in ("file", "chunk:1000"):
        assert_same(cl100k, [tmp_path / "a.txt", tmp_path / "b.txt"], split=split, window_bytes=16 << 10)
    assert used(splits) == (0, 0)


def test_environment_turns_it_on(root, cl100k, tmp_path, splits, monkeypatch):
    """BLOCKBPE_DEVICE_SPLIT=1 turns the option on where it is not given (the CLI, the
    benchmarks); an explicit False keeps it off."""
    path = gsm8k(root, tmp_path, "question")
    monkeypatch.setenv(device_split_module.ENV, "1")
    off = corpus.encode_files_to_arrays(cl100k, [path], jsonl_field="question", device_split=False)
    assert splits == []
    on = corpus.encode_files_to_arrays(cl100k, [path], jsonl_field="question")
    assert used(splits)[0] >= 1
    assert np.array_equal(on[0], off[0]) and np.array_equal(on[1], off[1])


def test_read_ahead_then_split_on_the_device(root, cl100k, tmp_path, splits, monkeypatch):
    """The command's way with the split on (its default on a GPU): the blocks read before the
    engine starts (`read_ahead`) are split on the host, the later ones on the device; the
    shards are those of the job without the split."""
    path = gsm8k(root, tmp_path, "question")
    options = dict(jsonl_field="question", window_bytes=4096)
    corpus.encode_files(cl100k, [path], tmp_path / "off" / "s", device_split=False, **options)
    assert splits == []
    host_split, split_here = threading.Event(), documents_module._split

    def splitting(*args):
        out = split_here(*args)
        host_split.set()
        return out

    monkeypatch.setattr(documents_module, "_split", splitting)
    read = corpus.read_ahead([path], **options)
    assert host_split.wait(60)  # (a block split on the host before the engine starts)
    corpus.encode_files(cl100k, [path], tmp_path / "ahead" / "s", read=read, device_split=True, **options)
    assert used(splits)[0] >= 1  # (and the later blocks on the device)
    off = corpus.read_shards(tmp_path / "off" / "s")
    for a, b in zip(corpus.read_shards(tmp_path / "ahead" / "s"), off, strict=True):
        assert np.array_equal(a, b)


def test_on_by_default_on_a_gpu(monkeypatch):
    """Not given, the option is on where the job's device is a GPU and off on the CPU backend;
    BLOCKBPE_DEVICE_SPLIT (1 or 0) decides over the device, the option over both; any other
    value of the variable is an error naming it."""
    wanted = device_split_module.wanted
    gpu, cpu = types.SimpleNamespace(platform="gpu"), jax.devices("cpu")[0]
    monkeypatch.delenv(device_split_module.ENV, raising=False)
    assert wanted(None, gpu) and not wanted(None, cpu)
    assert wanted(True, cpu) and not wanted(False, gpu)
    monkeypatch.setenv(device_split_module.ENV, "0")
    assert not wanted(None, gpu) and wanted(True, gpu)
    monkeypatch.setenv(device_split_module.ENV, "1")
    assert wanted(None, cpu) and not wanted(False, cpu)
    monkeypatch.setenv(device_split_module.ENV, "yes")
    with pytest.raises(ValueError, match="BLOCKBPE_DEVICE_SPLIT must be 0 or 1, got 'yes'"):
        wanted(None, gpu)
    assert wanted(True, gpu)  # (the variable is read only where the option is not given)


@pytest.mark.parametrize("what", ["jsonl", "text"])
def test_max_len_error_names_the_line(cl100k, war_and_peace, tmp_path, splits, what):
    """A document longer than max_len in a block split on the device: the error names its line
    (the split's lines, counted across blocks), as off."""
    jsonl, plain = long_lines(war_and_peace)
    path = tmp_path / f"long.{what}"
    path.write_bytes(jsonl if what == "jsonl" else plain)
    field = FIELD if what == "jsonl" else None
    error = assert_same(cl100k, [path], jsonl_field=field, window_bytes=64 << 10, max_len=60_000)
    assert isinstance(error, str) and "more than --max-len 60000" in error
    assert used(splits)[0] >= 1


@pytest.mark.parametrize("bad", [False, True])
def test_small_inputs_read_together(root, cl100k, tmp_path, splits, bad):
    """Small files read several to a block (corpus.documents._small_inputs): the split's lines
    mapped back to each file's own; a bad line in the seventh file names that file and line."""
    gsm = (root / "corpus/gsm8k_test.jsonl").read_text().splitlines()
    paths = []
    for k in range(12):
        lines = gsm[k * 20 : k * 20 + 3 + k]
        if bad and k == 6:
            lines[2] = '{"question": 1}'
        paths.append(tmp_path / f"part{k:02d}.jsonl")
        paths[-1].write_text("\n\n".join(lines) + "\n")
    got = assert_same(cl100k, paths, jsonl_field="question", window_bytes=64 << 10)
    if bad:
        assert got == f"{paths[6]}:5: field 'question' is int, not a string"
    else:
        assert len(got[1]) == 1 + sum(3 + k for k in range(12))
    assert used(splits)[0] >= 1


@pytest.mark.parametrize("pack_width", [0, 1024])
def test_only_empty_documents(cl100k, tmp_path, splits, pack_width):
    """Windows whose documents are all empty (a window buffer of no bytes has no address to
    key its calls' plan by: the job keeps at least one byte): no ids, with the option on and off."""
    path = tmp_path / "empty.jsonl"
    path.write_text(json.dumps({FIELD: ""}) + "\n" + json.dumps({FIELD: ""}) + "\n")
    ids, offsets = assert_same(cl100k, [path], jsonl_field=FIELD, pack_width=pack_width)
    assert len(ids) == 0 and offsets.tolist() == [0, 0, 0]
