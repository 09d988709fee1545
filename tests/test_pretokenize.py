"""Exactness of the pre-tokenizer (ffi/pretokenize.h) against tiktoken and HF tokenizers.

The C++ header is compiled into a tiny shared library (tests/cpp/pretok_shim.cc, g++) and
called through ctypes with the tables blockbpe_jax/pretok compiles from each pattern. For every
pattern, pretokenize_sequential and pretokenize_chunked (chunk sizes 1, 3, 7, 16, 64) and the
compiler's Python reference must give exactly the piece starts of the oracles:

* piece oracle: Oniguruma (HF tokenizers' regex engine) running the tiktoken pattern through
  `pre_tokenizers.Split(..., "isolated")`. Two spellings differ between the engines and are
  translated: Rust's `$` (end of text) is Oniguruma's `\\z`, and Rust's possessive `{1,3}+` is
  plain `{1,3}` (Oniguruma reads `{1,3}+` as "one or more of {1,3}"; without anything after
  it, possessive and greedy match the same);
* tiktoken (Rust regex, the real oracle): BPE of each of our pieces, concatenated, equals
  `encode_ordinary` (and `encode` with specials allowed);
* HF tokenizer.json: the file's own pre-tokenizer gives our pieces (gpt2 -> r50k's pattern,
  cl100k_hf -> Llama 3's (test_cl100k_hf_is_llama3_regex), o200k_hf -> o200k, llama3 -> llama3).

Environment: BLOCKBPE_DATA (shared data dir, default <repo>/../shared/data); BLOCKBPE_FULL=1
runs every corpus whole and more generated examples (slow).
"""
from __future__ import annotations

import ctypes
import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
FULL = os.environ.get("BLOCKBPE_FULL", "") not in ("", "0")
# Chunkings for pretokenize_chunked: k bytes per chunk (edge states by lookback where it
# reaches, else scans), or (k, -1): the scans forced.
CHUNKS = (1, 3, 7, 16, 64, (16, -1))

from blockbpe_jax import testing  # noqa: E402
from blockbpe_jax import pretok  # noqa: E402
from blockbpe_jax.vocab import KNOWN_PATTERNS  # noqa: E402

PATTERNS = {pid: (name, KNOWN_PATTERNS[name])  # id -> (name, tiktoken pattern)
            for pid, name in {1: "r50k", 2: "cl100k", 3: "o200k", 4: "llama3"}.items()}
PATTERN_IDS = sorted(PATTERNS)
TIKTOKEN_FILES = {1: "tiktoken/r50k_base.tiktoken", 2: "tiktoken/cl100k_base.tiktoken",
                  3: "tiktoken/o200k_base.tiktoken", 4: "llama3/tokenizer.model"}
HF_FILES = {"gpt2": 1, "cl100k_hf": 4, "o200k_hf": 3, "llama3": 4}  # tokenizer.json -> pattern
SPECIAL = "<|endoftext|>"


# ---------------------------------------------------------------------------------------------
# Fixtures


# data_dir: the shared session fixture in tests/conftest.py.


class Shim:
    """The C++ pre-tokenizer (ffi/pretokenize.h) run on the operand that blockbpe_jax/pretok
    compiles from each pattern; chunk -1 runs the compiler's Python reference instead."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        vp, i = ctypes.c_void_p, ctypes.c_int
        self.lib.bbpe_pretokenize.argtypes = [vp, ctypes.c_int64, i, vp, i, vp, i, i, vp]
        self.lib.bbpe_pretokenize.restype = i
        self.lookback = self.lib.bbpe_pretok_lookback()  # the kernel's kPretokLookback
        self.lib.bbpe_leftmost_first_merges.argtypes = [ctypes.c_uint32]
        self.lib.bbpe_leftmost_first_merges.restype = ctypes.c_uint32

    @staticmethod
    def _ptr(a):
        return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

    @staticmethod
    def pretokenizer(pattern):
        return pretok.from_tiktoken_pattern(PATTERNS[pattern][1]) if isinstance(pattern, int) else pattern

    def flags(self, pattern, data: bytes, special: np.ndarray | None = None,
              chunk: int | tuple[int, int] = 0):
        """pattern: an id of PATTERNS or a pretok.Pretokenizer. chunk 0: pretokenize_sequential;
        -1: the Python reference; k > 0: chunked by k; (k, lookback): chunked by k with that
        lookback (-1: always scan)."""
        p = self.pretokenizer(pattern)
        chunk, lookback = chunk if isinstance(chunk, tuple) else (chunk, self.lookback)
        if chunk == -1:
            return python_flags(p, data, special)
        op = p.operand()
        buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(1, np.uint8)
        out = np.full(max(len(data), 1), 7, np.uint8)
        rc = self.lib.bbpe_pretokenize(self._ptr(op), op.size, len(p.stages), self._ptr(buf),
                                       len(data), self._ptr(special), chunk, lookback,
                                       self._ptr(out))
        assert rc == 0
        return out[:len(data)]


def python_flags(p, data: bytes, special: np.ndarray | None) -> np.ndarray:
    """Byte flags of the compiler's Python reference (valid UTF-8 only)."""
    text = data.decode("utf-8")
    off = char_to_byte_offsets(text)
    specials = []
    if special is not None:
        byte_to_char = {int(b): k for k, b in enumerate(off[:-1])}
        i = 0
        while i < len(data):
            if special[i]:
                j = i
                while j < len(data) and special[j]:
                    j += 1
                specials.append((byte_to_char[i], byte_to_char.get(j, len(text))))
                i = j
            else:
                i += 1
    flags = np.zeros(len(data), np.uint8)
    for k in p.pieces(text, specials):
        flags[off[k]] = 1
    return flags


@pytest.fixture(scope="session")
def shim(tmp_path_factory) -> Shim:
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no C++ compiler (g++) to build tests/cpp/pretok_shim.cc")
    out = tmp_path_factory.mktemp("pretok") / "pretok_shim.so"
    cmd = [cxx, "-O2", "-std=c++17", "-shared", "-fPIC", "-I", str(REPO / "ffi"),
           str(REPO / "tests" / "cpp" / "pretok_shim.cc"), "-o", str(out)]
    subprocess.run(cmd, check=True)
    return Shim(out)


# ---------------------------------------------------------------------------------------------
# Oracles


def onig_pattern(pat: str) -> str:
    return pat.replace("$", r"\z").replace("{1,3}+", "{1,3}")


_SPLITTERS: dict[int, object] = {}


def splitter(pattern: int):
    if pattern not in _SPLITTERS:
        from tokenizers import Regex, pre_tokenizers
        _SPLITTERS[pattern] = pre_tokenizers.Split(Regex(onig_pattern(PATTERNS[pattern][1])), "isolated")
    return _SPLITTERS[pattern]


def char_to_byte_offsets(text: str) -> np.ndarray:
    lens = np.fromiter((len(c.encode("utf-8", "surrogatepass")) for c in text), np.int64, len(text))
    return np.concatenate([[0], np.cumsum(lens)])


def pieces_to_flags(pieces, text: str, nbytes: int) -> np.ndarray:
    off = char_to_byte_offsets(text)
    flags = np.zeros(nbytes, np.uint8)
    for _, (s, e) in pieces:
        if e > s:
            flags[off[s]] = 1
    return flags


def oracle_flags(pattern: int, text: str) -> np.ndarray:
    """Piece starts per byte of text.encode(); special tokens split the text into sub-texts."""
    nbytes = len(text.encode("utf-8"))
    flags = np.zeros(nbytes, np.uint8)
    pos = 0
    for k, part in enumerate(text.split(SPECIAL)):
        if k:
            pos += len(SPECIAL)
        if part:
            b = len(part.encode("utf-8"))
            flags[pos:pos + b] = pieces_to_flags(splitter(pattern).pre_tokenize_str(part), part, b)
            pos += b
    return flags


def special_mask(data: bytes) -> np.ndarray | None:
    sp = SPECIAL.encode()
    if sp not in data:
        return None
    mask = np.zeros(len(data), np.uint8)
    i = data.find(sp)
    while i >= 0:
        mask[i:i + len(sp)] = 1
        i = data.find(sp, i + len(sp))
    return mask


def pieces_of(flags: np.ndarray, data: bytes, special: np.ndarray | None):
    """Byte pieces from flags; each special token is one item None."""
    out, start, i, spb = [], None, 0, SPECIAL.encode()
    while i < len(data):
        if special is not None and special[i]:
            if start is not None:
                out.append(data[start:i])
                start = None
            out.append(None)
            i += len(spb)
            continue
        if flags[i] or start is None:
            if start is not None:
                out.append(data[start:i])
            start = i
        i += 1
    if start is not None:
        out.append(data[start:])
    return out


def describe(pattern, data, ours, want, label):
    i = int(np.nonzero(ours != want)[0][0])
    lo = max(0, i - 40)
    return (f"{PATTERNS[pattern][0]} {label}: first difference at byte {i} of {len(data)}: "
            f"{data[lo:i]!r} | {data[i:i + 40]!r}; ours={int(ours[i])} oracle={int(want[i])}")


def check_text(shim: Shim, pattern: int, text: str, chunks=CHUNKS):
    """Sequential and chunked flags equal the Oniguruma piece oracle; returns the flags."""
    data = text.encode("utf-8")
    sp = special_mask(data)
    want = oracle_flags(pattern, text)
    if sp is not None:
        want[sp.astype(bool)] = 0
    for chunk in (0, -1) + tuple(chunks):
        got = shim.flags(pattern, data, sp, chunk)
        if sp is not None:
            got = got.copy()
            got[sp.astype(bool)] = 0
        if not np.array_equal(got, want):
            label = {0: "sequential", -1: "python reference"}.get(chunk, f"chunk={chunk}")
            raise AssertionError(describe(pattern, data, got, want, label))
    return want


_TIKTOKEN: dict[int, object] = {}


def tiktoken_enc(data_dir: Path, pattern: int):
    if pattern not in _TIKTOKEN:
        import tiktoken
        import tiktoken.load
        ranks = tiktoken.load.load_tiktoken_bpe(str(data_dir / "vocab" / TIKTOKEN_FILES[pattern]))
        _TIKTOKEN[pattern] = tiktoken.Encoding(
            f"test_{PATTERNS[pattern][0]}", pat_str=PATTERNS[pattern][1], mergeable_ranks=ranks,
            special_tokens={SPECIAL: len(ranks) + 1000})
    return _TIKTOKEN[pattern]


def check_tiktoken_ids(enc, text: str, flags: np.ndarray):
    data = text.encode("utf-8")
    sp = special_mask(data)
    ours = []
    for piece in pieces_of(flags, data, sp):
        ours.extend([enc.encode_single_token(SPECIAL)] if piece is None else enc._encode_single_piece(piece))
    want = enc.encode(text, allowed_special="all") if sp is not None else enc.encode_ordinary(text)
    assert ours == want, f"{enc.name}: ids differ (len {len(ours)} vs {len(want)}) on {text[:80]!r}"


_HF: dict[str, object] = {}


def hf_tokenizer(data_dir: Path, name: str):
    if name not in _HF:
        from tokenizers import Tokenizer
        _HF[name] = Tokenizer.from_file(str(data_dir / "vocab" / name / "tokenizer.json"))
    return _HF[name]


def check_hf_pieces(tok, text: str, flags: np.ndarray):
    data = text.encode("utf-8")
    want = pieces_to_flags(tok.pre_tokenizer.pre_tokenize_str(text), text, len(data))
    assert np.array_equal(flags, want), "HF tokenizer.json pre-tokenizer disagrees"


# ---------------------------------------------------------------------------------------------
# Corpora


def corpus_files(data_dir: Path):
    return testing.corpus_paths(data_dir)


CORPORA = ["code_python_stdlib.py.txt.gz", "gsm8k_test.jsonl", "gsm8k_train.jsonl.gz",
           "war_and_peace_en.txt", "wikitext2_test.txt.gz"]


def utf8_cut(data: bytes, i: int) -> int:
    while 0 < i < len(data) and (data[i] & 0xC0) == 0x80:
        i -= 1
    return i


def excerpts(data: bytes, count: int, seed: int):
    """`count` excerpts of 1..8192 bytes (log-uniform lengths) cut at UTF-8 boundaries."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = int(round(2 ** rng.uniform(0, 13)))
        start = utf8_cut(data, rng.randrange(max(1, len(data) - length)))
        end = utf8_cut(data, min(len(data), start + length))
        if end > start:
            out.append(data[start:end].decode("utf-8"))
    return out


@pytest.mark.parametrize("corpus", CORPORA)
@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_corpus_excerpts(shim, data_dir, pattern, corpus):
    path = data_dir / "corpus" / corpus
    if not path.exists():
        pytest.skip(f"{corpus} not in {data_dir / 'corpus'}")
    data = testing.read_corpus(path)
    texts = excerpts(data, 400 if FULL else 30, seed=pattern * 1000 + CORPORA.index(corpus))
    if FULL:  # the whole corpus, in consecutive 8 KiB excerpts
        i = 0
        while i < len(data):
            j = utf8_cut(data, min(len(data), i + 8192))
            texts.append(data[i:j].decode("utf-8"))
            i = j
    enc = tiktoken_enc(data_dir, pattern)
    hf = hf_for(data_dir, pattern)
    for k, text in enumerate(texts):
        # long excerpts get fewer chunkings, the short ones all of them
        flags = check_text(shim, pattern, text, CHUNKS if len(text) < 2048 or FULL else (7, 64))
        if FULL or k % 3 == 0:
            check_tiktoken_ids(enc, text, flags)
            for tok in hf:
                check_hf_pieces(tok, text, flags)


def test_every_corpus_present(data_dir):
    names = {p.name for p in corpus_files(data_dir)}
    missing = set(CORPORA) - names
    extra = names - set(CORPORA)
    assert not missing, f"corpora missing: {missing}"
    assert not extra, f"new corpora: add them to CORPORA: {extra}"


# ---------------------------------------------------------------------------------------------
# Hand-picked cases: each alternative, its lookahead, and the chunk boundaries inside them.

CASES = [
    "Hello world", "it's I'LL don't 'sa 'S \u017f '\u017f 'Ll 'lL ''s ?'s '' x'", "DON'T Don'T dOn'T",
    "a  b\n\n  c  \n", "x\n  ", "x\n", "  ", " ", "\n", "a", "'", "'l", "'ll", "'rE", "'v", "'ver",
    "123456 7 89 \u0663\u0664\u0665\u0666 \u00b2\u00b3\u00b9\u00bc x1y22z333w4444",
    "\u4e2dAB's \u4e2dA ABc AB\u4e2dCD \u00e9 e\u0301 \u01c5x \u01c5 x\u01c5 \u02b0\u02b0A",
    "!!a !a ?'s '' ''s", "hello\r\n\r\nworld //\n/ x !\n/\n/ !/\r\n", "\u0301a \u0301AB x\u0301 \u0301\u0301",
    "a\tb \t\u3000c\u00a0d \u2028e\u2029 \u0085f \u000b\u000cg", "  5\n 'll", "$%^ &* ",
    "\U0001F600 \U0001F44D\U0001F3FD \U0001F468\u200d\U0001F469\u200d\U0001F467 a\ufe0f",
    "\u041f\u0440\u0438\u0432\u0435\u0442 \u043c\u0438\u0440 \u0645\u0631\u062d\u0628\u0627 \u0928\u092e\u0938\u094d\u0924\u0947",
    " \n \n  x", "\t\t\n", " \t x", "end  \t", "a<|endoftext|>b", "<|endoftext|>", "  <|endoftext|>  ",
    "x\n  <|endoftext|>\n  y", "it<|endoftext|>'s", "\u4e2d<|endoftext|>AB's",
]


def hf_for(data_dir, pattern):
    return [hf_tokenizer(data_dir, name) for name, p in HF_FILES.items() if p == pattern]


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_cases(shim, data_dir, pattern):
    enc = tiktoken_enc(data_dir, pattern)
    hf = hf_for(data_dir, pattern)
    for text in CASES:
        flags = check_text(shim, pattern, text, range(1, 12))
        check_tiktoken_ids(enc, text, flags)
        if SPECIAL not in text:  # (pre_tokenize_str does not split added tokens)
            for tok in hf:
                check_hf_pieces(tok, text, flags)


def test_cl100k_hf_is_llama3_regex(shim, data_dir):
    """cl100k_hf's tokenizer.json uses the Llama-3 regex: its pieces differ from tiktoken's
    cl100k on a whitespace run with a newline at the end of the text (see pretokenize.h). With
    the cl100k vocabulary the ids happen to agree (no token has spaces after a newline)."""
    tok = hf_tokenizer(data_dir, "cl100k_hf")
    enc = tiktoken_enc(data_dir, 2)
    for text in ["x\n  ", "x \n\t", "a\r\n \u3000"]:
        hf = pieces_to_flags(tok.pre_tokenizer.pre_tokenize_str(text), text, len(text.encode()))
        assert hf.tolist() == shim.flags(4, text.encode()).tolist()
        assert hf.tolist() != shim.flags(2, text.encode()).tolist()
        check_tiktoken_ids(enc, text, shim.flags(2, text.encode()))
        assert enc.encode_ordinary(text) == tok.encode(text, add_special_tokens=False).ids


# ---------------------------------------------------------------------------------------------
# Generated text

FRAGMENTS = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") + list("sdmtlvreSDMTLVRE") * 2
    + ["\u017f", "\u01c5", "\u01c8", "\u02b0", "\u00aa", "\u4e2d", "\u6587", "\u00e9", "\u00df",
       "\u0416", "\u0436", "\u0410\u0411", "\u0627", "\u0628", "\u0915", "\u093f", "\u094d",
       "\u0301", "\u0308", "\u20dd", "\u0903", "\uac00", "\u3042", "\u30a2", "\u0295", "\U00010d50"]
    + list("0123456789") + ["\u0663", "\u00b2", "\u216b", "\u00bd", "\u0966", "\U0001d7ce"]
    + [" "] * 6 + ["\n", "\r", "\r\n", "\t", "\u00a0", "\u3000", "\u2028", "\u2029", "\u0085",
                   "\u000b", "\u000c", "\u2009", "\u200b", "\u180e", "\x1c"]
    + list("''''/\\!?.,;:-\"#$%&*()[]{}<>@^_`|~+=") + ["\u2019", "\u00ab", "\u2014"]
    + ["\U0001F600", "\U0001F44D\U0001F3FD", "\u200d", "\ufe0f", "\U0001F468\u200d\U0001F469\u200d\U0001F467",
       "\x00", "\x7f", "\ue000", "\U000E0101", "\U000F0000"]
    + ["'s", "'S", "'ll", "'LL", "'Ll", "'ve", "'VE", "'re", "'d", "'D", "'m", "'t", "'\u017f", "n't",
       "\u2019s", "  ", "   ", "\n\n", " \n", "\n ", SPECIAL]
)


def gen_text(rng: random.Random, max_frags: int = 40) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, max_frags)))


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_random_fragments(shim, data_dir, pattern):
    """Many short strings from FRAGMENTS (seeded; BLOCKBPE_FULL=1 runs 10x more)."""
    rng = random.Random(pattern)
    enc = tiktoken_enc(data_dir, pattern)
    hf = hf_for(data_dir, pattern)
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
        alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)

    @pytest.mark.parametrize("pattern", PATTERN_IDS)
    @settings(max_examples=1500 if FULL else 150, deadline=None, derandomize=not FULL,
              suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
    @given(text=_text)
    def test_hypothesis_text(shim, data_dir, pattern, text):
        flags = check_text(shim, pattern, text)
        check_tiktoken_ids(tiktoken_enc(data_dir, pattern), text, flags)


# ---------------------------------------------------------------------------------------------
# Invalid UTF-8: every byte not covered by a valid sequence is one code point that behaves like
# a symbol. Oracle: the same bytes with each such byte replaced by a private-use character.


def decode_with_pua(data: bytes):
    """(text, byte length of each char): invalid bytes -> U+E000 + byte (class Co: a symbol)."""
    chars, lens = [], []
    i = 0
    while i < len(data):
        try:
            s = data[i:].decode("utf-8")
            chars.extend(s)
            lens.extend(len(c.encode()) for c in s)
            break
        except UnicodeDecodeError as e:
            good = data[i:i + e.start].decode("utf-8")
            chars.extend(good)
            lens.extend(len(c.encode()) for c in good)
            for b in data[i + e.start:i + e.end]:
                chars.append(chr(0xE000 + b))
                lens.append(1)
            i += e.end
    return "".join(chars), lens


def random_bytes(rng: random.Random, n: int) -> bytes:
    k = rng.random()
    if k < 0.3:
        return bytes(rng.randrange(256) for _ in range(n))
    if k < 0.6:  # bytes that look like UTF-8 pieces
        pool = [b"a", b" ", b"\n", b"'", b"s", b"1", b"\x80", b"\xbf", b"\xc2", b"\xc3\xa9", b"\xe4\xb8",
                b"\xe4\xb8\xad", b"\xed\xa0\x80", b"\xf0\x9f\x98", b"\xf0\x9f\x98\x80", b"\xf4\x90\x80\x80",
                b"\xc0\xaf", b"\xe0\x80\xaf", b"\xff", b"\xcc\x81", b"\xf8"]
        return b"".join(rng.choice(pool) for _ in range(n))
    text = gen_text(rng).encode("utf-8")  # valid text with a few bytes flipped
    b = bytearray(text)
    for _ in range(rng.randint(1, 3)):
        if b:
            b[rng.randrange(len(b))] = rng.randrange(256)
    return bytes(b)


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_invalid_utf8(shim, pattern):
    rng = random.Random(100 + pattern)
    for _ in range(3000 if FULL else 300):
        data = random_bytes(rng, rng.randint(1, 48))
        seq = shim.flags(pattern, data)
        for chunk in CHUNKS:
            assert np.array_equal(shim.flags(pattern, data, None, chunk), seq), (data, chunk)
        text, lens = decode_with_pua(data)
        off = np.concatenate([[0], np.cumsum(lens)]).astype(np.int64)
        want = np.zeros(len(data), np.uint8)
        for _, (s, e) in splitter(pattern).pre_tokenize_str(text):
            want[off[s]] = 1
        assert np.array_equal(seq, want), describe(pattern, data, seq, want, "invalid utf-8")


def test_invalid_utf8_policy_examples(shim):
    # "\xe4\xb8" (truncated) + "a": two symbol code points then a letter -> pieces "\xe4\xb8", "a"
    assert shim.flags(1, b"\xe4\xb8a").tolist() == [1, 0, 1]
    # a lone continuation byte after a space is a symbol led by the space
    assert shim.flags(1, b"x \x80").tolist() == [1, 1, 0]
    # surrogate encodings are invalid: three symbols
    assert shim.flags(1, b"\xed\xa0\x80").tolist() == [1, 0, 0]
    # a valid 4-byte sequence: one code point
    assert shim.flags(1, "a\U0001F600".encode()).tolist() == [1, 1, 0, 0, 0]


# ---------------------------------------------------------------------------------------------
# Specials, bytes mode, edge cases


@pytest.mark.parametrize("pattern", PATTERN_IDS)
def test_specials_cut_subtexts(shim, data_dir, pattern):
    rng = random.Random(7 + pattern)
    enc = tiktoken_enc(data_dir, pattern)
    for _ in range(200):
        parts = [gen_text(rng, 12) for _ in range(rng.randint(1, 4))]
        text = SPECIAL.join(p.replace(SPECIAL, "") for p in parts)
        flags = check_text(shim, pattern, text)
        check_tiktoken_ids(enc, text, flags)


def test_bytes_mode_and_edges(shim):
    """Bytes mode has no stages (piece_start stays zero); empty and one-byte texts; an operand
    whose size does not fit the layout is refused."""
    data = "ab c<|endoftext|>d\u4e2d".encode()
    assert shim.flags(pretok.BYTES_MODE, data, special_mask(data)).tolist() == [0] * len(data)
    for p in PATTERN_IDS:
        assert shim.flags(p, b"").tolist() == []
        assert shim.flags(p, b"x").tolist() == [1]
        for chunk in CHUNKS:
            assert shim.flags(p, b"x", None, chunk).tolist() == [1]
    op = shim.pretokenizer(1).operand()
    buf = np.zeros(4, np.uint8)
    for size, stages in [(op.size - 1, 1), (op.size, 2), (op.size, 5), (op.size, -1), (16, 1)]:
        assert shim.lib.bbpe_pretokenize(op.ctypes.data, size, stages, buf.ctypes.data, 4, None, 0,
                                         shim.lookback, buf.ctypes.data) == -1, (size, stages)


# ---------------------------------------------------------------------------------------------
# The Unicode data the compiler derives classes from


@pytest.mark.parametrize("prop", ["Lu", "Ll", "Lt", "Lm", "Lo", "M", "N", "Nd", "P", "S", "Z", "L",
                                  "Han", "Hiragana", "Katakana", "Hangul", "Latin", "Cyrillic"])
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
    r = subprocess.run([sys.executable, str(REPO / "scripts" / "gen_unicode_data.py"), "--check"],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr


def _leftmost_first_sweep(candidates: int) -> int:
    """merge_segment's rule, one pair after another: a candidate pair merges unless the pair
    before it merged (its left token is then gone)."""
    merges, prev = 0, False
    for i in range(32):
        prev = bool(candidates >> i & 1) and not prev
        merges |= prev << i
    return merges


def test_leftmost_first_merges_bits_equal_the_sweep(shim):
    """The branch-free bit form (bpe_core.h, used by the CUDA kernel's lane-parallel merges,
    which the CPU never runs) selects exactly the pairs of the sequential sweep: every mask of
    the low 16 bits, every single run of set bits, and random 32-bit masks."""
    rng = np.random.default_rng(0)
    masks = list(range(1 << 16))
    masks += [((1 << (e - s)) - 1) << s for s in range(32) for e in range(s, 33)]
    masks += [int(a & b | c) for a, b, c in rng.integers(0, 1 << 32, size=(20_000, 3), dtype=np.uint64)]
    for m in masks:
        m &= 0xFFFFFFFF
        assert shim.lib.bbpe_leftmost_first_merges(m) == _leftmost_first_sweep(m), hex(m)
