"""The Unicode data the pre-tokenizer compiler derives its classes from, against tiktoken's own
regex engine (Rust regex, Unicode 16) and the generator script."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from helpers import REPO, unicodedata16


# ---------------------------------------------------------------------------------------------
# The Unicode data the compiler derives classes from


@pytest.mark.parametrize(
    "prop",
    [
        "Lu",
        "Ll",
        "Lt",
        "Lm",
        "Lo",
        "M",
        "N",
        "Nd",
        "P",
        "S",
        "Z",
        "L",
        "Han",
        "Hiragana",
        "Katakana",
        "Hangul",
        "Latin",
        "Cyrillic",
    ],
)
def test_unicode_properties_match_tiktoken(prop):
    """Every code point of \\p{prop} (and \\s) equals what tiktoken's own regex engine (Rust
    regex, Unicode 16) says."""
    import tiktoken
    from blockbpe_jax.pretok import unicode as uni

    cps = np.flatnonzero(uni.SCALAR_VALUES)
    big = "".join(map(chr, cps))
    ranks = {bytes([i]): i for i in range(256)}
    for pat, mask in [(rf"\p{{{prop}}}", uni.property_set(prop).mask), (r"\s", uni.white_space().mask)]:
        enc = tiktoken.Encoding(f"probe_{prop}", pat_str=pat, mergeable_ranks=ranks, special_tokens={})
        got = np.array(sorted(map(ord, bytes(enc.encode_ordinary(big)).decode("utf-8"))))
        want = np.flatnonzero(mask)
        assert np.array_equal(got, want), f"{pat}: {np.setxor1d(got, want)[:20]}"


def test_unicode_data_up_to_date():
    unicodedata16()
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_unicode_data.py"), "--check"],
        capture_output=True,
        text=True,
    )
    if r.returncode == 3:  # (the script's EXIT_WRONG_VERSION)
        pytest.skip(f"gen_unicode_data.py --check needs its pinned versions: {r.stderr.strip()}")
    assert r.returncode == 0, r.stdout + r.stderr


def test_class_blocks_share_identical_blocks_in_byte_order():
    """The two-stage class table (pretok/tables.py class_blocks): every code point's class is
    blocks[stage1[cp >> 8], cp & 255], each distinct 256-code-point block once, in ascending
    byte order (np.unique's over the rows), for real pattern classes and random ones."""
    from blockbpe_jax.pretok import compile_pattern, tables
    from blockbpe_jax.vocab import KNOWN_PATTERNS

    rng = np.random.default_rng(5)
    cases = [compile_pattern(p).class_of_cp for p in KNOWN_PATTERNS.values()]
    coarse = rng.integers(0, 4, tables.STAGE1_LEN).astype(np.uint8)
    cases += [np.repeat(coarse, 256), rng.integers(0, 3, tables.STAGE1_LEN * 256).astype(np.uint8)]
    for class_of_cp in cases:
        stage1, blocks = tables.class_blocks(class_of_cp)
        cp = np.arange(class_of_cp.size)
        assert np.array_equal(blocks[stage1[cp >> 8], cp & 255], class_of_cp.astype(np.uint8))
        want_blocks, want_stage1 = np.unique(
            class_of_cp.astype(np.uint8).reshape(-1, 256), axis=0, return_inverse=True
        )
        assert np.array_equal(blocks, want_blocks) and np.array_equal(stage1, want_stage1.reshape(-1))
        assert stage1.dtype == np.uint16 and blocks.dtype == np.uint8
