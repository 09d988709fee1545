"""Memory stays bounded whatever sets of allowed specials a caller passes (issue P13, item 3).

The tiktoken view splits a text at its allowed specials (tiktoken's way) and encodes the
segments with the one host encoder of no specials, so a new set costs no encoder and no
tables; `Tokenizer.tables` keeps what depends on the set (its special tables, small) for the
last `TableSets.MAX_SETS` sets, and the vocabulary's arrays once per device. Measured on Llama
3 (256 specials): 10,000 distinct sets, ids equal to tiktoken's, the process's RSS flat.
"""

from __future__ import annotations

import random

import jax
import blockbpe_jax as bb
import psutil
import pytest
from hypothesis import given
from hypothesis import strategies as st

from blockbpe_jax import testing
from blockbpe_jax.tables.sets import TableSets

from helpers import load_tokenizer, tiktoken_enc
from strategies import fuzz

pytestmark = pytest.mark.usefixtures("data_dir")

RSS_GROWTH_MIB = 24  # allowed growth over 10,000 sets (before the fix: ~1.5 MiB per set)


def _rss_mib() -> float:
    return psutil.Process().memory_info().rss / 2**20


def _cases(names, count, seed=0):
    """(text, allowed set) pairs: texts holding a few specials, allowed or not."""
    rng = random.Random(seed)
    words = ["hello", " world", " 123", "\n\n", " 日本語", "x", "  "]
    for _ in range(count):
        allowed = set(rng.sample(names, rng.randint(1, 40)))
        parts = []
        for _ in range(rng.randint(1, 6)):
            parts.append(rng.choice(words))
            parts.append(rng.choice(sorted(allowed)) if rng.random() < 0.5 else rng.choice(names))
        yield "".join(parts), allowed


def test_ten_thousand_special_sets_keep_rss_flat():
    pytest.importorskip("tiktoken")
    tok = load_tokenizer("llama3", "tiktoken")
    enc = tok.as_tiktoken()
    names = sorted(tok.vocab.special_tokens)
    assert len(names) == 256
    for text, allowed in _cases(names, 200, seed=1):  # warm: the encoder, the matcher, allocators
        enc.encode(text, allowed_special=allowed, disallowed_special=())
    cases = list(_cases(names, 10_000))
    before = _rss_mib()
    got = []
    for k, (text, allowed) in enumerate(cases):
        # (every fifth through a fresh view, `tok.as_tiktoken().encode(...)`: no dearer)
        e = tok.as_tiktoken() if k % 5 == 0 else enc
        got.append(e.encode(text, allowed_special=allowed, disallowed_special=()))
    growth = _rss_mib() - before
    assert growth < RSS_GROWTH_MIB, f"RSS grew {growth:.0f} MiB over 10,000 special sets"
    assert len(tok._sets._encoders) <= TableSets.MAX_HOST_ENCODERS
    ref = tiktoken_enc("llama3", "exact")
    bad = [
        t for (t, s), ids in zip(cases, got) if ids != ref.encode(t, allowed_special=s, disallowed_special=())
    ]
    assert not bad, f"{len(bad)} texts differ from tiktoken, e.g. {bad[0]!r}"


def test_disallowed_checks_keep_rss_flat():
    """The default disallowed_special="all" is a different set for every allowed set (tiktoken's
    own check compiles and caches a regex per set, 40 ms each here): the check here needs none.
    The outcome (ids, or the ValueError) against tiktoken's for the first 200 cases, against
    the ids tiktoken gives with the check off and a plain search for the others."""
    pytest.importorskip("tiktoken")
    tok = load_tokenizer("llama3", "tiktoken")
    ref = tiktoken_enc("llama3", "exact")
    enc = tok.as_tiktoken()
    names = sorted(tok.vocab.special_tokens)

    def outcome(e, text, allowed):
        try:
            return e.encode(text, allowed_special=allowed)
        except ValueError as err:
            return str(err).splitlines()[0]

    cases = list(_cases(names, 3_000, seed=2))
    for text, allowed in cases[:200]:
        assert outcome(enc, text, allowed) == outcome(ref, text, allowed), text
    before = _rss_mib()
    got = [outcome(enc, text, allowed) for text, allowed in cases]
    assert _rss_mib() - before < RSS_GROWTH_MIB
    for (text, allowed), ours in zip(cases, got):
        if any(n in text for n in names if n not in allowed):
            assert isinstance(ours, str) and ours.startswith("Encountered text corresponding"), text
        else:
            assert ours == ref.encode(text, allowed_special=allowed, disallowed_special=()), text


def test_tables_cache_is_bounded_and_shares_the_vocabulary():
    tok = load_tokenizer("llama3", "tiktoken")
    names = sorted(tok.vocab.special_tokens)
    rng = random.Random(3)
    cpu = jax.devices("cpu")[0]
    first = tok.tables(names[:3], cpu)
    for _ in range(2_000):
        sample = rng.sample(names, rng.randint(1, 64))
        host = tok.tables(sample, host=True)
        dev = tok.tables(sample, cpu)
        assert host.pair_table is tok.host_tables()[0]  # the host arrays, never copied
        assert dev.pair_table is first.pair_table  # the vocabulary on the device once
        assert sorted(host.specials) == sorted(sample)
    sets = tok._sets
    assert len(sets._tables) <= TableSets.MAX_SETS and sets._tables.nbytes <= TableSets.MAX_SET_BYTES
    assert len(sets._specials) <= TableSets.MAX_SETS


def test_sentencepiece_view_keeps_a_few_encoders():
    """Where a text does not split at its specials (SentencePiece's dummy prefix, specials
    always matched, a normalizer), the view keeps a host encoder per set of the specials found
    in the texts, the last few only: ids equal to `Tokenizer.encode_batch`'s."""
    import families

    tok = bb.Tokenizer.from_file(families.require("mistral-v3-spm"))
    enc = tok.as_tiktoken()
    assert not enc._split
    names = sorted(n for n in tok.vocab.special_tokens if n.startswith("[") or n in ("</s>", "<s>"))
    rng = random.Random(4)
    texts, sets = [], []
    for _ in range(40):
        allowed = set(rng.sample(names, 3))
        texts.append(f"Hello {sorted(allowed)[0]} world {rng.choice(names)} end")
        sets.append(allowed)
    for text, allowed in zip(texts, sets):
        got = enc.encode(text, allowed_special=allowed, disallowed_special=())
        ids, counts = tok.encode_batch([text], allowed_special=allowed, device=jax.devices("cpu")[0])
        assert got == list(map(int, ids[0, : int(counts[0])])), text
    assert len(tok._sets._encoders) <= TableSets.MAX_HOST_ENCODERS


def _primitive_ids(tok, texts, allowed):
    ids, counts = tok.encode_batch(texts, allowed_special=allowed or "none", device=jax.devices("cpu")[0])
    return [list(map(int, ids[k, : int(counts[k])])) for k in range(len(texts))]


@pytest.mark.parametrize("name,fmt", [("llama3", "json"), ("cl100k", "tiktoken")])
@fuzz(30)
@given(data=st.data())
def test_split_at_specials_equals_the_primitive(name, fmt, data):
    """The view's split at the allowed specials gives the ids of the primitive matching them."""
    tok = load_tokenizer(name, fmt)
    names = sorted(tok.vocab.special_tokens)
    allowed = set(data.draw(st.lists(st.sampled_from(names), max_size=6)))
    texts = data.draw(st.lists(testing.mixed_text(names[:12] + sorted(allowed)), min_size=1, max_size=4))
    got = tok.as_tiktoken().encode_batch(texts, allowed_special=allowed, disallowed_special=())
    assert got == _primitive_ids(tok, texts, sorted(allowed))


def test_specials_that_are_prefixes_of_others():
    """At one position the longest allowed special wins, shorter ones being its prefixes (the
    primitive's special tables are sorted longest first)."""
    tiktoken = pytest.importorskip("tiktoken")
    from helpers import pair

    _, r50k = pair("r50k")
    specials = {"<|a|>": 50257, "<|a|>x": 50258, "<|a|>xy": 50259, "|>x<": 50260}
    tok = bb.Tokenizer.from_tiktoken(
        tiktoken.Encoding(
            name="prefixes",
            pat_str=r50k._pat_str,
            mergeable_ranks=r50k._mergeable_ranks,
            special_tokens=specials,
        )
    )
    texts = ["<|a|>xyz", "q<|a|>x<|a|>", "<|a|><|a|>xy", "<|a|>x<y", "|>x<|a|>"]
    for k in range(1 << len(specials)):
        allowed = {s for j, s in enumerate(sorted(specials)) if k >> j & 1}
        got = tok.as_tiktoken().encode_batch(texts, allowed_special=allowed, disallowed_special=())
        assert got == _primitive_ids(tok, texts, sorted(allowed)), allowed


def test_package_caches_keyed_by_user_input_are_bounded():
    """The encode call per (max_tokens, pad_id, ...) and the disallowed-strings regexes keep
    the last few only (the table caches: above)."""
    from blockbpe_jax.ops import primitive as ops
    from blockbpe_jax.tables import specials as special_sets

    assert ops._encode_call.cache_info().maxsize is not None
    assert special_sets._LITERALS.max_entries < 1000 and special_sets._LITERALS.max_bytes <= 1 << 24
    enc = load_tokenizer("cl100k", "tiktoken").as_tiktoken()
    for k in range(300):  # strings that are not specials, a new set each time
        with pytest.raises(ValueError, match="disallowed special token 'w"):
            enc.encode(f"hello w{k}", disallowed_special={f"w{k}", f"zz{k}"})
    assert len(special_sets._LITERALS) <= special_sets._LITERALS.max_entries
