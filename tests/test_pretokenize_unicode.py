"""The Unicode data the pre-tokenizer compiler derives its classes from, against tiktoken's own
regex engine (Rust regex, Unicode 16) and the generator script."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from pretok_shim import REPO


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
    try:
        import unicodedata2
    except ImportError:
        pytest.skip("unicodedata2 not installed (pip install unicodedata2==16.0.0)")
    if unicodedata2.unidata_version != "16.0.0":
        pytest.skip(f"unicodedata2 is Unicode {unicodedata2.unidata_version}, need 16.0.0")
    r = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_unicode_data.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stdout + r.stderr
