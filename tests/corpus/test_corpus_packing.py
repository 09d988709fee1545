"""The corpus job's packing of short documents into shared rows (corpus.plan.packing,
core/pack_documents.h): which separator a job may use, the native packer's rows, and jobs whose
ids equal tiktoken's document by document (generated adversarial documents: whitespace at their
ends, parts of the separator, the separator itself; allowed specials none and all; exact and
bytes mode), on the CPU and on a GPU."""

from __future__ import annotations

import json
import types

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.corpus import (
    job as corpus,
    documents,
    device as window_device,
    engine as window_encode,
    plan as window_plan,
)
from blockbpe_jax import native, testing

from helpers import BACKENDS, device_for, load_tokenizer, tiktoken_enc, unicodedata16

EOT = "<|endoftext|>"


def _tok_with(specials: dict, char_level=None):
    """What `packing` reads of a tokenizer: its specials, whether it merges characters, and
    Tokenizer's own rule for allowed specials."""
    tok = types.SimpleNamespace(vocab=types.SimpleNamespace(special_tokens=specials, char_level=char_level))
    tok._special_key = lambda allowed: bb.Tokenizer._special_key(tok, allowed)
    return tok


def test_the_separator_and_when_a_job_packs():
    specials = {EOT: 7, "<|fim_prefix|>": 8}
    assert window_plan.packing(_tok_with(specials), "exact", "none", 4096) == (EOT.encode(), 7, {EOT}, 4096)
    assert window_plan.packing(_tok_with(specials), "bytes", "all", 64).allowed == "all"
    # without <|endoftext|>: the special of the lowest id
    assert window_plan.packing(_tok_with({"</s>": 2, "<s>": 1}), "exact", "none", 64).sep == b"<s>"
    # no packing: width 0 or not above the separator's, characters merged (SentencePiece), no
    # specials, or an allowed special that a document's end could start (leftmost match wins)
    for tok, width in [
        (_tok_with(specials), 0),
        (_tok_with(specials), len(EOT)),
        (_tok_with(specials, char_level=object()), 4096),
        (_tok_with({}), 4096),
    ]:
        assert window_plan.packing(tok, "exact", "none", width) is None
    for other in ("ab<|", "<|endoftext|>x", "x<|endoftext|>y", "x<|endof"):
        clash = _tok_with({**specials, other: 9})
        assert window_plan.packing(clash, "exact", "all", 4096) is None
        assert window_plan.packing(clash, "exact", {other}, 4096) is None
        assert window_plan.packing(clash, "exact", "none", 4096) is not None  # (never matched)


def test_packed_rows_are_runs_of_whole_documents():
    sep = EOT.encode()
    rng = np.random.default_rng(0)
    docs = [bytes(rng.integers(97, 100, int(n)).astype(np.uint8)) for n in rng.integers(0, 60, 300)]
    docs[5] = b"x" * 200  # longer than a row: alone
    docs[9] = b"ab" + sep + b"cd"  # holds the separator: alone
    docs[10] = b"ab<|endoftext"  # a part of it: packed
    data = np.frombuffer(b"".join(docs), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    out = np.zeros(data.size + len(docs) * len(sep), np.uint8)
    row_of_doc, rows = native.cpu.pack_documents(data, offsets, sep, 100, out)
    assert bytes(out) == b"".join(d + sep for d in docs)
    alone = [i for i in range(len(docs)) if row_of_doc[i] < 0]
    assert alone == [i for i, d in enumerate(docs) if len(d) + len(sep) > 100 or sep in d] and 5 in alone
    packed = [i for i in range(len(docs)) if row_of_doc[i] >= 0]
    assert np.all(np.diff(row_of_doc[packed]) >= 0)
    for r, (start, length) in enumerate(rows.tolist()):
        members = [i for i in packed if row_of_doc[i] == r]
        assert members == list(range(members[0], members[-1] + 1))
        assert length <= 100 and bytes(out[start : start + length]) == b"".join(
            docs[i] + sep for i in members
        )
        after = members[-1] + 1  # a row ends where the next document does not fit or goes alone
        assert after == len(docs) or row_of_doc[after] < 0 or length + len(docs[after]) + len(sep) > 100
    # joined already (the reader's windows, core/jsonl.h): the same rows, nothing copied, and a
    # document without its separator refused
    joined_offsets = offsets + np.arange(len(offsets)) * len(sep)
    assert native.cpu.pack_documents(out, joined_offsets, sep, 100, None)[0].tolist() == row_of_doc.tolist()
    assert native.cpu.pack_documents(out, joined_offsets, sep, 100, None)[1].tolist() == rows.tolist()
    broken = out.copy()
    broken[joined_offsets[7] - 1] ^= 1
    with pytest.raises(ValueError, match="document 6 is not followed by the separator"):
        native.cpu.pack_documents(broken, joined_offsets, sep, 100, None)
    with pytest.raises(ValueError, match="out must hold"):
        native.cpu.pack_documents(data, offsets, sep, 100, out[:-1])
    with pytest.raises(ValueError, match="ascending"):
        native.cpu.pack_documents(data, offsets[::-1].copy(), sep, 100, out)
    with pytest.raises(ValueError, match="len\\(sep\\)"):
        native.cpu.pack_documents(data, offsets, b"", 100, out)


@pytest.mark.parametrize("sep", [b"<", b"<|", EOT.encode(), "\u2028§".encode()])
def test_packer_finds_the_separator_anywhere(sep):
    """Documents of 0-99 bytes drawn from the separator's own bytes (so its prefixes and near
    misses abound), some with the separator put in at a random place (the edges of the packer's
    16-byte scan included): exactly the documents that hold it go alone."""
    rng = np.random.default_rng(len(sep))
    alphabet = np.frombuffer(b"a|" + sep, np.uint8)
    docs = []
    for n in rng.integers(0, 100, 3000):
        d = bytes(rng.choice(alphabet, int(n)).astype(np.uint8))
        if rng.random() < 0.3:
            k = int(rng.integers(0, len(d) + 1))
            d = d[:k] + sep + d[k:]
        docs.append(d)
    data = np.frombuffer(b"".join(docs), np.uint8)
    offsets = np.concatenate([[0], np.cumsum([len(d) for d in docs])]).astype(np.int64)
    out = np.zeros(data.size + len(docs) * len(sep), np.uint8)
    row_of_doc, _ = native.cpu.pack_documents(data, offsets, sep, 1 << 20, out)
    holding = [sep in d for d in docs]
    assert [r < 0 for r in row_of_doc.tolist()] == holding
    assert 0 < sum(holding) < len(docs)


def test_packer_copies_long_documents_in_pieces():
    """Megabytes of documents, some longer than the copy's ranges (a range of the output may
    start or end inside a document or its separator), from a window whose offsets do not start
    at 0: the joined bytes are exact."""
    sep = EOT.encode()
    rng = np.random.default_rng(1)
    sizes = [3_000_001, 0, 5, 2_500_000, *rng.integers(0, 40, 2000).tolist(), 1_048_577, 7]
    blob = rng.integers(32, 127, sum(sizes) + 11).astype(np.uint8)
    offsets = (11 + np.concatenate([[0], np.cumsum(sizes)])).astype(np.int64)
    docs = [blob[offsets[i] : offsets[i + 1]].tobytes() for i in range(len(sizes))]
    out = np.zeros(sum(sizes) + len(sizes) * len(sep), np.uint8)
    row_of_doc, _ = native.cpu.pack_documents(blob, offsets, sep, 4096, out)
    assert bytes(out) == b"".join(d + sep for d in docs)
    assert [i for i in range(len(sizes)) if row_of_doc[i] < 0] == [0, 3, len(sizes) - 2]


def _job_ids(tmp_path, tok, docs: list[str], **kwargs) -> list[list[int]]:
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps({"text": d}) + "\n" for d in docs), encoding="utf-8")
    out = tmp_path / "o" / "s"
    corpus.encode_files(tok, [src], out, jsonl_field="text", overwrite=True, **kwargs)
    return [a.tolist() for a in corpus.read_shards(out)]


def _record_calls(monkeypatch) -> list:
    """("packed" or "plain", width) of every call the job's window FFI calls plan, appended as
    it makes them."""
    calls = []
    real = window_device.CompiledWindows.__call__

    def spy(self, flat, table, raw, plan, workspace):
        calls.extend(("packed" if self.sep_id >= 0 else "plain", int(c[1])) for c in plan)
        return real(self, flat, table, raw, plan, workspace)

    monkeypatch.setattr(window_device.CompiledWindows, "__call__", spy)
    return calls


def test_short_documents_share_rows(tmp_path, monkeypatch):
    """With packing, the short documents go in calls of packed rows (fewer calls than one per
    width), the long ones in calls of their own width; the ids are tiktoken's either way."""
    tok = load_tokenizer("r50k", "tiktoken")
    rng = np.random.default_rng(3)
    words = ["alpha", " beta", "\n\n", "🎉", " 1234", "  ", "日本語"]
    docs = ["".join(rng.choice(words, int(n))) for n in rng.integers(0, 80, 400)] + ["long " * 900]
    calls = _record_calls(monkeypatch)
    want = [tiktoken_enc("r50k", "exact").encode(d) for d in docs]
    assert _job_ids(tmp_path, tok, docs, pack_width=1024, batch_bytes=16384) == want
    packed = calls[:]
    calls.clear()
    assert _job_ids(tmp_path, tok, docs, pack_width=0, batch_bytes=16384) == want
    assert {w for s, w in packed if s == "packed"} == {1024}
    assert {w for s, w in packed if s == "plain"} == {8192}  # the long document alone
    assert len(packed) < len(calls)
    calls.clear()  # with max_len, every call (packed rows too) is max_len wide
    long = "long " * 100
    assert _job_ids(tmp_path, tok, docs[:-1] + [long], max_len=512, batch_bytes=16384) == want[:-1] + [
        tiktoken_enc("r50k", "exact").encode(long)
    ]
    assert {w for _, w in calls} == {512} and {s for s, _ in calls} == {"packed", "plain"}


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_reader_joins_documents_into_the_engines_buffers(tmp_path, monkeypatch, backend):
    """A packing job's reader joins each block's documents, separators in place, into the
    window buffers the engine then uploads (the packer only cuts rows); a block the native
    reader gives up on (nesting deeper than it parses) is read by Python and packed by copy.
    Both kinds of window in one job: tiktoken's ids."""
    tok = load_tokenizer("r50k", "tiktoken")
    rng = np.random.default_rng(4)
    words = ["alpha", " beta", "\n", "🎉", " 1234", "  ", "<|endoftext", "|>"]
    docs = ["".join(rng.choice(words, int(n))) for n in rng.integers(0, 60, 600)]
    lines = [json.dumps({"text": d}) for d in docs]
    lines[300] = '{"a": ' + "[" * 600 + "]" * 600 + ', "text": ' + json.dumps(docs[300]) + "}"
    src = tmp_path / "in.jsonl"
    src.write_text("\n".join(lines) + "\n", encoding="utf-8")
    real, joined = native.cpu.pack_documents, []
    monkeypatch.setattr(native.cpu, "pack_documents", lambda *a: joined.append(a[-1] is None) or real(*a))
    out = tmp_path / "o" / "s"
    corpus.encode_files(
        tok, [src], out, jsonl_field="text", window_bytes=4096, device=device_for(backend[0]), pack_width=1024
    )
    ref = tiktoken_enc("r50k", "exact")
    assert [a.tolist() for a in corpus.read_shards(out)] == [
        ref.encode(d, disallowed_special=()) for d in docs
    ]
    assert joined.count(False) == 1 and joined.count(True) > 5
    # the reader's windows themselves: the documents without their separators
    join = window_encode.JoinInto()
    join.open(EOT.encode(), lambda n: types.SimpleNamespace(host=np.zeros(n + 7, np.uint8)))
    windows = list(documents.iter_windows([src], jsonl_field="text", window_bytes=4096, join=join))
    assert [b.decode() for w in windows for b in w.blobs] == docs
    assert [w.sep_len for w in windows].count(0) == 1
    assert all((w.lengths == [len(b) for b in w.blobs]).all() for w in windows)


DOCUMENT = testing.mixed_text(specials=(EOT, "<|endoftext", "<|", "|>", "<|fim_prefix|>", " ", "\n"))


@pytest.mark.parametrize("backend", BACKENDS[:2])
@pytest.mark.parametrize(
    "name, mode, allowed",
    [("r50k", "exact", "none"), ("cl100k", "exact", "all"), ("cl100k", "bytes", "none")],
)
@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(docs=st.lists(DOCUMENT, min_size=1, max_size=40))
def test_packed_job_equals_tiktoken(tmp_path, backend, name, mode, allowed, docs):
    tok = load_tokenizer(name, "tiktoken")
    ref = tiktoken_enc(name, mode)
    if allowed == "all":
        want = [ref.encode(d, allowed_special="all") for d in docs]
    else:
        want = [ref.encode(d, disallowed_special=()) for d in docs]
    got = _job_ids(
        tmp_path,
        tok,
        docs,
        mode=mode,
        allowed_special=allowed,
        pack_width=256,
        batch_bytes=2048,
        window_bytes=1024,
        device=device_for(backend[0]),
    )
    assert got == want


@pytest.mark.parametrize("backend", BACKENDS[:2])
def test_packed_rows_wider_than_a_block_holds(tmp_path, data_dir, monkeypatch, backend):
    """Rows of 32 KiB (past the one-block kernel's shared-memory rows: the tile pipeline, its
    specials found per tile) packed with documents of 0-12 KiB (prose, code, adversarial runs
    and parts of the separator at their ends): each document's ids equal tiktoken's."""
    import random

    rng, adversarial = np.random.default_rng(11), list(testing.ADVERSARIAL.values())
    text = (data_dir / "corpus" / "war_and_peace_en.txt").read_text(encoding="utf-8")
    tails = ["", " ", "\n\n", "<|endoftext", "<|", "  x", "123"]
    docs = []
    for n in rng.integers(0, 12_000, 60):
        start = int(rng.integers(0, len(text) - 12_000))
        if rng.random() < 0.7:
            body = text[start : start + int(n)]
        else:  # (one long piece: letters, CJK, spaces, base64, ...)
            make = adversarial[int(rng.integers(len(adversarial)))]
            body = make(random.Random(int(n)), int(n)).decode()
        docs.append(tails[int(rng.integers(len(tails)))] + body + tails[int(rng.integers(len(tails)))])
    tok = load_tokenizer("cl100k", "tiktoken")
    want = [tiktoken_enc("cl100k", "exact").encode(d, disallowed_special=()) for d in docs]
    width = 4 * native.cpu.smem_max_len
    widths = _record_calls(monkeypatch)
    got = _job_ids(
        tmp_path, tok, docs, pack_width=width, batch_bytes=4 * width, device=device_for(backend[0])
    )
    assert got == want
    assert ("packed", width) in widths


def test_bad_pack_width(tmp_path):
    tok = load_tokenizer("r50k", "tiktoken")
    with pytest.raises(ValueError, match="pack_width must be an int, 0 or more, got -1"):
        _job_ids(tmp_path, tok, ["a"], pack_width=-1)


def test_packed_job_with_an_nfc_normalizer(tmp_path, data_dir):
    """A tokenizer with an NFC normalizer (Llama 3's vocabulary, NFC and Qwen2's pattern, as
    test_families_nfc): the job normalizes each document, then packs; text that is not in NFC,
    combining marks at a document's start (right after the separator), specials in the text:
    the ids equal HF tokenizers' on each document."""
    from synthetic import nfc_tokenizer

    unicodedata16()
    tok, hf = nfc_tokenizer(data_dir)
    assert tok.nfc and window_plan.packing(tok, "exact", "all", 256) is not None
    docs = [
        "cafe\u0301 e\u0301",
        "\u0301x",
        "A\u030a \u212b",
        "\u0958 x\u0301",
        "<|end_of_text|>\u0301",
        "",
        " ",
    ]
    docs = docs * 7
    want = [hf.encode(d, add_special_tokens=False).ids for d in docs]
    # (HF splits on its special tokens always: allowed "all" is its behaviour)
    assert _job_ids(tmp_path, tok, docs, pack_width=256, batch_bytes=2048, allowed_special="all") == want
