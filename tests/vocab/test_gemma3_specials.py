"""Gemma 3's user-defined pieces, which the encode matches as special tokens (its runs of 1..31
newlines and tabs and 2..31 `▁`, counted by ffi/core/special_tokens.h's run table; its HTML tags,
scanned), == sentencepiece: runs of every length 1..70 of each whitespace and their mixtures,
real corpora with their whitespace stretched into runs, hypothesis text of runs, and a Gemma 3
with more user-defined pieces that overlap (a piece starting inside another, a longer piece
sharing a prefix with a shorter one, slots of runs and pieces mixed). CPU here; GPU at
256/512/1024 threads where one is visible. File: tests/families.py ("gemma3-gguf"); reference:
sentencepiece on the same pieces (families.spm_from_gguf, no dummy prefix), as tests/vocab/test_gguf.py.
"""

from __future__ import annotations

import functools
import random
import re

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing

import families
from helpers import BACKENDS, assert_same, corpus_texts
from strategies import fuzz
from synthetic import gguf_bytes

spm = pytest.importorskip("sentencepiece", reason="the reference library `sentencepiece` is not installed")

SPACE = "\u2581"
WHITESPACE = [" ", "\t", "\n", SPACE, " " + SPACE, SPACE + " ", "\r\n", "\n\t", " \n", "\t "]
# Pieces made user-defined in the overlap model (`~~` is a NORMAL piece of Gemma 3, the others
# are new): `~` a slot of runs of 2 and 5; `@#@` / `#@#@#` and `<b><` / `b><b` / Gemma's `<b>`
# pieces that start inside one another; `\t\n\t` and `\n\n<b>` put non-runs in the tab and
# newline slots (which are then scanned).
OVERLAP_PIECES = ["~~", "~~~~~", "@#@", "#@#@#", "<b><", "b><b", "\t\n\t", "\n\n<b>"]


def _reference(meta: dict) -> spm.SentencePieceProcessor:
    return spm.SentencePieceProcessor(model_proto=families.spm_from_gguf(meta, add_dummy_prefix=False))


@functools.lru_cache(maxsize=None)
def _gemma3():
    meta = families.gguf_metadata(families.require("gemma3-gguf"))
    return bb.Tokenizer.from_file(families.require("gemma3-gguf")), _reference(meta), meta


@pytest.fixture(scope="module")
def gemma3():
    return _gemma3()[:2]


@pytest.fixture(scope="module")
def overlap_model(tmp_path_factory):
    """Gemma 3's header with OVERLAP_PIECES user-defined (a GGUF written here), and its reference."""
    _, _, meta = _gemma3()
    meta = {k: v for k, v in meta.items() if k.startswith("tokenizer.") or k == "general.architecture"}
    tokens = list(meta["tokenizer.ggml.tokens"])
    scores, types = list(meta["tokenizer.ggml.scores"]), list(meta["tokenizer.ggml.token_type"])
    index = {t: i for i, t in enumerate(tokens)}
    for piece in OVERLAP_PIECES:
        if piece in index:
            types[index[piece]] = 4  # USER_DEFINED
        else:
            tokens.append(piece), scores.append(0.0), types.append(4)
    meta["tokenizer.ggml.tokens"] = tokens
    meta["tokenizer.ggml.scores"] = np.asarray(scores, "<f4")
    meta["tokenizer.ggml.token_type"] = np.asarray(types, "<i4")
    path = tmp_path_factory.mktemp("gemma3_overlap") / "gemma3_overlap.gguf"
    path.write_bytes(gguf_bytes(meta))
    return bb.Tokenizer.from_file(path), _reference(meta)


def runs_of_every_length(units, lengths=range(1, 71)) -> list[str]:
    return [
        pre + unit * k + post
        for unit in units
        for k in lengths
        for pre, post in (("", ""), ("a", "b"), ("<b>", "</b>"), ("x ", "\n"))
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_whitespace_runs_of_every_length(gemma3, backend):
    """Runs of 1..70 of each whitespace and mixture (past the 31 of the longest piece: a run is
    cut into pieces leftmost-first), alone and between words and tags."""
    tok, sp = gemma3
    assert_same(tok, runs_of_every_length(WHITESPACE), sp.encode, backend)


def stretched(text: str, rng: random.Random) -> str:
    """text with each stretch of whitespace made a run of 1..40 of the same characters."""
    return re.sub(r"\s+", lambda m: m.group(0)[0] * rng.randint(1, 40) + m.group(0)[1:], text)


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora_with_runs(gemma3, data_dir, backend):
    """The shared corpora as they are, with their indentation in tabs, and with every stretch of
    whitespace a run of 1..40 (newlines between paragraphs, spaces between words)."""
    tok, sp = gemma3
    rng = random.Random(11)
    texts = corpus_texts(data_dir, 4, seed=17)
    texts += [re.sub(r"(?m)^( {4})+", lambda m: "\t" * (len(m.group(0)) // 4), t) for t in texts]
    texts += [stretched(t, rng) for t in texts]
    assert_same(tok, texts, sp.encode, backend)


run_text = st.lists(
    st.tuples(
        st.sampled_from(WHITESPACE + ["a", "word", "<b>", "</b>", "\u201c", "é", "日本"]), st.integers(1, 70)
    ).map(lambda u: u[0] * u[1]),
    max_size=12,
).map("".join)


@fuzz(60)
@given(texts=st.lists(run_text, min_size=1, max_size=6))
def test_fuzz_runs(gemma3, texts):
    tok, sp = gemma3
    assert_same(tok, texts, sp.encode)


@pytest.mark.parametrize("backend", BACKENDS[1:])
@fuzz(20)
@given(texts=st.lists(run_text, min_size=1, max_size=8))
def test_fuzz_runs_device(gemma3, backend, texts):
    """The same texts on the GPU (the block's run table, and its clusters walked in parallel)."""
    tok, sp = gemma3
    assert_same(tok, texts, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_overlapping_pieces(overlap_model, backend):
    """Pieces that start inside one another, chains of them, a slot of runs of 2 and 5, and
    the newline and tab slots scanned because a non-run shares them."""
    tok, sp = overlap_model
    texts = [
        "@#@#@#@#@#@",
        "#@#@#@#@#",
        "x@#@#@#@#@#y",
        "<b><b><b><b>",
        "<b><b>x</b>",
        "~~~~~~~~~~~~~",
        "a~b~~c~~~d~~~~e~~~~~f",
        "\t\n\t\n\t\t\n\t",
        "\n\n<b>\n\n\n<b><",
        "\n\n\n\n<b>",
    ]
    texts += runs_of_every_length(["\n", "\t", "~", " ", "@#", "<b>"], range(1, 40))
    assert_same(tok, texts, sp.encode, backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_overlapping_pieces_in_corpora(overlap_model, data_dir, backend):
    """The same model on corpus text with the pieces sown in (every few words one of them, or a
    run of `~`), whitespace stretched into runs."""
    tok, sp = overlap_model
    rng = random.Random(23)
    texts = []
    for path in testing.corpus_paths(data_dir):
        raw = testing.read_corpus(path)
        for t in testing.excerpts(raw, 2048, 4096, seed=29)[:2]:
            words = stretched(t.decode("utf-8", errors="ignore"), rng).split(" ")
            for _ in range(len(words) // 6):
                words.insert(
                    rng.randrange(len(words) + 1), rng.choice(OVERLAP_PIECES + ["~" * rng.randint(1, 12)])
                )
            texts.append(" ".join(words))
    assert_same(tok, texts, sp.encode, backend)
