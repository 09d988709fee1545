"""Bad vocabularies: exact mode on a vocabulary whose pre-tokenizer we do not implement, and
malformed vocabulary files (bb.VocabError naming the file and line, or JSON path). Each case
raises a clear error of the right type whose message names the problem. CPU only.
"""

from __future__ import annotations

import gzip
import re

import jax
import numpy as np
import pytest

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax.vocab import VocabError

from helpers import CPU
from synthetic import b64, tiktoken_lines, tokenizer_json_doc, write_json


# ---------------------------------------------------------------------------------------------
# Exact mode on a vocabulary whose pre-tokenizer we do not implement
# ---------------------------------------------------------------------------------------------


UNSUPPORTED_PRE_TOKENIZERS = {
    "metaspace": (
        {
            "pre_tokenizer": {
                "type": "Metaspace",
                "replacement": "\u2581",
                "prepend_scheme": "always",
                "split": True,
            }
        },
        "pre_tokenizer: pre-tokenizer type 'Metaspace' is not supported",
    ),
    "nfkc": ({"normalizer": {"type": "NFKC"}}, "normalizer NFKC is not supported"),
    "unknown_regex": (
        {
            "pre_tokenizer": {
                "type": "Sequence",
                "pretokenizers": [
                    {
                        "type": "Split",
                        "pattern": {"Regex": r"\w+|\s+|[^\w\s]+"},
                        "behavior": "Isolated",
                        "invert": False,
                    },
                    {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False},
                ],
            }
        },
        r"pre_tokenizer.pretokenizers\[0\].pattern: escape \\w is not supported",
    ),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED_PRE_TOKENIZERS))
def test_exact_mode_on_unsupported_pre_tokenizer(tmp_path, case):
    overrides, message = UNSUPPORTED_PRE_TOKENIZERS[case]
    path = write_json(tmp_path / "tokenizer.json", tokenizer_json_doc(**overrides))
    tok = bb.Tokenizer.from_file(path)  # loads: bytes mode is still available
    data, lengths = bb.pack_strings(["abc abc"], max_len=16)
    with pytest.raises(
        ValueError,
        match=rf"exact mode is not supported for {tmp_path.name}: .*{message}.*"
        r"Use mode='bytes'",
    ):
        bb.encode(data, lengths, tok, max_tokens=8)
    with pytest.raises(ValueError, match=message):
        tok.encode_batch(["abc"], device=CPU)
    with pytest.raises(ValueError, match=message):  # also when the tables are passed to jit
        jax.jit(lambda d, l, t: bb.encode(d, l, t, max_tokens=8))(data, lengths, tok.tables(device=CPU))
    out = bb.encode(data, lengths, tok, max_tokens=8, mode="bytes")
    assert np.asarray(out.ids)[0, :3].tolist() == [257, 32, 257]  # "abc" " " "abc"


def test_exact_mode_on_tiktoken_file_without_known_pattern(tmp_path, data_dir):
    """A rank file tiktoken does not publish (r50k's with a blank line more: other bytes) has no
    pattern: exact mode says so, bytes mode works."""
    path = tmp_path / "mine.tiktoken"
    path.write_bytes((data_dir / "vocab" / "tiktoken" / "r50k_base.tiktoken").read_bytes() + b"\n")
    tok = bb.Tokenizer.from_file(path)
    data, lengths = bb.pack_strings(["hello world"], max_len=16)
    with pytest.raises(
        ValueError, match=r"exact mode is not supported for mine: it has no pre-tokenizer pattern"
    ):
        bb.encode(data, lengths, tok, max_tokens=8)
    # With a pattern of its own it runs exactly (the pattern is compiled, not recognised).
    custom = bb.Tokenizer.from_file(path, pattern=r"\S+|\s+")
    enc = testing.tiktoken_oracle("r50k", custom, r"\S+|\s+")
    out = bb.encode(data, lengths, custom, max_tokens=8)
    assert np.asarray(out.ids)[0, : int(out.counts[0])].tolist() == enc.encode_ordinary("hello world")
    bad = bb.Tokenizer.from_file(path, pattern=r"(?<=x)y|\S+|\s+")
    with pytest.raises(ValueError, match=r"exact mode is not supported for mine: pattern: lookbehind"):
        bb.encode(data, lengths, bad, max_tokens=8)
    assert np.asarray(bb.encode(data, lengths, tok, max_tokens=8, mode="bytes").counts).tolist() == [2]


def test_exact_mode_on_tiktoken_encoding_with_bytes_pattern(data_dir):
    pytest.importorskip("tiktoken")
    import tiktoken.load

    ranks = tiktoken.load.load_tiktoken_bpe(str(data_dir / "vocab" / "tiktoken" / "r50k_base.tiktoken"))
    enc = tiktoken.Encoding(
        "r50k_bytes", pat_str=testing.BYTES_MODE_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )
    tok = bb.Tokenizer.from_tiktoken(enc)
    data, lengths = bb.pack_strings(["hello world"], max_len=16)
    # (?s:.+) compiles to one piece per sub-text: exact mode is bytes mode.
    exact = bb.encode(data, lengths, tok, max_tokens=8)
    out = bb.encode(data, lengths, tok, max_tokens=8, mode="bytes")
    assert np.asarray(out.ids)[0, :2].tolist() == enc.encode_ordinary("hello world")
    assert np.asarray(exact.ids).tolist() == np.asarray(out.ids).tolist()


def test_constructors_take_their_objects():
    """A name, path or other object where a tiktoken.Encoding, a tokenizers.Tokenizer or a
    SentencePieceProcessor belongs: a TypeError naming what came (and, for a name or path, the
    constructor that takes one), not an AttributeError from inside."""
    with pytest.raises(TypeError, match=r"expected a tiktoken.Encoding, got str \(for an encoding's name, "):
        bb.Tokenizer.from_tiktoken("cl100k_base")
    with pytest.raises(TypeError, match=r"expected a tiktoken.Encoding, got dict$"):
        bb.Tokenizer.from_tiktoken({"name": "x"})
    with pytest.raises(
        TypeError, match=r"expected a tokenizers.Tokenizer, got str \(for a tokenizer.json file, "
    ):
        bb.Tokenizer.from_hf("tokenizer.json")
    with pytest.raises(TypeError, match=r"expected a tokenizers.Tokenizer, got NoneType$"):
        bb.Tokenizer.from_hf(None)
    with pytest.raises(
        TypeError, match=r"expected a .model path or a sentencepiece.SentencePieceProcessor, got int"
    ):
        bb.Tokenizer.from_sentencepiece(123)


# ---------------------------------------------------------------------------------------------
# Malformed vocabulary files: bb.VocabError naming the file and line (or JSON path)
# ---------------------------------------------------------------------------------------------


def at(path, rest: str) -> str:
    """A regex for an error message that starts with `path` (escaped) then `rest`."""
    return "^" + re.escape(str(path)) + rest


def _small_tiktoken_text() -> str:
    lines = tiktoken_lines()[:-1] + [f"{b64(b'hello world')} 258"]
    return "\n".join(lines) + "\n"


def test_truncated_tiktoken_file_every_cut_of_last_line(tmp_path):
    """A file cut anywhere inside its last line (a partial download) names that line: the cut
    leaves a line without a rank, a partial base64 token, or a shorter rank that is already
    taken. (A cut exactly at a line end leaves a valid, shorter file.)"""
    text = _small_tiktoken_text().encode()
    last_start = text.rstrip(b"\n").rfind(b"\n") + 1
    last_line_no = text[:last_start].count(b"\n") + 1
    path = tmp_path / "cut.tiktoken"
    for cut in range(last_start + 1, len(text) - 1):
        path.write_bytes(text[:cut])
        with pytest.raises(VocabError, match=at(path, rf":{last_line_no}: ")) as info:
            bb.Tokenizer.from_file(path)
        message = str(info.value)
        assert any(
            m in message for m in ("expected '<base64 token> <rank>'", "not valid base64", "duplicate rank")
        ), (cut, message)


def test_truncated_real_vocab(tmp_path, data_dir):
    raw = (data_dir / "vocab" / "tiktoken" / "r50k_base.tiktoken").read_bytes()
    cut = raw.rfind(b"\n", 0, len(raw) // 2) + 7  # 6 bytes into some line in the middle
    line_no = raw[:cut].count(b"\n") + 1
    path = tmp_path / "r50k_base.tiktoken"
    path.write_bytes(raw[:cut])
    with pytest.raises(VocabError, match=at(path, rf":{line_no}: ")):
        bb.Tokenizer.from_file(path)


def test_binary_file_as_vocab(tmp_path, data_dir):
    """A gzipped (binary) file passed as a rank file: line 1 is not '<base64> <rank>'."""
    path = tmp_path / "gz.tiktoken"
    path.write_bytes(gzip.compress(_small_tiktoken_text().encode()))
    with pytest.raises(VocabError, match=at(path, ":1: ")):
        bb.Tokenizer.from_file(path)
    path = tmp_path / "tokenizer.json"
    path.write_bytes(b"\x1f\x8b\x08\x00\xff\xfe")
    with pytest.raises(VocabError, match=at(path, ": not valid JSON")):
        bb.Tokenizer.from_file(path)


@pytest.mark.parametrize("name", ["missing.tiktoken", "tokenizer.json", "a_directory"])
def test_unreadable_vocab_file(tmp_path, name):
    path = tmp_path / name
    if name == "a_directory":
        path.mkdir()
    with pytest.raises(VocabError, match=at(path, ": cannot read")):
        bb.Tokenizer.from_file(path)


def test_non_dense_ranks_load_and_encode_like_tiktoken(tmp_path):
    """Holes in the ranks are fine: they load and encode exactly like tiktoken."""
    tiktoken = pytest.importorskip("tiktoken")
    ranks = {bytes([b]): 3 * b + 1 for b in range(256)}  # every rank a hole apart
    ranks |= {b"ab": 1000, b"abc": 1200, b"bc": 900, b" a": 5000, b"hello": 7000}
    path = tmp_path / "holes.tiktoken"
    path.write_text("".join(f"{b64(t)} {r}\n" for t, r in ranks.items()))
    pattern = r"\S+|\s+"
    tok = bb.Tokenizer.from_file(path, special_tokens={"<|s|>": 9000})
    enc = tiktoken.Encoding("holes", pat_str=pattern, mergeable_ranks=ranks, special_tokens={"<|s|>": 9000})
    texts = ["abc bc ab", "hello abcabc", "<|s|>abc<|s|>", "", "x" * 40]
    ids, counts = tok.encode_batch(texts, mode="bytes", allowed_special="all", device=CPU)
    bytes_enc = tiktoken.Encoding(
        "holes_bytes",
        pat_str=testing.BYTES_MODE_PATTERN,
        mergeable_ranks=ranks,
        special_tokens={"<|s|>": 9000},
    )
    for k, text in enumerate(texts):
        assert np.asarray(ids)[k, : int(counts[k])].tolist() == bytes_enc.encode(text, allowed_special="all")
    assert tok.decode(ids, counts) == texts
    assert enc.n_vocab == tok.vocab.n_vocab == 9001


@pytest.mark.parametrize(
    "model, message",
    [
        ({"type": "Unigram", "vocab": [["a", 0.0]]}, "model.type: model type 'Unigram' is not supported"),
        (
            {"type": "WordLevel", "vocab": {"a": 0}, "unk_token": "a"},
            "model.type: model type 'WordLevel' is not supported",
        ),
        ({"vocab": {"a": 0}}, "model.type: model type None is not supported"),
    ],
)
def test_unsupported_model_types(tmp_path, model, message):
    path = write_json(tmp_path / "tokenizer.json", tokenizer_json_doc(model=model))
    with pytest.raises(VocabError, match=at(path, rf": {message}")):
        bb.Tokenizer.from_file(path)


def test_tokenizer_json_non_integer_id(tmp_path):
    doc = tokenizer_json_doc()
    doc["model"]["vocab"]["xyz"] = "300"
    path = write_json(tmp_path / "tokenizer.json", doc)
    with pytest.raises(VocabError, match=at(path, r": model.vocab\['xyz'\]: id '300' is not an integer")):
        bb.Tokenizer.from_file(path)


def test_tokenizer_json_merge_as_string_with_three_parts(tmp_path):
    doc = tokenizer_json_doc()
    doc["model"]["merges"] = doc["model"]["merges"] + ["a b c"]
    path = write_json(tmp_path / "tokenizer.json", doc)
    with pytest.raises(VocabError, match=at(path, r": model.merges\[3\]: expected two tokens")):
        bb.Tokenizer.from_file(path)
