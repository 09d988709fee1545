"""A Lowercase normalizer (alone, NFC then Lowercase) left to the encode calls, against the
host's normalizer: `Tokenizer.encode_batch` normalizes only the rows the executors report, and
the corpus job with the normalizer on the device (`device_normalizer`, corpus/engine.py) gives
the host path's ids and offsets with the device split on and off, packed and not, on cased text
in several scripts and on the code points whose lowercase the executors do not write in place
(U+0130, U+2126, ...: reported, normalized on the host). Lowercase then NFC stays on the host.
On the CPU backend the CPU executor lowercases as the kernels do (tests/families/
test_families_lowercase.py holds both to HF); the GPU variants run where JAX sees one."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.corpus import device_normalizer as normalizer_module
from blockbpe_jax.pretok import normalizer

import corpus_shared
from corpus_shared import DEVICES, FIELD, assert_paths_agree, device_of, outcome, utf8_cut, write_jsonl

# corpus_shared's fixtures, requested by name below
root, war_and_peace, engines = corpus_shared.root, corpus_shared.war_and_peace, corpus_shared.engines

NFC, LOWER = {"type": "NFC"}, {"type": "Lowercase"}
NORMALIZERS = {
    "lower": LOWER,
    "nfc_lower": {"type": "Sequence", "normalizers": [NFC, LOWER]},
    "lower_nfc": {"type": "Sequence", "normalizers": [LOWER, NFC]},
}
# Code points whose lowercase the executors do not write in place (its UTF-8 length changes,
# or it is not again its own lowercase): the rows that hold one are reported.
NOT_IN_PLACE = ["\u0130", "\u2126", "\u212a", "\u212b", "\u1e9e", "\u023a"]


def _pair(root, name):
    tokenizers = pytest.importorskip("tokenizers")
    path = root / "vocab" / "cl100k_hf" / "tokenizer.json"
    if not path.exists():
        pytest.skip(f"{path} not found")
    doc = json.loads(path.read_bytes())
    doc["normalizer"] = NORMALIZERS[name]
    hf = tokenizers.Tokenizer.from_str(json.dumps(doc))
    return bb.Tokenizer.from_hf(hf), hf


@pytest.fixture(scope="module", params=["lower", "nfc_lower"])
def lower_pair(request, root):
    """(ours, HF's): cl100k's tokenizer.json with a normalizer the executors apply."""
    return _pair(root, request.param)


def _reported(tok, text: str) -> bool:
    """Whether the executors report text: a code point not lowercased in place after NFC (with
    NFC first, which writes U+2126 as U+03A9, U+212A as K, U+212B as U+00C5)."""
    index = normalizer.lower_tables()[0]
    return any(index[ord(c)] == normalizer.LOWER_FLAG for c in (normalizer.nfc(text) if tok.nfc else text))


def cased_documents(war_and_peace: bytes, n: int = 400) -> list[str]:
    """War and Peace's lines, some upper-cased, with Greek, Cyrillic and the code points whose
    lowercase is not in place mixed in, and empty documents."""
    lines = [x for x in utf8_cut(war_and_peace, 150_000).decode().split("\n") if x.strip()][:n]
    docs = []
    for i, line in enumerate(lines):
        docs.append(line.upper() if i % 3 == 0 else line)
        if i % 7 == 2:
            docs.append(f"ΟΔΟΣ Σίσυφος ДОБРЫЙ день {i}")
        if i % 29 == 5:
            docs.append(f"{NOT_IN_PLACE[i % len(NOT_IN_PLACE)]}STANBUL {line[:40]}")
        if i % 31 == 4:
            docs.append("")
    return docs


def test_which_path_runs(root):
    """Lowercase and NFC then Lowercase on the device whatever the separator (it is a special,
    never lowercased); Lowercase then NFC on the host."""
    for name, on_device in (("lower", True), ("nfc_lower", True), ("lower_nfc", False)):
        tok, _ = _pair(root, name)
        assert tok._device_normalizes == on_device
        assert normalizer_module.device_normalizer_available(tok, b"<|endoftext|>") == on_device
        assert normalizer_module.device_normalizer_available(tok, b"") == on_device


def test_encode_batch_normalizes_reported_rows_only(lower_pair, war_and_peace, monkeypatch):
    """encode_batch sends the raw text: the host normalizer sees only the rows the executor
    reports, and every row has HF's ids."""
    tok, hf = lower_pair
    docs = [d for d in cased_documents(war_and_peace, 120) if d]
    seen = []
    normalize = type(tok)._normalize_around_specials

    def recording(self, texts, allowed_special):
        seen.extend(texts)
        return normalize(self, texts, allowed_special)

    monkeypatch.setattr(type(tok), "_normalize_around_specials", recording)
    out = tok.encode_batch(docs, device=device_of("cpu"))
    ids, counts = out.numpy()
    assert [ids[k, : counts[k]].tolist() for k in range(len(docs))] == [
        e.ids for e in hf.encode_batch(docs, add_special_tokens=False)
    ]
    assert seen == [d for d in docs if _reported(tok, d)] and seen


def test_tiktoken_view_falls_back_for_reported_rows(lower_pair):
    """The tiktoken view's host encoder (the CPU executor, which raises on a reported row)
    normalizes on the host where a text has a code point not lowercased in place."""
    tok, hf = lower_pair
    enc = tok.as_tiktoken()
    for text in ["HELLO World", "\u0130STANBUL and Ankara", "OHM \u2126 KELVIN \u212a"]:
        assert enc.encode_ordinary(text) == hf.encode(text, add_special_tokens=False).ids, text


@pytest.mark.parametrize("kind", DEVICES)
@pytest.mark.parametrize("pack_width", [0, 128, 1024])
def test_lowercase_on_the_device_equals_the_host(
    lower_pair, war_and_peace, tmp_path, engines, kind, pack_width
):
    """The device path gives the host path's ids and offsets; the documents with a code point
    not lowercased in place (and, packed, their calls' others) are normalized on the host."""
    tok, hf = lower_pair
    docs = cased_documents(war_and_peace)
    path = write_jsonl(tmp_path / "cased.jsonl", docs)
    options = dict(jsonl_field=FIELD, window_bytes=16 << 10, pack_width=pack_width, device=device_of(kind))
    ids, offsets = assert_paths_agree(tok, [path], engines, **options)
    assert len(offsets) - 1 == len(docs)
    reported = sum(_reported(tok, d) for d in docs)
    assert reported <= engines[-1].normalized_on_host <= (reported if pack_width == 0 else len(docs))
    for k in range(0, len(docs), 37):
        assert ids[offsets[k] : offsets[k + 1]].tolist() == hf.encode(docs[k], add_special_tokens=False).ids


def test_lowercase_then_nfc_stays_on_the_host(root, war_and_peace, tmp_path, engines):
    tok, hf = _pair(root, "lower_nfc")
    docs = cased_documents(war_and_peace, 60)
    ids, offsets = outcome(tok, [write_jsonl(tmp_path / "c.jsonl", docs)], None, jsonl_field=FIELD)
    assert engines[-1].host_normalizes and not engines[-1].device_normalizer
    for k, d in enumerate(docs):
        assert ids[offsets[k] : offsets[k + 1]].tolist() == hf.encode(d, add_special_tokens=False).ids


_cased = st.sampled_from(
    list("aAzZ iI '\n.9<|>")
    + list("ΣσςΟΔΆ ДдЖжЁё ԱաՒւ ႠⴀᲐ 𐐀𐐨 Ꭰꭰ ǅǄǆǲ ẞß ﬁ")
    + NOT_IN_PLACE
    + ["e\u0301", "\u0308"]
)


@settings(max_examples=20, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_generated_text(lower_pair, tmp_path_factory, engines, data):
    """Generated cased text: the device path, split on and off, packed or not, equals the host
    path, and HF's ids on the first documents."""
    tok, hf = lower_pair
    docs = [
        data.draw(st.lists(_cased, max_size=40).map("".join)) for _ in range(data.draw(st.integers(1, 40)))
    ]
    path = write_jsonl(tmp_path_factory.mktemp("g") / "g.jsonl", docs, data.draw(st.booleans()))
    pack_width = data.draw(st.sampled_from([0, 64, 1024]))
    ids, offsets = assert_paths_agree(
        tok, [path], engines, jsonl_field=FIELD, window_bytes=512, pack_width=pack_width
    )
    for k, d in enumerate(docs[:5]):
        assert ids[offsets[k] : offsets[k + 1]].tolist() == hf.encode(d, add_special_tokens=False).ids
