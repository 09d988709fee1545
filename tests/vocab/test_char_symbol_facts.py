"""The word-bound rule restated on per-symbol facts (ffi/core/char_symbols.h:
`symbol_facts`, `word_starts_between_facts`), which the SentencePiece piece kernel uses for a
chunk's runs of ASCII bytes, equals the rule itself (`word_starts_between`) on each
SentencePiece-style family's tables: every pair of ASCII symbols, and every id of the vocabulary
before an ASCII symbol (where a run begins after a step of the kernel's full walk). CPU only:
tests/cpp/char_symbol_facts.cc, built here, reads the tables as the kernel does."""

from __future__ import annotations

import subprocess

import numpy as np
import pytest

import blockbpe_jax as bb

import families
from helpers import compile_cpp

CHAR_LEVEL = ["mistral-v1-spm", "mistral-v7-spm", "llama2-gguf", "gemma3-gguf", "gemma4-gguf"]


@pytest.fixture(scope="module")
def checker(tmp_path_factory):
    out = tmp_path_factory.mktemp("facts") / "char_symbol_facts"
    built = compile_cpp("char_symbol_facts.cc", out, "-O2")
    assert built.returncode == 0, built.stderr
    return out


@pytest.mark.parametrize("key", CHAR_LEVEL)
def test_facts_rule_equals_word_starts_between(key, checker, tmp_path):
    tok = bb.Tokenizer.from_file(families.require(key))
    assert tok.vocab.char_level is not None, f"{key} is not a SentencePiece-style vocabulary"
    tables = tok.tables("none", host=True)
    chars, byte_ids = tmp_path / "char_table", tmp_path / "byte_ids"
    np.asarray(tables.char_table, np.int32).tofile(chars)
    np.asarray(tables.byte_ids, np.int32).tofile(byte_ids)
    n_ids = tok.n_vocab
    run = subprocess.run(
        [str(checker), str(chars), str(byte_ids), str(n_ids)], capture_output=True, text=True
    )
    assert run.returncode == 0, run.stdout + run.stderr
    pairs, starts = (int(x) for x in run.stdout.split()[1:4:2])
    assert pairs == 128 * 128 + n_ids * 2 * 128
    assert 0 < starts < pairs  # (the rule is exercised both ways)
