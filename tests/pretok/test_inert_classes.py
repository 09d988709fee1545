"""A stage's inert classes (pretok/automata.py's inert_classes; ffi/pretok/tables.h): a text
whose code points are all of those classes gets no piece start from the stage but its first,
wherever earlier stages cut it, so the piece kernel skips the stage in a block of such bytes.
Checked against the automata's sequential run (run_automata) and HF's own Split, on DeepSeek's
digit and CJK splits and on generated regexes; and that stages which cut prose get none."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from blockbpe_jax import pretok
from blockbpe_jax.pretok import automata, compiler, tables
from blockbpe_jax.vocab.patterns import KNOWN_PATTERNS

from strategies import n_examples, regex_for_dialect, regex_patterns

DIGITS, CJK = r"\p{N}{1,3}", r"[一-龥぀-ゟ゠-ヿ]+"  # DeepSeek-V3's first two splits


def inert_code_points(a, mask: int) -> np.ndarray:
    """The code points (no surrogates) whose class is in the mask's classes."""
    classes = [c for c in range(2, a.n_classes) if (mask >> c) & 1]
    cps = np.flatnonzero(np.isin(a.class_of_cp, classes))
    return cps[(cps < 0xD800) | (cps > 0xDFFF)]


def random_texts(cps: np.ndarray, seed: int, count: int = 40):
    """(text, boundaries) pairs over `cps`: ASCII-heavy, lengths 1..60, earlier stages' cuts."""
    rng = np.random.default_rng(seed)
    ascii_cps = cps[cps < 128]
    out = []
    for _ in range(count):
        n = int(rng.integers(1, 61))
        pool = ascii_cps if ascii_cps.size and rng.random() < 0.7 else cps
        text = "".join(chr(int(c)) for c in rng.choice(pool, n))
        cuts = frozenset(int(i) for i in rng.integers(1, n + 1, int(rng.integers(0, 4))) if i < n)
        out.append((text, cuts))
    return out


def hf_piece_count(pattern: str, text: str) -> int:
    from tokenizers import Regex, pre_tokenizers

    return len(pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text))


@pytest.mark.parametrize("pattern, cut_by", [(DIGITS, "0123456789٣²"), (CJK, "中文ひらカタ")])
def test_deepseek_splits_leave_prose_alone(pattern, cut_by):
    a = compiler.compile_pattern(pattern, flavour="hf")
    mask = automata.inert_classes(a)
    for ch in " a.Z\n,'é—\u2019":
        assert (mask >> int(a.class_of_cp[ord(ch)])) & 1, ch
    for ch in cut_by:
        assert not (mask >> int(a.class_of_cp[ord(ch)])) & 1, ch
    cps = inert_code_points(a, mask)
    for text, cuts in random_texts(cps, seed=len(pattern)):
        assert compiler.run_automata(a, text, boundaries=cuts) == sorted(cuts | {0}), (text, cuts)
        assert hf_piece_count(pattern, text) == 1, text


@pytest.mark.parametrize("name", ["cl100k", "llama3"])
def test_stages_that_cut_prose_have_none(name):
    a = compiler.compile_pattern(f"(?:{KNOWN_PATTERNS[name]})|(?s:.)", flavour="tiktoken")
    assert automata.inert_classes(a) == 0


def test_the_mask_is_in_the_operand():
    stages = [compiler.compile_pattern(p, flavour="hf") for p in (DIGITS, CJK, r"\s+|\S+")]
    records = tables.pack(stages)[: len(stages) * tables.PRETOK_TABLES_DTYPE.itemsize]
    masks = records.view(tables.PRETOK_TABLES_DTYPE)["inert"].tolist()
    assert masks == [automata.inert_classes(a) for a in stages]
    assert masks[0] and masks[1] and masks[2] == 0


@settings(max_examples=n_examples(25), deadline=None, suppress_health_check=list(HealthCheck))
@given(template=regex_patterns(), seed=st.integers(0, 2**31 - 1))
def test_generated_regexes_inert_texts_are_one_piece(template, seed):
    pattern = regex_for_dialect(template, "hf")
    try:
        a = compiler.compile_pattern(pattern, flavour="hf")
    except pretok.PretokenizerUnsupported:
        assume(False)
    mask = automata.inert_classes(a)
    assume(mask)
    for text, cuts in random_texts(inert_code_points(a, mask), seed):
        assert compiler.run_automata(a, text, boundaries=cuts) == sorted(cuts | {0}), (pattern, text, cuts)
