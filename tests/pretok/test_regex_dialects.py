"""The pre-tokenizer compiler reads a regex in the dialect of where it came from (issue 57, item
1): a tokenizer.json Split regex as Oniguruma (HF tokenizers), a tiktoken pattern as fancy-regex.
Differential tests against the real engines: tokenizers' Split pre-tokenizer, and tiktoken
itself (its pieces made visible by a vocabulary holding every substring of the text, so that
each piece is one token), on hypothesis-generated patterns of the supported grammar and
generated text. test_regex_dialects_device.py runs them through the kernels (CPU and GPU)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import pretok
from blockbpe_jax.pretok import compiler, regex_syntax as rs

from helpers import device_for
from strategies import n_examples, regex_for_dialect, regex_patterns, regex_text
from synthetic import BYTE_LEVEL, gpt2_doc, pre_tokenizer, split, write_json

tiktoken = pytest.importorskip("tiktoken")
tokenizers = pytest.importorskip("tokenizers")

FLAVOURS = ("tiktoken", "hf")
ANY = "(?s:.)"  # appended to a tiktoken pattern so that no text falls between its pieces


# ---------------------------------------------------------------------------------------------
# The engines' pieces (start offsets in code points)


def hf_starts(pattern: str, text: str) -> list[int]:
    """Piece starts of HF Split(Regex(pattern), Isolated), as tokenizers computes them."""
    from tokenizers import Regex, pre_tokenizers

    pieces = pre_tokenizers.Split(Regex(pattern), "isolated").pre_tokenize_str(text)
    return [s for _, (s, e) in pieces if e > s]


def substring_ranks(texts) -> dict[bytes, int]:
    """The 256 bytes, then every substring of the texts' UTF-8 of 2 bytes or more."""
    ranks = {bytes([b]): b for b in range(256)}
    for text in texts:
        data = text.encode("utf-8")
        for i in range(len(data)):
            for j in range(i + 2, len(data) + 1):
                ranks.setdefault(data[i:j], len(ranks))
    return ranks


def tiktoken_starts(pattern: str, texts: list[str]) -> list[list[int]]:
    """Piece starts of tiktoken with `pattern` | any character: every piece is a token of the
    substring vocabulary, so the tokens are the pieces."""
    ranks = substring_ranks(texts)
    enc = tiktoken.Encoding(
        "dialect_probe", pat_str=f"(?:{pattern})|{ANY}", mergeable_ranks=ranks, special_tokens={}
    )
    out = []
    for text in texts:
        starts, pos = [], 0
        for token in enc.decode_tokens_bytes(enc.encode_ordinary(text)):
            starts.append(pos)
            pos += len(token)
        out.append(byte_to_char_starts(text, starts))
    return out


def byte_to_char_starts(text: str, byte_starts: list[int]) -> list[int]:
    offsets = np.cumsum([0] + [len(c.encode("utf-8")) for c in text])
    index = {int(b): k for k, b in enumerate(offsets)}
    return [index[b] for b in byte_starts]


def engine_accepts(pattern: str, flavour: str) -> bool:
    try:
        if flavour == "hf":
            tokenizers.Regex(pattern)
        else:
            tiktoken.Encoding("probe", pat_str=pattern, mergeable_ranks={bytes([0]): 0}, special_tokens={})
    except Exception:
        return False
    return True


# ---------------------------------------------------------------------------------------------
# Ours


def our_pattern(pattern: str, flavour: str) -> str:
    return f"(?:{pattern})|{ANY}" if flavour == "tiktoken" else pattern


@functools.lru_cache(maxsize=256)
def compiled(pattern: str, flavour: str):
    """Our automata (None when the compiler refuses the pattern)."""
    try:
        return compiler.compile_pattern(our_pattern(pattern, flavour), flavour=flavour)
    except pretok.PretokenizerUnsupported:
        return None


def our_starts(automata, text: str) -> list[int]:
    return sorted(compiler.run_automata(automata, text, []))


def engine_starts(pattern: str, flavour: str, texts: list[str]) -> list[list[int]]:
    if flavour == "hf":
        return [hf_starts(pattern, t) for t in texts]
    return tiktoken_starts(pattern, texts)


def check_pattern(template: str, flavour: str, texts: list[str]) -> bool:
    """Ours equals the engine's pieces on every text; False if we refuse the pattern (an engine
    that rejects it must not see it compiled)."""
    pattern = regex_for_dialect(template, flavour)
    automata = compiled(pattern, flavour)
    if automata is None:
        return False
    assert engine_accepts(pattern, flavour), f"we compile {pattern!r} ({flavour}), the engine rejects it"
    for text, want in zip(texts, engine_starts(pattern, flavour, texts)):
        got = our_starts(automata, text)
        assert got == want, f"{flavour} {pattern!r} on {text!r}: ours {got}, engine {want}"
    return True


# ---------------------------------------------------------------------------------------------
# The reproducer: a Split with `{m,n}+` in a tokenizer.json


DIGITS_SPLIT = r"\p{N}{1,3}+|\D+"


def test_interval_plus_is_a_greedy_repeat_in_oniguruma():
    """`\\p{N}{1,3}+` is `(?:\\p{N}{1,3})+` in a Split (HF), possessive in tiktoken."""
    hf = our_starts(compiler.compile_pattern(DIGITS_SPLIT, flavour="hf"), "3119 12345")
    assert hf == hf_starts(DIGITS_SPLIT, "3119 12345") == [0, 4, 5]
    tk = compiler.compile_pattern(our_pattern(DIGITS_SPLIT, "tiktoken"), flavour="tiktoken")
    assert our_starts(tk, "3119 12345") == tiktoken_starts(DIGITS_SPLIT, ["3119 12345"])[0] == [0, 3, 4, 5, 8]


@pytest.fixture(scope="module")
def gpt2_split_files(data_dir, tmp_path_factory):
    """GPT-2's tokenizer.json with pre_tokenizer Sequence[Split(regex, Isolated), ByteLevel]
    for the digits reproducer and for cl100k's pattern: {name: path}."""
    doc = gpt2_doc(data_dir)
    out = {}
    for name, regex in (("digits", DIGITS_SPLIT), ("cl100k", bb.vocab.KNOWN_PATTERNS["cl100k"])):
        d = dict(doc, pre_tokenizer=pre_tokenizer([split(regex), BYTE_LEVEL]))
        out[name] = write_json(tmp_path_factory.mktemp("split") / f"{name}.json", d)
    return out


def hf_ids(path, texts):
    tok = tokenizers.Tokenizer.from_file(str(path))
    return [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]


def split_texts() -> list[str]:
    """Digit runs of every length, with the whitespace and punctuation cl100k's pattern treats
    specially (325 strings, seeded)."""
    rng = np.random.default_rng(57)
    units = ["1", "12", "123", "3119", "00", "9", " ", "  ", "\n", "x", "ab", "'s", "!", "\u0663", " \n "]
    return ["3119"] + ["".join(rng.choice(units, rng.integers(1, 8))) for _ in range(324)]


@pytest.mark.parametrize("name", ["digits", "cl100k"])
def test_split_interval_plus_matches_hf(gpt2_split_files, name):
    path = gpt2_split_files[name]
    tok = bb.Tokenizer.from_file(path)
    texts = split_texts()
    want = hf_ids(path, texts)
    if name == "digits":
        assert len(want[0]) == 2  # "31", "19"
    ids, counts = tok.encode_batch(texts, device=device_for("cpu"), max_tokens=64)
    got = [np.asarray(ids)[i, : int(counts[i])].tolist() for i in range(len(texts))]
    bad = [t for t, g, w in zip(texts, got, want) if g != w]
    assert not bad, f"{len(bad)} of {len(texts)} differ from HF, e.g. {bad[:3]}"


def test_hf_pattern_not_named_by_tiktoken_reading(gpt2_split_files):
    """cl100k's pattern in a Split is read as Oniguruma there, so it is not "cl100k"."""
    assert bb.Tokenizer.from_file(gpt2_split_files["cl100k"]).vocab.pattern_name is None


# ---------------------------------------------------------------------------------------------
# The audit: each construct whose meaning differs, honoured in both dialects or refused by name

HONOURED = [
    r"\d{2}+",  # hf: (?:\d{2})+; fancy: possessive
    r"x{2}?y",  # hf: (?:x{2})?y; fancy: lazy {2} = {2}
    r"\d{,2}x",  # {0,2} in both
    r"a\Z|.",  # hf: before a final \n; fancy: before trailing \n's
    r"a$|.",  # hf: before any \n; fancy: the end of the text
    r"\s+$|\S+|\s",
    r"(?i)\p{Lu}|\p{L}+|\s+",  # (?i) does not fold a property outside brackets in Oniguruma
    r"(?i)\P{Lu}+|.",
    r"(?i)[^\p{Lu}\s]+|.",  # Oniguruma folds the class as a whole, fancy-regex each item
    r"(?i)[\P{L}k]+|.",
    r"(?i)[^[^a]]|.",
    r"(?i)[a-c&&[^B]]+|.",
    r"[^[^\sa]&&\s]|[\p{L}&&[^a-z]]+|.",
    r"(?i:k)+|.",  # K, U+212A
    r"(?i:\x{3c3})+|.",  # σ ς Σ
    r"(?i:\x{1c89})|.",  # Unicode 16 case pair
    r"\h+|\H",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\s+|.",
    r"\x{212a}\u00e9\x41+|.",
    r"\p{^L}+|.",
    r"[\p{Han}\p{Hiragana}]+|\p{Latin}+|.",
]

REFUSED = {
    "tiktoken": [
        r"[[:alpha:]]",
        r"[a-z--c]",
        r"[a~~c]",
        r"a**",
        r"a{2}{3}",
        r"\0",
        r"\w",
        r"\cA",
        r"(?>ab|a)b",
        r"\p{L&}",
        r"(?m)a$",
        r"(?!\s++x).",  # a possessive inside a lookahead
        r"(?:a|(?=a))?.",  # a quantified group with an assertion-only alternative
        r"(?:a?|\s)*.",  # a repeat of something nullable: empty iterations end differently
    ],
    "hf": [
        r"[[:alpha:]]",
        r"[a-z--c]",
        r"a**",
        r"a+*",
        r"a{1,3}+?",
        r"a{2}??",
        r"\pL",
        r"\p{gc=L}",
        r"\p{IsL}",
        r"\p{Script=Latin}",
        r"(?i)ss",
        r"(?i)(?:s)s",
        r"(?i)ß",
        r"(?i)[ßa]",
        r"(?i)st",
        r"(?s).",
        r"(?P<n>a)",
        r"\xe9",
        r"\u{41}",
        r"\U00000041",
        r"\q",
        r"\w",
        r"(?:a|(?=a))?.",  # Oniguruma: "target of repeat operator is invalid"
        r"(?:a|$)*.",
        r"(?:a?(?=\s)|\s)*.",
        r"\d{0,2}+",  # (?:\d{0,2})+
        r"[^[^\s]&&[^\S]]",  # Oniguruma leaves out the non-ASCII code points
    ],
}


@pytest.mark.parametrize("flavour", FLAVOURS)
@pytest.mark.parametrize("pattern", HONOURED)
def test_dialect_constructs_honoured(flavour, pattern):
    texts = [
        "3119 12345",
        "xxxxxy xxy",
        "a\na\n",
        "a\n\n\na",
        "ab  \n\n  ",
        "aAkK\u212a1 Σσς\u1c89\u1c8a",
        "fAfAff 0f",
        "I'm 'S 'LL don't",
        "\u212a\u00e9AAA",
        "中文ひらがなabc",
        "abcABC ]^",
    ]
    assert check_pattern(pattern, flavour, texts), f"{pattern!r} ({flavour}) was refused"


@pytest.mark.parametrize(
    "flavour, pattern", [(f, p) for f in FLAVOURS for p in REFUSED[f]], ids=lambda x: str(x)
)
def test_dialect_constructs_refused_by_name(flavour, pattern):
    with pytest.raises(pretok.PretokenizerUnsupported) as info:
        compiler.compile_pattern(pattern, flavour=flavour)
    message = str(info.value)
    assert any(w in message for w in ("not supported", "Oniguruma", "fancy-regex")), message


def test_known_patterns_read_alike_where_no_construct_differs():
    known = bb.vocab.KNOWN_PATTERNS
    assert rs.same_in_both_dialects(known["o200k"]) and rs.same_in_both_dialects(known["llama3"])
    assert not rs.same_in_both_dialects(known["cl100k"])  # {1,3}+ and $
    assert not rs.same_in_both_dialects(known["r50k"])  # $


# ---------------------------------------------------------------------------------------------
# Differential fuzzing against the engines

_FUZZ = settings(
    max_examples=n_examples(100),
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("flavour", FLAVOURS)
@_FUZZ
@given(template=regex_patterns(), texts=st.lists(regex_text, min_size=1, max_size=8))
def test_fuzz_dialect_against_engine(flavour, template, texts):
    """0 differences between our compiled pattern and the engine of its dialect (the pattern,
    and it followed by any character: most patterns that can match the empty string, which
    the compiler refuses, are then not)."""
    checked = [check_pattern(t, flavour, texts) for t in (template, f"(?:{template})(?D:.)")]
    assume(any(checked))
