"""The piece table of a vocabulary without the whole-piece rule (HF tokenizers' BPE, no
`ignore_merges`) holds exactly its self-encoding tokens, those whose bytes the merges turn into
that one token (blockbpe_jax/tables/build.py, `whole_piece_ids`); with the rule, every token.

Against a plain-Python BPE on generated small vocabularies (merges in training order, tokens no
merge makes, several merges making one token), against HF tokenizers' own BPE on every token
of the shared tokenizer.json vocabularies (Llama 3's without `ignore_merges` too: 588 of its
tokens are not self-encoding), and the disk cache's key, which must tell the two rules apart.
The encoders' ids with these tables: tests/families/test_families_piece_table.py.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from blockbpe_jax import native
from blockbpe_jax.tables.build import build_vocab_tables, whole_piece_ids
from blockbpe_jax.tables.probe import lookup_piece
from blockbpe_jax.tables.cache import vocab_key
from blockbpe_jax.vocab import bytes_to_unicode, load_tiktoken_file
from blockbpe_jax.vocab.hf_json import vocab_from_tokenizer_json

from helpers import VOCAB_CASES, probing_with_reference_hash
from strategies import fuzz
from synthetic import BYTE_LEVEL_REGEX, bpe_json_doc


def _python_bpe(ranks: dict[tuple[bytes, bytes], int], piece: bytes) -> list[bytes]:
    """HF's BPE in plain Python: merge the lowest-ranked adjacent pair (leftmost on ties) until
    no adjacent pair is a merge."""
    parts = [bytes([b]) for b in piece]
    while True:
        found = [(ranks[pair], i) for i, pair in enumerate(zip(parts, parts[1:])) if pair in ranks]
        if not found:
            return parts
        _, i = min(found)
        parts[i : i + 2] = [parts[i] + parts[i + 1]]


def _small_doc(merges: list[tuple[bytes, bytes]], extra_tokens: list[bytes], ignore_merges=False) -> dict:
    """A byte-level tokenizer.json: the 256 bytes, each merge's result, then the extra tokens (no
    merge makes them), ids in that order."""
    u = bytes_to_unicode()
    spell = lambda b: "".join(u[x] for x in b)  # noqa: E731
    vocab: dict[str, int] = {u[b]: b for b in range(256)}
    for token in [a + b for a, b in merges] + extra_tokens:
        vocab.setdefault(spell(token), len(vocab))
    return bpe_json_doc(
        vocab, [f"{spell(a)} {spell(b)}" for a, b in merges], BYTE_LEVEL_REGEX, ignore_merges=ignore_merges
    )


def _piece_table_ids(tables) -> set[int]:
    return set(tables.piece_table[tables.piece_table[:, 4] >= 0, 4].tolist())  # (the token_id column)


@st.composite
def trained_merges(draw) -> tuple[list[tuple[bytes, bytes]], list[bytes]]:
    """(merges, extra tokens) as BPE training lists them: each merge joins two tokens that exist
    before it (single bytes of a small alphabet or earlier results), a pair at most once; two
    merges may make the same token. Extra tokens are byte strings no merge makes."""
    alphabet = [bytes([b]) for b in b"abc "]
    tokens, merges, seen = list(alphabet), [], set()
    for _ in range(draw(st.integers(0, 24))):
        pair = (draw(st.sampled_from(tokens)), draw(st.sampled_from(tokens)))
        if pair in seen or len(pair[0] + pair[1]) > 12:
            continue
        seen.add(pair)
        merges.append(pair)
        if pair[0] + pair[1] not in tokens:
            tokens.append(pair[0] + pair[1])
    extra = draw(st.lists(st.binary(min_size=2, max_size=5).map(lambda b: bytes(b"abc "[x % 4] for x in b))))
    return merges, [t for t in extra if t not in tokens]


# "abc" is made by ("ab", "c"), but its bytes merge ("b", "c") first and stop at [a, bc].
@example(([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")], [b"ca"]))
@given(trained_merges())
@fuzz(200)
def test_self_encoding_set_equals_python_bpe(merges_and_extra):
    merges, extra = merges_and_extra
    doc = _small_doc(merges, extra)
    v = vocab_from_tokenizer_json(doc, "small.json")
    ranks = {pair: rank for rank, pair in enumerate(merges)}
    expected = {i for i in v.mergeable_ids if _python_bpe(ranks, v.token_bytes[i]) == [v.token_bytes[i]]}
    t = build_vocab_tables(v)
    assert _piece_table_ids(t) == expected
    assert t.max_piece_len == max(len(v.token_bytes[i]) for i in expected)
    with probing_with_reference_hash():  # (a piece_hash call is ~0.1 ms: most of this test's time)
        for i in v.mergeable_ids:  # the probe the executors make agrees
            assert lookup_piece(t, v.token_bytes[i]) == (i if i in expected else None)
    # With the whole-piece rule the same vocabulary's table holds every token.
    shortcut = build_vocab_tables(vocab_from_tokenizer_json(_small_doc(merges, extra, True), "small.json"))
    assert _piece_table_ids(shortcut) == set(v.mergeable_ids)


def test_constructed_vocab_has_tokens_that_are_not_self_encoding():
    """The example above, spelled out: the table leaves out "abc" (258) and "ca" (259)."""
    v = vocab_from_tokenizer_json(
        _small_doc([(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")], [b"ca"]), "small.json"
    )
    assert [v.token_bytes[i] for i in (256, 257, 258, 259)] == [b"bc", b"ab", b"abc", b"ca"]
    t = build_vocab_tables(v)
    assert _piece_table_ids(t) == set(range(258))
    assert lookup_piece(t, b"abc") is None and lookup_piece(t, b"bc") == 256


def _hf_self_encoding(hf, v) -> set[int]:
    """The mergeable tokens that HF tokenizers' BPE model turns into themselves."""
    u = bytes_to_unicode()
    out = set()
    for i in v.mergeable_ids:
        data = v.token_bytes[i]
        if len(data) <= 255 and [t.id for t in hf.model.tokenize("".join(u[b] for b in data))] == [i]:
            out.add(i)
    return out


@pytest.mark.parametrize(
    "name", ["gpt2_hf", "cl100k_hf", "o200k_hf", "llama3_hf", "llama3_hf_no_ignore_merges"]
)
def test_piece_table_is_hf_self_encoding_set(data_dir, name):
    """Every shared tokenizer.json vocabulary: the table holds the tokens HF's BPE model gives
    back as themselves (all of them under `ignore_merges`, Llama 3's file)."""
    tokenizers = pytest.importorskip("tokenizers")
    path = data_dir / "vocab" / VOCAB_CASES[name.removesuffix("_no_ignore_merges")][0]
    if not path.is_file():
        pytest.skip(f"vocabulary file absent from the shared data: {path}")
    doc = json.loads(path.read_bytes())
    if name.endswith("_no_ignore_merges"):
        assert doc["model"]["ignore_merges"] is True
        doc["model"]["ignore_merges"] = False
    v = vocab_from_tokenizer_json(doc, path)
    hf = tokenizers.Tokenizer.from_str(json.dumps(doc))
    in_table = _piece_table_ids(build_vocab_tables(v))
    if v.whole_piece_shortcut:
        assert in_table == {i for i in v.mergeable_ids if len(v.token_bytes[i]) <= 255}
        hf.model.ignore_merges = False  # (what the merges alone give: 588 tokens differ)
        assert len(in_table - _hf_self_encoding(hf, v)) == 588
    else:
        assert in_table == _hf_self_encoding(hf, v)
    if name == "llama3_hf_no_ignore_merges":
        assert len(set(v.mergeable_ids) - in_table) == 588


def test_self_encoding_refuses_bad_tables(data_dir):
    """The native call checks what it reads: ids outside the vocabulary, a pair table whose
    rows are no power of two, byte ids of the wrong size."""
    v = vocab_from_tokenizer_json(_small_doc([(b"a", b"b")], []), "small.json")
    t = build_vocab_tables(v)
    args = dict(
        pair_table=t.pair_table,
        byte_ids=t.byte_ids,
        token_offsets=t.token_offsets,
        token_data=t.token_data,
        ids=np.arange(257, dtype=np.int32),
        rank_is_id=t.rank_is_id,
    )
    assert native.cpu.self_encoding(**args).tolist() == [1] * 257
    with pytest.raises(ValueError, match="id 257 is outside the vocabulary"):
        native.cpu.self_encoding(**dict(args, ids=np.array([0, 257], dtype=np.int32)))
    with pytest.raises(ValueError, match="pair_table must be"):
        native.cpu.self_encoding(**dict(args, pair_table=t.pair_table[:3]))
    with pytest.raises(ValueError, match="byte_ids must be"):
        native.cpu.self_encoding(**dict(args, byte_ids=t.byte_ids[:255]))


def test_cache_key_tells_the_rules_apart():
    """Same tokens and merges, with and without `ignore_merges`: different tables, so different
    disk-cache keys."""
    merges, extra = [(b"b", b"c"), (b"a", b"b"), (b"ab", b"c")], []
    plain = vocab_from_tokenizer_json(_small_doc(merges, extra), "small.json")
    rule = vocab_from_tokenizer_json(_small_doc(merges, extra, True), "small.json")
    assert vocab_key(plain) != vocab_key(rule)
    assert vocab_key(plain) == vocab_key(dataclasses.replace(rule, whole_piece_shortcut=False))
    assert lookup_piece(build_vocab_tables(plain), b"abc") is None
    assert lookup_piece(build_vocab_tables(rule), b"abc") == 258


def test_whole_piece_ids_under_the_rule_skip_the_merges(data_dir):
    """A tiktoken vocabulary's table is every token of up to 255 bytes, without a native call."""
    path = data_dir / "vocab" / VOCAB_CASES["r50k"][0]
    if not path.is_file():
        pytest.skip(f"vocabulary file absent from the shared data: {path}")
    v = load_tiktoken_file(path)
    t = build_vocab_tables(v)
    ids = whole_piece_ids(v, t.token_offsets, t.token_data, t.pair_table)
    assert ids.tolist() == [i for i in v.mergeable_ids if len(v.token_bytes[i]) <= 255]
