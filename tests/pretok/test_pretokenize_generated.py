"""Exactness of the pre-tokenizer (ffi/pretok/) on generated text: seeded random
fragments, hypothesis text, special tokens cutting the text (tests/pretok_shim.py has the shim
and the oracles). BLOCKBPE_FULL=1 runs more examples (slow).
"""

from __future__ import annotations

import random

import pytest

from helpers import FULL
from pretok_shim import (
    FRAGMENTS,
    PATTERN_IDS,
    SPECIAL,
    check_hf_pieces,
    check_text,
    check_tiktoken_ids,
    gen_text,
    hf_for,
    tiktoken_enc,
)


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_random_fragments(shim, data_dir, pattern):
    """Many short strings from FRAGMENTS (seeded; BLOCKBPE_FULL=1 runs 10x more)."""
    rng = random.Random(pattern)
    enc = tiktoken_enc(pattern)
    hf = hf_for(pattern)
    for k in range(5000 if FULL else 500):
        text = gen_text(rng)
        flags = check_text(shim, pattern, text)
        if k % 4 == 0:
            check_tiktoken_ids(enc, text, flags)
            if SPECIAL not in text:
                for tok in hf:
                    check_hf_pieces(tok, text, flags)


try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover
    given = None

if given is not None:
    _text = st.lists(st.sampled_from(FRAGMENTS), min_size=0, max_size=60).map("".join) | st.text(
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40
    )

    @pytest.mark.parametrize("pattern", PATTERN_IDS)
    @settings(
        max_examples=1500 if FULL else 150,
        deadline=None,
        derandomize=not FULL,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(text=_text)
    def test_hypothesis_text(shim, data_dir, pattern, text):
        flags = check_text(shim, pattern, text)
        check_tiktoken_ids(tiktoken_enc(pattern), text, flags)


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_specials_cut_subtexts(shim, data_dir, pattern):
    rng = random.Random(7 + pattern)
    enc = tiktoken_enc(pattern)
    for _ in range(200):
        parts = [gen_text(rng, 12) for _ in range(rng.randint(1, 4))]
        text = SPECIAL.join(p.replace(SPECIAL, "") for p in parts)
        flags = check_text(shim, pattern, text)
        check_tiktoken_ids(enc, text, flags)
