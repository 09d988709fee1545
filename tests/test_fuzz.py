"""Differential fuzzing of the CPU encode path against tiktoken and HF tokenizers (issue P5).

Every vocabulary (r50k, cl100k, o200k, Llama 3) is fuzzed twice: loaded from its `.tiktoken`
file (oracle: tiktoken with the real pattern) and from its `tokenizer.json` (oracle: HF
`tokenizers` with the file's own pipeline). Each hypothesis example is checked on its own, so a
failure shrinks to a minimal string. Inputs:

* random Unicode (every category except surrogates, Cs), and mixed fragments;
* long runs of whitespace (every Unicode White_Space character and some near misses), digits
  (ASCII, other Nd, No, Nl) and apostrophes (thousands of them, contraction chains);
* strings made only of special tokens, with all / none / a subset of the specials allowed;
* batches holding empty strings (counts 0, rows all pad_id, other rows unaffected);
* strings of exactly L bytes (garbage after each row's length must be ignored) and of L+1
  bytes (pack_strings / encode / encode_batch must raise);
* max_tokens smaller than the result (ids are the prefix, counts the full count);
* invalid UTF-8 in exact mode. Policy (ffi/pretokenize.h): each byte not covered by a valid
  shortest-form UTF-8 sequence is one code point of an ordinary symbol class; BPE runs on the
  raw bytes. Oracle: tiktoken's own regex (or HF's pre-tokenizer) splits the text in which each
  such byte is replaced by a private-use character; the pieces are mapped back to raw byte
  ranges and each is BPE-encoded by the oracle (tiktoken `_encode_single_piece`, HF
  `model.tokenize`). tiktoken exposes no splitter, so its pieces are read off an Encoding whose
  vocabulary is every substring of the text: each regex piece is then one whole-piece token;
* invalid UTF-8 in bytes mode, against tiktoken with pattern `(?s:.+)` (and HF BPE for the
  tokenizer.json vocabularies) on the raw bytes between special tokens.

Bounded for CI (about 2 minutes on 2 cores). `BLOCKBPE_FUZZ_EXAMPLES=N` runs N examples per
hypothesis test instead of the defaults below (a long run); `pytest --hypothesis-show-statistics`
reports the examples tried.
"""

from __future__ import annotations

import functools
import os

import jax
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax.vocab import bytes_to_unicode

from helpers import FORMATS, load_tokenizer, vocab_path

NAMES = list(testing.VOCAB_FILES)
CPU = jax.devices("cpu")[0]
VOCABS = [pytest.param(n, f, id=f"{n}-{f}") for n in NAMES for f in FORMATS]


def n_examples(default: int) -> int:
    """Examples per hypothesis test: the default, or BLOCKBPE_FUZZ_EXAMPLES for a long run."""
    value = os.environ.get("BLOCKBPE_FUZZ_EXAMPLES")
    return int(value) if value else default


def fuzz(default: int):
    return settings(max_examples=n_examples(default), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.large_base_example,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True)
def _needs_data(data_dir):
    """Every test here needs the shared vocabularies (the fixture skips when absent)."""


# ---------------------------------------------------------------------------------------------
# Oracles
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def tiktoken_enc(name: str, mode: str):
    """tiktoken over the vocabulary's ranks and specials: the real pattern, or (?s:.+)."""
    tok = load_tokenizer(name, "tiktoken")
    pattern = tok.vocab.pattern if mode == "exact" else testing.BYTES_MODE_PATTERN
    return testing.tiktoken_oracle(name, tok, pattern)


@functools.lru_cache(maxsize=None)
def hf_tok(name: str):
    from tokenizers import Tokenizer
    return Tokenizer.from_file(str(vocab_path(name, "json")))


def specials_of(name: str, fmt: str) -> list[str]:
    return sorted(load_tokenizer(name, fmt).vocab.special_tokens)


def reference(name: str, fmt: str, text: str, allowed="none") -> list[int]:
    """The oracle's ids for valid text. HF always splits on its added tokens, so json
    vocabularies are only compared with every special allowed."""
    if fmt == "json":
        assert allowed == "all", "HF tokenizers always recognise their added tokens"
        return hf_tok(name).encode(text, add_special_tokens=False).ids
    enc = tiktoken_enc(name, "exact")
    if allowed == "none":
        return enc.encode_ordinary(text)
    if allowed == "all":
        return enc.encode(text, allowed_special="all")
    return enc.encode(text, allowed_special=set(allowed), disallowed_special=())


def pua_view(raw: bytes) -> tuple[str, list[int]]:
    """(text, offsets): `raw` as text in which every byte not covered by a valid shortest-form
    UTF-8 sequence is one private-use character (U+E080..U+E0FF, class Co, a symbol);
    offsets[i] is the raw byte offset of character i (one extra entry: len(raw)).

    Python's decoder with surrogateescape turns exactly those bytes into U+DC80..U+DCFF, one
    per byte (its error ranges are maximal subparts: a lead byte then continuation bytes,
    none of which can start a valid sequence)."""
    chars, offsets, pos = [], [], 0
    for ch in raw.decode("utf-8", "surrogateescape"):
        offsets.append(pos)
        if 0xDC80 <= ord(ch) <= 0xDCFF:
            chars.append(chr(0xE000 + ord(ch) - 0xDC00))
            pos += 1
        else:
            chars.append(ch)
            pos += len(ch.encode("utf-8"))
    offsets.append(pos)
    assert pos == len(raw)
    return "".join(chars), offsets


def tiktoken_pieces(text: str, pattern: str, specials=()) -> list[tuple[int, int] | str]:
    """tiktoken's own split of `text`: character ranges of its regex pieces, and the allowed
    special tokens (as their strings), in order.

    Read off an Encoding with the real pattern whose vocabulary holds every substring of the
    text: tiktoken returns a piece that is a token as that one token (whole-piece rule), so each
    token is one piece. Cost O(n^3) bytes: keep the text short."""
    vocab: dict[bytes, int] = {}
    for i in range(len(text)):
        for j in range(i + 1, len(text) + 1):
            vocab.setdefault(text[i:j].encode("utf-8"), len(vocab))
    special_ids = {s: len(vocab) + k for k, s in enumerate(specials)}
    import tiktoken
    enc = tiktoken.Encoding("pieces", pat_str=pattern, mergeable_ranks=vocab or {b"\0": 0},
                            special_tokens=special_ids)
    names = {i: s for s, i in special_ids.items()}
    char_at = {}  # utf-8 byte offset -> character index
    pos = 0
    for k, ch in enumerate(text):
        char_at[pos] = k
        pos += len(ch.encode("utf-8"))
    char_at[pos] = len(text)
    out, pos = [], 0
    for t in enc.encode(text, allowed_special=set(specials), disallowed_special=()):
        if t in names:
            out.append(names[t])
            pos += len(names[t].encode("utf-8"))
        else:
            end = pos + len(enc.decode_single_token_bytes(t))
            out.append((char_at[pos], char_at[end]))
            pos = end
    assert pos == len(text.encode("utf-8"))
    return out


def tiktoken_raw_reference(enc, raw: bytes, specials=()) -> list[int]:
    """tiktoken's ids for raw bytes under our invalid-UTF-8 policy (see the module docstring)."""
    text, offsets = pua_view(raw)
    out = []
    for item in tiktoken_pieces(text, enc._pat_str, specials):
        if isinstance(item, str):
            out.append(enc._special_tokens[item])
        else:
            out.extend(enc._encode_single_piece(raw[offsets[item[0]]:offsets[item[1]]]))
    return out


def _byte_level(data: bytes) -> str:
    u = bytes_to_unicode()
    return "".join(u[b] for b in data)


def hf_raw_reference(name: str, raw: bytes, mode: str) -> list[int]:
    """HF's ids for raw bytes under our invalid-UTF-8 policy: HF finds its added tokens and (in
    exact mode) its pre-tokenizer pieces in the private-use view; its BPE model encodes each
    piece's raw bytes (bytes mode: each whole span between added tokens)."""
    hf = hf_tok(name)
    special_ids = set(load_tokenizer(name, "json").vocab.special_tokens.values())
    text, offsets = pua_view(raw)
    out: list[int] = []

    def ordinary(a: int, b: int):
        if a >= b:
            return
        spans = ([(b0, e0) for _, (b0, e0) in hf.pre_tokenizer.pre_tokenize_str(text[a:b])]
                 if mode == "exact" else [(0, b - a)])
        for s, e in spans:
            piece = raw[offsets[a + s]:offsets[a + e]]
            out.extend(t.id for t in hf.model.tokenize(_byte_level(piece)))

    pos = 0
    enc = hf.encode(text, add_special_tokens=False)
    for token_id, (s, e) in zip(enc.ids, enc.offsets):
        if token_id in special_ids:
            ordinary(pos, s)
            out.append(token_id)
            pos = e
    ordinary(pos, len(text))
    return out


# ---------------------------------------------------------------------------------------------
# Our CPU path
# ---------------------------------------------------------------------------------------------

# A few fixed widths, so that jit compiles a handful of shapes per vocabulary, not one per
# example.
WIDTHS = (1024, 16384, 131072)


def width_for(nbytes: int) -> int:
    return next(w for w in WIDTHS if nbytes <= w)


def as_bytes(text: str | bytes) -> bytes:
    return text if isinstance(text, bytes) else text.encode("utf-8")


def encode_cpu(tok, texts, *, mode="exact", allowed="none", max_tokens=None, pad_id=0,
               max_len=None):
    max_len = max_len or width_for(max(len(as_bytes(t)) for t in texts))
    ids, counts = tok.encode_batch(texts, max_len=max_len, max_tokens=max_tokens, mode=mode,
                                   allowed_special=allowed, pad_id=pad_id, device=CPU)
    return np.asarray(ids), np.asarray(counts)


def describe(text, ours: list[int], ref: list[int]) -> str:
    k = next((i for i, (a, b) in enumerate(zip(ours, ref)) if a != b), min(len(ours), len(ref)))
    return (f"input {as_bytes(text)[:300]!r} ({len(as_bytes(text))} bytes): {len(ours)} ids vs "
            f"{len(ref)} from the oracle; first difference at {k}: ours {ours[max(0, k - 3):k + 5]} "
            f"oracle {ref[max(0, k - 3):k + 5]}")


def check_row(ids: np.ndarray, counts: np.ndarray, k: int, ref: list[int], text, pad_id=0):
    """Row k holds ref[:T] then pad_id, and counts[k] is the full count len(ref)."""
    width = ids.shape[1]
    row = ids[k].tolist()
    kept = min(len(ref), width)
    ours = row[:min(max(int(counts[k]), 0), width)]
    assert int(counts[k]) == len(ref) and row[:kept] == ref[:kept], describe(text, ours, ref)
    assert all(x == pad_id for x in row[kept:]), f"row {k} not padded with {pad_id}: {row[kept:kept + 8]}"


def _is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def check_text(name, fmt, text: str, allowed="none", mode="exact"):
    tok = load_tokenizer(name, fmt)
    if fmt == "json":
        allowed = "all"
    ids, counts = encode_cpu(tok, [text], allowed=allowed, mode=mode)
    check_row(ids, counts, 0, reference(name, fmt, text, allowed), text)


# ---------------------------------------------------------------------------------------------
# Strategies
# ---------------------------------------------------------------------------------------------

ANY_CHAR = st.characters(exclude_categories=("Cs",))
# Unicode White_Space (what \s means to tiktoken's and HF's engines), CRLF, and near misses
# (U+200B ZERO WIDTH SPACE, U+FEFF, U+001C are not White_Space).
WHITESPACE = [" ", "\t", "\n", "\r", "\r\n", "\x0b", "\x0c", "\x85", "\xa0", "\u1680", "\u2000",
              "\u200a", "\u2028", "\u2029", "\u202f", "\u205f", "\u3000", "\u200b", "\ufeff",
              "\x1c"]
# \p{N}: ASCII and other decimal digits (Nd), No and Nl.
DIGITS = ["0", "1", "7", "9", "\u0663", "\u06f5", "\u07c1", "\u0967", "\u09e6", "\u0e53",
          "\uff11", "\U0001d7d8", "\u00bd", "\u00b2", "\u216b", "\u3007", "\u2466"]
APOSTROPHES = ["'", "\u2019", "\u2018", "\u02bc", "`", "'s", "'S", "'ll", "'LL", "'ve", "'Re",
               "'d", "'m", "'t", "'\u017f", "''"]
WORDS = ["a", "s", "S", "ll", "t", "x", "don", "I", "HE", "\u00e9", "\u65e5\u672c", "\u0416",
         ".", ",", "!", "-", "/", "\U0001f600", "\u0301", "\u00c9t\u00e9", "hello", " the"]

runs = st.builds(lambda unit, k: unit * k, st.sampled_from(WHITESPACE + DIGITS + APOSTROPHES),
                 st.integers(1, 3000))
mixed_whitespace = st.lists(st.sampled_from(WHITESPACE), min_size=1, max_size=2000).map("".join)
mixed_digits = st.lists(st.sampled_from(DIGITS), min_size=1, max_size=2000).map("".join)
runs_text = st.lists(runs | mixed_whitespace | mixed_digits | st.sampled_from(WORDS)
                     | st.text(ANY_CHAR, max_size=4), max_size=6).map("".join)
fragment_text = st.lists(st.sampled_from(testing.TEXT_FRAGMENTS + WORDS + APOSTROPHES + WHITESPACE
                                         + DIGITS) | st.text(ANY_CHAR, max_size=6),
                         max_size=24).map("".join)
unicode_text = st.text(ANY_CHAR, max_size=80) | fragment_text

# Raw bytes for the invalid-UTF-8 tests: valid and invalid sequences side by side.
BYTE_FRAGMENTS = [
    b"\x80", b"\xbf", b"\xc0", b"\xc1\xbf", b"\xc2", b"\xc3\xa9", b"\xe4\xb8", b"\xe4\xb8\xad",
    b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xed\x9f\xbf", b"\xef\xbf\xbf", b"\xf0\x9f\x98",
    b"\xf0\x9f\x98\x80", b"\xf4\x8f\xbf\xbf", b"\xf4\x90\x80\x80", b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf", b"\xc0\xaf", b"\xff", b"\xfe", b"\xf8\x88\x80\x80\x80", b"\xcc\x81",
    b"\xe2\x80\x99", b"\xe2\x80", b"\xc2\xa0", b"\xe3\x80\x80", b"\xd9\xa3",
]
ASCII_FRAGMENTS = [b"a", b"s", b"S", b"'", b"'s", b"'ll", b" ", b"  ", b"\n", b"\r\n", b"\t",
                   b"1", b"123", b"1234", b".", b"!", b"hello", b" world", b"x"]


def raw_bytes(specials=()):
    parts = (st.sampled_from(BYTE_FRAGMENTS) | st.sampled_from(ASCII_FRAGMENTS)
             | st.binary(min_size=1, max_size=6)
             | st.text(ANY_CHAR, min_size=1, max_size=3).map(lambda s: s.encode("utf-8")))
    if specials:
        parts = parts | st.sampled_from([s.encode("utf-8") for s in specials])
    return st.lists(parts, max_size=24).map(b"".join)


# ---------------------------------------------------------------------------------------------
# The oracles themselves
# ---------------------------------------------------------------------------------------------


def test_pua_view_examples():
    assert pua_view(b"\xe4\xb8a") == ("\ue0e4\ue0b8a", [0, 1, 2, 3])
    assert pua_view(b"\xed\xa0\x80") == ("\ue0ed\ue0a0\ue080", [0, 1, 2, 3])  # a surrogate: 3 bytes
    assert pua_view("a\U0001f600".encode()) == ("a\U0001f600", [0, 1, 5])
    assert pua_view(b"\xf0\x9f\x98!") == ("\ue0f0\ue09f\ue098!", [0, 1, 2, 3, 4])
    assert pua_view(b"\xc0\xaf\xe0\x80\xaf") == ("".join(chr(0xE000 + b) for b in b"\xc0\xaf\xe0\x80\xaf"),
                                                 [0, 1, 2, 3, 4, 5])


def test_tiktoken_pieces_examples():
    pattern = load_tokenizer("cl100k", "tiktoken").vocab.pattern
    text = "I'M  12345\n\n x<|endoftext|>y"
    pieces = tiktoken_pieces(text, pattern, ["<|endoftext|>"])
    spelled = [p if isinstance(p, str) else text[p[0]:p[1]] for p in pieces]
    assert spelled == ["I", "'M", " ", " ", "123", "45", "\n\n", " x", "<|endoftext|>", "y"]


@pytest.mark.parametrize("name", NAMES)
@fuzz(25)
@given(text=fragment_text)
def test_piece_oracle_reproduces_tiktoken_on_valid_text(name, text):
    """On valid UTF-8 the invalid-bytes oracle must be tiktoken itself."""
    assume(len(text) <= 120)
    enc = tiktoken_enc(name, "exact")
    assert tiktoken_raw_reference(enc, text.encode("utf-8")) == enc.encode_ordinary(text)


@pytest.mark.parametrize("name", NAMES)
@fuzz(15)
@given(text=fragment_text)
def test_hf_piece_oracle_reproduces_hf_on_valid_text(name, text):
    assume(len(text) <= 120)
    raw = text.encode("utf-8")
    assert hf_raw_reference(name, raw, "exact") == hf_tok(name).encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------------------------------
# Valid text
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(120)
@given(text=unicode_text)
def test_random_unicode(name, fmt, text):
    check_text(name, fmt, text)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(30)
@given(text=runs_text)
def test_long_whitespace_digit_apostrophe_runs(name, fmt, text):
    check_text(name, fmt, text)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(12)
@given(prefix=st.sampled_from(WORDS + [""]), k=st.integers(1000, 6000),
       unit=st.sampled_from(["'", "'s", "'ll", "''S", "'\u017f", "\u2019s"]),
       suffix=st.sampled_from(["", "s", "S", "ll", "ve", "re", "t", "x", " ", "\n", "1", "'"]))
def test_thousands_of_apostrophes(name, fmt, prefix, k, unit, suffix):
    check_text(name, fmt, prefix + unit * k + suffix)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(30)
@given(data=st.data())
def test_strings_of_only_special_tokens(name, fmt, data):
    specials = specials_of(name, fmt)
    seq = data.draw(st.lists(st.sampled_from(specials), max_size=40), label="specials")
    text = "".join(seq)
    tok = load_tokenizer(name, fmt)
    ids, counts = encode_cpu(tok, [text], allowed="all")
    expected = [tok.vocab.special_tokens[s] for s in seq]  # each special is its one id
    check_row(ids, counts, 0, expected, text)
    if fmt == "json":
        assert hf_tok(name).encode(text, add_special_tokens=False).ids == expected
        return
    assert reference(name, fmt, text, "all") == expected
    # None allowed: the specials' text is ordinary text.
    check_text(name, fmt, text, allowed="none")
    subset = data.draw(st.sets(st.sampled_from(specials), max_size=4), label="allowed")
    ids, counts = encode_cpu(tok, [text], allowed=subset)
    check_row(ids, counts, 0, reference(name, fmt, text, subset), text)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(25)
@given(texts=st.lists(st.sampled_from(["", "", " ", "a", "\n"]) | fragment_text, min_size=1,
                      max_size=8),
       pad_id=st.integers(-(2**31), 2**31 - 1))
def test_batches_with_empty_strings(name, fmt, texts, pad_id):
    tok = load_tokenizer(name, fmt)
    ids, counts = encode_cpu(tok, texts, allowed="all", pad_id=pad_id)
    for k, text in enumerate(texts):
        check_row(ids, counts, k, reference(name, fmt, text, "all"), text, pad_id=pad_id)
        if not text:
            assert counts[k] == 0 and (ids[k] == pad_id).all()


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(25)
@given(length=st.sampled_from([1, 2, 3, 4, 7, 64, 255]), text=unicode_text | runs_text,
       filler=st.sampled_from(["a", " ", "1", "'", "\n"]), garbage=st.binary(min_size=1, max_size=8))
def test_exactly_L_bytes_and_one_more(name, fmt, length, text, filler, garbage):
    """A string of exactly L bytes fills its row (the next row starts right after it; bytes
    after a shorter row's length are garbage and must be ignored); L+1 bytes must raise."""
    tok = load_tokenizer(name, fmt)
    # Cut to at most L bytes on a character boundary, then pad at the FRONT, so that the
    # string ends exactly at the end of the row with whatever the text ends with.
    raw = text.encode("utf-8")
    raw = raw[max(0, len(raw) - length):]
    while raw and (raw[0] & 0xC0) == 0x80:
        raw = raw[1:]
    exact = (filler.encode() * length)[:length - len(raw)] + raw
    assert len(exact) == length
    exact_text = exact.decode("utf-8")
    short = exact[: length // 2]
    while short and not _is_utf8(short):
        short = short[:-1]
    data, lengths = bb.pack_strings([exact, short, exact], max_len=length)
    assert data.shape == (3, length) and lengths.tolist() == [length, len(short), length]
    data = data.copy()
    data[1, len(short):] = np.frombuffer((garbage * length)[: length - len(short)], np.uint8)
    allowed = "all"
    out = bb.encode(data, lengths, tok, max_tokens=length, allowed_special=allowed)
    ids, counts = np.asarray(out.ids), np.asarray(out.counts)
    for k, t in enumerate([exact_text, short.decode("utf-8"), exact_text]):
        check_row(ids, counts, k, reference(name, fmt, t, allowed), t)
    # One byte more than the row: every entry point refuses it, naming the problem.
    longer = exact + filler.encode()
    with pytest.raises(ValueError, match=f"string 1 has {length + 1} bytes, more than max_len={length}"):
        bb.pack_strings([exact, longer], max_len=length)
    with pytest.raises(ValueError, match=f"more than max_len={length}"):
        tok.encode_batch([longer], max_len=length, device=CPU)
    bad_lengths = lengths.copy()
    bad_lengths[2] = length + 1
    with pytest.raises(ValueError, match=rf"lengths\[2\] = {length + 1} is outside \[0, {length}\]"):
        bb.encode(data, bad_lengths, tok, max_tokens=length)
    # From the handler: JaxRuntimeError, or ValueError once jax's C++ fast path serves the call
    # (after a successful call with the same signature; see test_bad_inputs.py).
    with pytest.raises((jax.errors.JaxRuntimeError, ValueError),
                       match=rf"INVALID_ARGUMENT.*lengths\[2\] = {length + 1} is outside \[0, {length}\]"):
        bb.encode(jax.device_put(data, CPU), jax.device_put(bad_lengths, CPU), tok,
                  max_tokens=length).ids.block_until_ready()


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(30)
@given(text=unicode_text | runs_text, max_tokens=st.sampled_from([1, 2, 3, 5, 16]),
       pad_id=st.integers(-1, 2**20))
def test_max_tokens_smaller_than_the_result(name, fmt, text, max_tokens, pad_id):
    tok = load_tokenizer(name, fmt)
    allowed = "all" if fmt == "json" else "none"
    ref = reference(name, fmt, text, allowed)
    ids, counts = encode_cpu(tok, [text], allowed=allowed, max_tokens=max_tokens, pad_id=pad_id)
    assert ids.shape == (1, max_tokens)
    check_row(ids, counts, 0, ref, text, pad_id=pad_id)
    if len(ref) > max_tokens:
        assert counts[0] > ids.shape[1]  # truncation is visible


# ---------------------------------------------------------------------------------------------
# Invalid UTF-8
# ---------------------------------------------------------------------------------------------


def draw_invalid_utf8(name, fmt, data):
    """(the first 6 specials, raw bytes drawn with them, the tokenizer); at most 160 chars."""
    specials = specials_of(name, fmt)[:6]
    raw = data.draw(raw_bytes(specials), label="raw")
    assume(len(pua_view(raw)[0]) <= 160)
    return specials, raw, load_tokenizer(name, fmt)


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(60)
@given(data=st.data())
def test_invalid_utf8_exact_mode(name, fmt, data):
    specials, raw, tok = draw_invalid_utf8(name, fmt, data)
    if fmt == "json":
        ref = hf_raw_reference(name, raw, "exact")
    else:
        ref = tiktoken_raw_reference(tiktoken_enc(name, "exact"), raw, specials)
    ids, counts = encode_cpu(tok, [raw], allowed="all" if fmt == "json" else set(specials))
    check_row(ids, counts, 0, ref, raw)
    # Decoding gives the raw bytes back, invalid ones included.
    assert tok.decode_bytes(ids, counts) == [raw]


@pytest.mark.parametrize("name, fmt", VOCABS)
@fuzz(40)
@given(data=st.data())
def test_invalid_utf8_bytes_mode(name, fmt, data):
    specials, raw, tok = draw_invalid_utf8(name, fmt, data)
    # tokenizer.json vocabularies: every added token is always recognised (HF's rule).
    allowed, split_on = (set(specials), specials) if fmt == "tiktoken" else ("all", specials_of(name, fmt))
    ids, counts = encode_cpu(tok, [raw], allowed=allowed, mode="bytes")
    ref = tiktoken_raw_reference(tiktoken_enc(name, "bytes"), raw, split_on)
    check_row(ids, counts, 0, ref, raw)
    if fmt == "json":  # and HF's own BPE of each span between added tokens
        check_row(ids, counts, 0, hf_raw_reference(name, raw, "bytes"), raw)
