"""The corpus job for an NFC tokenizer with the normalizer left to the encode calls (NFC on the
device: `device_normalizer`, corpus/engine.py) against the job normalizing on the host
(device_normalizer=False; the path of Lowercase then NFC): the same ids and offsets, the same
shards byte for byte, the same one-line errors, with the device split on and off; on text in
NFC, text that is not (combining marks, singletons, expanding compositions), rows whose NFC
outgrows their width, segments too long for the executors (normalized on the host again),
documents that start with a combining mark after a packed separator, empty documents, JSON
escapes, and hypothesis-generated text. On the CPU backend the CPU executor normalizes as the
CUDA pre-pass does (tests/pretok/test_nfc_normalize.py holds the two to each other); the GPU
variants run where JAX sees one."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from blockbpe_jax.corpus import job as corpus
from blockbpe_jax.corpus import device_normalizer as normalizer_module

import corpus_shared
from corpus_shared import DEVICES, FIELD, assert_paths_agree, device_of, outcome, utf8_cut, write_jsonl
from helpers import unicodedata16

# corpus_shared's fixtures, requested by name below
root, cl100k, war_and_peace = corpus_shared.root, corpus_shared.cl100k, corpus_shared.war_and_peace
engines = corpus_shared.engines


@pytest.fixture
def tok(nfc_tok):
    unicodedata16()  # (the reference's Unicode version, which the tables hold)
    ours, _ = nfc_tok
    assert ours.nfc and ours._device_normalizes
    return ours


# Documents NFC changes: a decomposed accent, singletons (Angstrom and Kelvin signs, Greek
# question mark), a composition excluded from NFC that doubles its bytes (U+0958), Hangul jamo
# that compose, marks out of canonical order, and a combining mark first (after a packed
# separator ">" it would compose: U+226F).
CHANGED = [
    "cafe\u0301 au lait",
    "\u212b and \u212a and \u037e",
    "\u0958" * 40,
    "\u1100\u1161\u11a8 \u1112\u1161\u11ab",
    "a\u0323\u0302 o\u0302\u0323",
    "\u0338 starts with a mark",
    "\u0301",
]


def nfc_documents(war_and_peace: bytes, n: int = 600) -> list[str]:
    """War and Peace's lines (in NFC) with CHANGED's documents, empty ones and long ones mixed in."""
    lines = [x for x in utf8_cut(war_and_peace, 200_000).decode().split("\n") if x.strip()][:n]
    docs = []
    for i, line in enumerate(lines):
        docs.append(line)
        if i % 5 == 2:
            docs.append(CHANGED[i % len(CHANGED)])
        if i % 17 == 3:
            docs.append("")
        if i % 89 == 7:  # (its NFC doubles its bytes, each a token: more tokens than its row's width)
            docs.append("\U0001d15e" * 120)
        if i % 97 == 50:
            docs.append(" ".join(lines[i : i + 40]) + "\u0958" * 200)  # (a long row that outgrows its width)
    return docs


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("pack_width", [0, 128, 1024])
@pytest.mark.parametrize("ensure_ascii", [False, True])
def test_nfc_on_the_device_equals_the_host(
    tok, war_and_peace, tmp_path, engines, kind, pack_width, ensure_ascii
):
    """Rows that outgrow their width under NFC (packed rows of 128 bytes: three U+0958
    documents a row; the long documents) and a mark after a separator, which composes with it:
    those documents (a packed call's all) are encoded again from the host's NFC; the rest the
    device normalized."""
    path = write_jsonl(tmp_path / "nfc.jsonl", nfc_documents(war_and_peace), ensure_ascii)
    ids, offsets = assert_paths_agree(
        tok,
        [path],
        engines,
        jsonl_field=FIELD,
        window_bytes=16 << 10,
        pack_width=pack_width,
        device=device_of(kind),
    )
    assert len(offsets) - 1 == len(nfc_documents(war_and_peace))
    # (packed: a whole packed call again where one of its rows was reported)
    assert 0 < engines[-1].normalized_on_host < (len(offsets) // 2 if pack_width == 0 else len(offsets))


def test_reported_rows_are_normalized_on_the_host_only(tok, war_and_peace, tmp_path, engines, monkeypatch):
    """With NFC on the device the host normalizes no window: only documents the device
    reported (the host normalizer, Tokenizer._normalize_around_specials, is called with those
    alone)."""
    calls = []
    normalize = type(tok)._normalize_around_specials

    def counting(self, texts, allowed_special):
        calls.append(len(texts))
        return normalize(self, texts, allowed_special)

    path = write_jsonl(tmp_path / "nfc.jsonl", nfc_documents(war_and_peace))
    monkeypatch.setattr(type(tok), "_normalize_around_specials", counting)
    corpus.encode_files_to_arrays(tok, [path], jsonl_field=FIELD, window_bytes=16 << 10, pack_width=0)
    assert sum(calls) == engines[-1].normalized_on_host > 0
    calls.clear()
    corpus.encode_files_to_arrays(
        tok, [path], jsonl_field=FIELD, window_bytes=16 << 10, device_normalizer=False
    )
    assert sum(calls) == len(nfc_documents(war_and_peace))


def test_long_segment_and_plain_text(tok, war_and_peace, tmp_path, engines):
    """A segment of hundreds of combining marks (reported by both executors, normalized on the
    host again), as plain lines with the device split on and off."""
    docs = [x for x in nfc_documents(war_and_peace, 200) if x]
    docs[30] = "a" + "\u0301\u0323" * 200 + " tail"
    (tmp_path / "nfc.txt").write_text("\n".join(docs) + "\n")
    assert_paths_agree(tok, [tmp_path / "nfc.txt"], engines, window_bytes=8 << 10)
    assert engines[-1].normalized_on_host >= 1


def test_written_shards_byte_for_byte(tok, war_and_peace, tmp_path, engines):
    path = write_jsonl(tmp_path / "nfc.jsonl", nfc_documents(war_and_peace))
    outs = []
    for name, options in [
        ("host", dict(device_normalizer=False)),
        ("device", {}),
        ("split", dict(device_split=True)),
    ]:
        corpus.encode_files(
            tok,
            [path],
            tmp_path / name / "s",
            jsonl_field=FIELD,
            window_bytes=16 << 10,
            shard_tokens=20_000,
            **options,
        )
        outs.append(tmp_path / name)
    assert engines[0].host_normalizes and engines[1].device_normalizer and engines[2].device_split is not None
    names = sorted(p.name for p in outs[0].iterdir())
    assert len(names) > 3
    for other in outs[1:]:
        assert sorted(p.name for p in other.iterdir()) == names
        for name in names:
            a, b = (outs[0] / name), (other / name)
            if name.endswith(".json"):
                x, y = json.loads(a.read_text()), json.loads(b.read_text())
                x.pop("seconds"), y.pop("seconds")
                assert x == y
            else:
                assert a.read_bytes() == b.read_bytes(), name


@pytest.mark.parametrize("where", ["raw", "normalized"])
def test_max_len_error_as_the_host_path(tok, tmp_path, engines, where):
    """--max-len measures the normalized text: a document over it as read but within it in NFC
    is taken, one within it as read but over it in NFC is the host path's error."""
    docs = ["plain text"] * 300
    docs[200] = "e\u0301" * 40 if where == "raw" else "\u0958" * 30  # (120 -> 80 bytes; 90 -> 180)
    path = write_jsonl(tmp_path / "m.jsonl", docs)
    got = assert_paths_agree(tok, [path], engines, jsonl_field=FIELD, window_bytes=4 << 10, max_len=100)
    if where == "raw":
        assert not isinstance(got, str)
    else:
        assert isinstance(got, str) and got.startswith(f"{path}:201: document of 180 bytes")


def test_which_path_runs(nfc_tok, cl100k):
    """NFC alone: on the device unless device_normalizer=False; a separator NFC could rewrite or
    spell keeps the host path; no normalizer: neither."""
    tok, _ = nfc_tok
    assert normalizer_module.device_normalizer_available(tok, b"<|end_of_text|>")
    assert normalizer_module.device_normalizer_available(tok, b"")
    assert not normalizer_module.device_normalizer_available(tok, "\u212b".encode())  # (NFC rewrites it)
    assert not normalizer_module.device_normalizer_available(tok, b"<K>")  # (NFC spells K from U+212A)
    assert not normalizer_module.device_normalizer_available(tok, "\u0301x".encode())  # (not a boundary)
    assert not normalizer_module.device_normalizer_available(cl100k, b"")


@st.composite
def nfc_texts(draw):
    """Text from a mix of ASCII, Latin with precomposed and combining accents, singletons,
    Hangul syllables and jamo, Devanagari with nukta, CJK and emoji; some documents empty."""
    alphabet = st.sampled_from(
        list('ab <>|\\"\n\t')
        + [
            "\u00e9",
            "e\u0301",
            "\u0301",
            "\u0323",
            "\u212b",
            "\u212a",
            "\u037e",
            "\uac00",
            "\u1100",
            "\u1161",
            "\u11a8",
            "\u0958",
            "\u0915\u093c",
            "\u4e2d",
            "\U0001f600",
            "\u0338",
            "\u2260",
        ]
    )
    return [draw(st.lists(alphabet, max_size=60).map("".join)) for _ in range(draw(st.integers(1, 60)))]


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_text(tok, nfc_tok, tmp_path_factory, data):
    docs = data.draw(nfc_texts())
    window = data.draw(st.sampled_from([256, 2048]))
    pack_width = data.draw(st.sampled_from([0, 64, 1024]))
    path = write_jsonl(tmp_path_factory.mktemp("g") / "g.jsonl", docs, data.draw(st.booleans()))
    got = []
    for device_normalizer, split in ((False, False), (None, False), (None, True)):
        got.append(
            outcome(
                tok,
                [path],
                device_normalizer,
                device_split=split,
                jsonl_field=FIELD,
                window_bytes=window,
                pack_width=pack_width,
            )
        )
    ids, offsets = got[0]
    for other in got[1:]:
        assert np.array_equal(other[0], ids) and np.array_equal(other[1], offsets)
    # the job against HF's tokenizer (its NFC normalizer included) on a few documents
    _, hf = nfc_tok
    for k, d in enumerate(docs[:5]):
        assert ids[offsets[k] : offsets[k + 1]].tolist() == (
            hf.encode(d, add_special_tokens=False).ids if d else []
        )


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("pack_width", [0, 1024])
def test_the_device_normalizes_rows_that_fit(tok, tmp_path, engines, kind, pack_width):
    """Documents not in NFC whose NFC fits their row (a decomposed accent, the Angstrom sign,
    marks out of order, jamo): the encode calls normalize them, none goes back to the host,
    and the ids are the host path's."""
    docs = [CHANGED[(0, 1, 3, 4)[k % 4]] + f" {k}" for k in range(400)]
    path = write_jsonl(tmp_path / "fit.jsonl", docs)
    assert any(unicodedata16().normalize("NFC", d) != d for d in docs)
    assert_paths_agree(
        tok,
        [path],
        engines,
        jsonl_field=FIELD,
        window_bytes=4 << 10,
        pack_width=pack_width,
        device=device_of(kind),
    )
    assert engines[-1].normalized_on_host == 0 and engines[-2].normalized_on_host == 0
