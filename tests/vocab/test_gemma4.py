"""Gemma 4 (llama.cpp's ggml-vocab-gemma-4.gguf, model "gemma4": HF BPE with byte fallback, merges
over `▁`-escaped text) == its references: HF tokenizers on families.hf_bpe_from_gguf (the same
vocabulary, merges and added tokens), and llama.cpp's 46 test strings with the ids HF gave.

Gemma 4 ranks the long pieces of many characters' runs before their parts (`\\n`x30 + `\\n` is
merge 0), so HF grows a run from the left one merge at a time; the loader flags those ranks
(vocab.char_bpe.first_only_ranks) and every merge path merges only the first of adjacent candidates
at a flagged rank (ffi/core/bpe_core.h). CPU here; GPU at 256/512/1024 threads where one is
visible (`pytest -k gpu`).
"""

from __future__ import annotations

import codecs
import functools
import os
import random
import subprocess
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax.vocab.char_bpe import first_only_ranks

import families
from helpers import BACKENDS, CPU, FULL, MIXED, assert_same, corpus_texts, ours
from strategies import fuzz, raw_bytes, unicode_text

pytest.importorskip("tokenizers", reason="the reference library `tokenizers` is not installed")

SPACE = "\u2581"
# HF matches its added tokens in text (the control ones are special added tokens): ours when allowed.
HF_SPECIALS = "all"


@functools.lru_cache(maxsize=None)
def _load():
    path = families.require("gemma4-gguf")
    meta = families.gguf_metadata(path)
    return path, bb.Tokenizer.from_file(path), families.hf_bpe_from_gguf(meta), meta


@pytest.fixture(scope="module")
def gemma4():
    return _load()


def reference(hf):
    return lambda text: hf.encode(text, add_special_tokens=False).ids


def run_chars(tok) -> tuple[list[str], list[str]]:
    """(the characters some merge makes a run piece of, those whose merge (c, c) has a
    first-only rank), as the text spells them."""
    tb = tok.vocab.token_bytes
    text = {i: tb[i].decode("utf-8", "replace") for i in {m for _, m in tok.vocab.merges.values()}}
    runs = {t[0] for t in text.values() if len(t) > 1 and len(set(t)) == 1}
    flagged = {text[m][0] for (a, b), (rank, m) in tok.vocab.merges.items() if a == b and rank & 1}
    return sorted(runs), sorted(flagged & runs)


WHITESPACE = (" ", "\n", "\t", SPACE, " \n", "\n ", "\t ", " \t", "\r\n", "\u3000")
CONTEXTS = (("", ""), ("a", "b"), ("x = 1", "y"), ("<b>", "</b>"), (". ", "\n"))
EDGES = ["", " ", "  You", "a\u2581b", "\x01\x02", "\ufffd", "\U0001f600 \U0001f44d\U0001f3fd", "x" * 300]


@pytest.mark.parametrize("backend", BACKENDS)
def test_corpora(gemma4, data_dir, backend):
    """Every shared corpus cut into 1-8192-byte excerpts."""
    _, tok, hf, _ = gemma4
    texts = corpus_texts(data_dir, 12 if FULL else 4, seed=83) + MIXED + EDGES
    assert_same(tok, texts, reference(hf), backend, HF_SPECIALS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_whitespace_runs(gemma4, backend):
    """Runs of 1..300 spaces, newlines, tabs, `▁` and mixes, alone and between words (a run
    of newlines grows from the left: 31 + 31 + ... + the rest)."""
    _, tok, hf, _ = gemma4
    texts = [pre + ws * k + post for ws in WHITESPACE for k in range(1, 301) for pre, post in CONTEXTS]
    assert_same(tok, texts, reference(hf), backend, HF_SPECIALS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_long_runs(gemma4, backend):
    """Runs of thousands of one flagged character, alone and between words: the GPU's block
    passes walk them (a pass a merge would take thousands of passes)."""
    _, tok, hf, _ = gemma4
    texts = [
        pre + c * k + post
        for c in ("a", " ", "\n", "\t", "=", ".")
        for k in (999, 4096, 12_345)
        for pre, post in (("", ""), ("x", " y"))
    ]
    assert_same(tok, texts, reference(hf), backend, HF_SPECIALS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_runs_of_every_run_character(gemma4, backend):
    """Runs of 1..200 of every character some merge makes runs of (274 on Gemma 4: whitespace,
    punctuation, letters, digits of several scripts, emoji; 214 of them with a first-only
    (c, c) merge), alone and after a word."""
    _, tok, hf, _ = gemma4
    chars, flagged = run_chars(tok)
    assert {"\n", "\t", " ", "=", "*", "#", "_", "."} <= set(flagged)
    lengths = range(1, 201) if FULL else [*range(1, 70), *range(70, 201, 7)]
    texts = [pre + c * k for c in chars for k in lengths for pre in ("", "a ")]
    assert_same(tok, texts, reference(hf), backend, HF_SPECIALS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mixed_runs(gemma4, backend):
    """Runs of several flagged characters side by side (`--==--`, `\\n \\n`, `/**/`), with
    words between some, at lengths around the longest run pieces (31, 32, 63, 64, ...)."""
    _, tok, hf, _ = gemma4
    chars = run_chars(tok)[0]
    rng = random.Random(89)
    texts = []
    for _ in range(3000 if FULL else 600):
        alphabet = rng.sample(chars, rng.choice([2, 3, 5])) + rng.sample(["a", "b", " ", "\n", "0", "é"], 2)
        lengths = [1, 2, 3, 4, 7, 15, 16, 17, 30, 31, 32, 33, 63, 64, 65, rng.randint(1, 200)]
        texts.append("".join(rng.choice(alphabet) * rng.choice(lengths) for _ in range(rng.randint(1, 10))))
    assert_same(tok, texts, reference(hf), backend, HF_SPECIALS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_llama_cpp_cases(gemma4, backend):
    """llama.cpp's 46 test strings with the ids HF's Gemma 4 tokenizer gave them."""
    path, tok, _, _ = gemma4
    cases = families.llama_cpp_cases(path)
    assert len(cases) == 46
    assert ours(tok, [t for t, _ in cases], backend=backend, allowed_special=HF_SPECIALS) == [
        ids for _, ids in cases
    ]


@pytest.mark.parametrize("backend", BACKENDS)
def test_specials(gemma4, backend):
    """Control tokens (HF: special added tokens, always matched) when allowed; user-defined
    ones (`<|tool_call>`, ...) always."""
    _, tok, hf, meta = gemma4
    kinds = list(zip(meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"].tolist()))
    controls = [t for t, k in kinds if k == 3]
    user = [t for t, k in kinds if k == 4]
    texts = [f"{c} hi\n\n\n{u}  x" for c, u in zip(controls, user * 3)]
    texts += [f"{u}{u}\n{c}\t\t{c}" for u in user for c in controls[:3]] + ["".join(controls + user)]
    got = ours(tok, texts, backend=backend, allowed_special=HF_SPECIALS)
    assert got == [reference(hf)(t) for t in texts]


def _per_byte_replace(err):
    """Each byte that is not part of valid UTF-8 is one U+FFFD (the primitive's rule for raw bytes)."""
    return "\ufffd" * (err.end - err.start), err.end


codecs.register_error("bbpe_per_byte", _per_byte_replace)


def per_byte_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="bbpe_per_byte")


@pytest.mark.parametrize("backend", BACKENDS)
def test_invalid_utf8(gemma4, backend):
    _, tok, hf, _ = gemma4
    texts = [b"ab\xffcd", b"\xff\xfe", b"\xe2\x96", b"\xe2\x96 x", b" \xe2\x96\x81 ", b"\x80  \xff"]
    texts += [b"\n\n\xff\n\n\n", b"\xed\xa0\x80 \xc0\xaf --\xf5--", b" \xe4\xb8 \xe4\xb8\xad"]
    got = ours(tok, texts, backend=backend, allowed_special=HF_SPECIALS)
    assert got == [reference(hf)(per_byte_text(t)) for t in texts]


def test_ranks(gemma4):
    """The table's ranks are 2 * the GGUF's merge order + the first-only flag, which (\n, \n)
    and (▁, ▁) carry: merge 0 (`\n`x30 + `\n`) takes a newline before (\n, \n) may."""
    _, tok, _, meta = gemma4
    ids = {t: i for i, t in enumerate(meta["tokenizer.ggml.tokens"])}
    plain = {}
    for order, m in enumerate(meta["tokenizer.ggml.merges"]):
        left, right = m.split(" ", 1)
        plain[(ids[left], ids[right])] = (order, ids[left + right])
    flagged = first_only_ranks(plain)
    assert {(o, m) for o, m in plain.values()} == {(r >> 1, m) for r, m in tok.vocab.merges.values()}
    assert all(
        rank == 2 * plain[pair][0] + (plain[pair][0] in flagged)
        for pair, (rank, _) in tok.vocab.merges.items()
    )
    assert plain[(ids["\n"], ids["\n"])][0] in flagged and plain[(ids[SPACE], ids[SPACE])][0] in flagged
    assert tok.vocab.char_level.runs is None  # (no run rule: the first-only passes do it)


def test_decode(gemma4, data_dir):
    """Our ids (== HF's, above) decode to the text (`▁` is a space)."""
    _, tok, _, _ = gemma4
    texts = corpus_texts(data_dir, 2, seed=7) + MIXED + ["\n" * 70 + "-" * 40]
    ids, counts = tok.encode_batch(texts, device=CPU, allowed_special=HF_SPECIALS)
    assert tok.decode(ids, counts) == [t.replace(SPACE, " ") for t in texts]


# ---------------------------------------------------------------------------------------------
# Hypothesis

run_text = st.lists(
    st.tuples(
        st.sampled_from(
            [" ", "\n", "\t", SPACE, "-", "=", "/", "*", "#", "_", ".", "l", "0", "!", "a", "é", "日"]
        ),
        st.integers(1, 80),
    ).map(lambda ck: ck[0] * ck[1])
    | st.sampled_from(MIXED + EDGES + ["<|tool_call>", "<bos>", "hello", " world"]),
    max_size=12,
).map("".join)


@pytest.fixture(scope="module")
def fuzz_model():
    return _load()[1:3]


@fuzz(40)
@given(texts=st.lists(unicode_text | run_text, min_size=1, max_size=6))
def test_fuzz_text(fuzz_model, texts):
    tok, hf = fuzz_model
    assert_same(tok, texts, reference(hf), allowed_special=HF_SPECIALS)


@pytest.mark.parametrize("backend", BACKENDS[1:])
@fuzz(25)
@given(texts=st.lists(run_text | unicode_text, min_size=1, max_size=8))
def test_fuzz_device(fuzz_model, backend, texts):
    """The same texts on the GPU (lane, one-thread and block merges all see flagged ranks)."""
    tok, hf = fuzz_model
    assert_same(tok, texts, reference(hf), backend, HF_SPECIALS)


@fuzz(20)
@given(texts=st.lists(raw_bytes(), min_size=1, max_size=6))
def test_fuzz_bytes(fuzz_model, texts):
    tok, hf = fuzz_model
    assert ours(tok, texts, allowed_special=HF_SPECIALS) == [reference(hf)(per_byte_text(t)) for t in texts]


# ---------------------------------------------------------------------------------------------
# Random merge orders of one character's runs (tokenizer.json files written here): every
# order the loader accepts gives HF's ids, whether it flags ranks first-only or not.


def _random_runs_json(rng: random.Random, longest: int) -> dict:
    splits = [(a, b) for a in range(1, longest) for b in range(1, longest) if a + b <= longest]
    order = rng.sample(splits, rng.randint(3, len(splits)))
    made = {a + b for a, b in order} | {1}
    pieces = ["<unk>"] + [f"<0x{b:02X}>" for b in range(256)] + [SPACE, "b", "ab"]
    pieces += ["a" * k for k in sorted(made)]
    merges = [["a" * a, "a" * b] for a, b in order if a in made and b in made] + [["a", "b"]]
    return {
        "version": "1.0",
        "added_tokens": [],
        "normalizer": {"type": "Replace", "pattern": {"String": " "}, "content": SPACE},
        "model": {
            "type": "BPE",
            "unk_token": "<unk>",
            "fuse_unk": False,
            "byte_fallback": True,
            "vocab": {p: i for i, p in enumerate(pieces)},
            "merges": merges,
        },
    }


@pytest.mark.parametrize("backend", BACKENDS)
def test_random_run_orders(backend, tmp_path):
    import json

    from tokenizers import Tokenizer

    rng = random.Random(97)
    texts = ["a" * k for k in range(1, 130)] + ["ba" * 3 + "a" * k + " b" for k in range(1, 70, 3)]
    flagged = 0
    for n in range(24):
        path = tmp_path / f"runs{n}.json"
        path.write_text(json.dumps(_random_runs_json(rng, rng.choice([4, 6, 9, 12]))))
        tok = bb.Tokenizer.from_file(path)
        flagged += any(rank & 1 for rank, _ in tok.vocab.merges.values())
        assert_same(tok, texts, reference(Tokenizer.from_file(str(path))), backend)
    assert flagged > 5  # (the first-only passes were exercised)


# ---------------------------------------------------------------------------------------------
# The passes on long runs. The CPU merges a segment of over 32 symbols with its tree
# (merge_segment_tree), which never walks; the passes (merge_segment: the first-only walk and
# the runs' fast-forward, ffi/core/bpe_core.h) take it under the test hook BLOCKBPE_CPU_PASSES=1,
# read once a process: the run tests above again, in a child process with the hook.

PASSES_TESTS = (
    "long_runs or random_run_orders or whitespace_runs or runs_of_every_run_character or mixed_runs"
)


@pytest.mark.skipif(os.environ.get("BLOCKBPE_CPU_PASSES") == "1", reason="(the child process itself)")
def test_long_runs_by_passes():
    env = {**os.environ, "BLOCKBPE_CPU_PASSES": "1", "JAX_PLATFORMS": "cpu"}
    child = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:xdist",
            __file__,
            "-k",
            f"({PASSES_TESTS}) and cpu",
            "-rs",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert child.returncode == 0, child.stdout[-3000:] + child.stderr[-3000:]
    assert " passed" in child.stdout.splitlines()[-1], child.stdout[-2000:]
