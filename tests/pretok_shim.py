"""The C++ pre-tokenizer (ffi/pretok/, built from tests/cpp/pretok_shim.cc) called through
ctypes, and the piece oracles it is checked against (see tests/pretok/test_pretokenize_*.py)."""

from __future__ import annotations

import ctypes
import dataclasses
import functools
import random
from pathlib import Path

import numpy as np

from blockbpe_jax import pretok, testing
from blockbpe_jax.vocab import KNOWN_PATTERNS

from helpers import compile_cpp, hf_tokenizer, load_tokenizer

# Chunkings for pretokenize_chunked: k bytes per chunk (edge states by lookback where it
# reaches, else scans), (k, -1): the scans forced, (k, lookback, threads): the chunks' steps on
# that many threads (the host encode of one long text).
CHUNKS = (1, 3, 7, 16, 64, (16, -1), (64, 8, 3))

PATTERNS = {
    pid: (name, KNOWN_PATTERNS[name])  # id -> (name, tiktoken pattern)
    for pid, name in {1: "r50k", 2: "cl100k", 3: "o200k", 4: "llama3"}.items()
}
PATTERN_IDS = sorted(PATTERNS)
# shared tokenizer.json of each vocabulary -> the pattern its pre-tokenizer equals
HF_FILES = {"r50k": 1, "cl100k": 4, "o200k": 3, "llama3": 4}
SPECIAL = "<|endoftext|>"


@dataclasses.dataclass
class SpecialMatches:
    """Per position of a text: the special special_match_at finds (-1: none) and the bytes of
    text it covers (0: none); the same by special_match_with; whether SpecialStarts lets the
    position through, and whether special_match_with counted a run there (run_match_at)."""

    match: np.ndarray
    length: np.ndarray
    match_with: np.ndarray
    length_with: np.ndarray
    may: np.ndarray
    by_run: np.ndarray


class Shim:
    """The C++ pre-tokenizer (ffi/pretok/) run on the operand that blockbpe_jax/pretok
    compiles from each pattern; chunk -1 runs the compiler's Python reference instead."""

    def __init__(self, path: Path):
        self.lib = ctypes.CDLL(str(path))
        vp, i = ctypes.c_void_p, ctypes.c_int
        self.lib.bbpe_pretokenize.argtypes = [vp, ctypes.c_int64, i, vp, i, vp, i, i, i, vp]
        self.lib.bbpe_pretokenize.restype = i
        self.lookback = self.lib.bbpe_pretok_lookback()  # the kernel's kPretokLookback
        self.lib.bbpe_leftmost_first_merges.argtypes = [ctypes.c_uint32]
        self.lib.bbpe_leftmost_first_merges.restype = ctypes.c_uint32
        self.lib.bbpe_leftmost_first_merges64.argtypes = [ctypes.c_uint64]
        self.lib.bbpe_leftmost_first_merges64.restype = ctypes.c_uint64
        self.lib.bbpe_special_starts.argtypes = [vp, vp, i, i, vp, i, vp, vp, vp, vp, vp, vp]
        self.lib.bbpe_special_accept.argtypes = [vp, i, i, vp]
        self.lib.bbpe_pretokenize_tiles_once.argtypes = [vp, ctypes.c_int64, vp, i, vp, i, i, i, vp, vp]
        self.lib.bbpe_pretokenize_tiles_once.restype = i
        self.lib.bbpe_chunk_classes.argtypes = [vp, ctypes.c_int64, vp, i, vp, i, vp, vp]
        self.lib.bbpe_chunk_classes.restype = i

    def chunk_classes(self, pattern, data: bytes, chunk: int, special: np.ndarray | None = None):
        """(every byte's class by byte_class, the same by chunk_classes over chunks of `chunk`
        bytes, as the piece kernels compute them), stage 0 of the pattern's pre-tokenizer."""
        op = self.pretokenizer(pattern).operand()
        buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(1, np.uint8)
        each, chunks = np.full(max(len(data), 1), 255, np.uint8), np.full(max(len(data), 1), 254, np.uint8)
        rc = self.lib.bbpe_chunk_classes(
            self._ptr(op), op.size, self._ptr(buf), len(data), self._ptr(special), chunk,
            self._ptr(each), self._ptr(chunks),
        )  # fmt: skip
        assert rc == 0
        return each[: len(data)], chunks[: len(data)]

    def tiles_once(self, pattern, data: bytes, tile: int, items: int, margin: int):
        """(flags, settled per tile) of the host model of tile_pretokenize_once (stage 0; the flags
        of unsettled tiles left at 7)."""
        p = self.pretokenizer(pattern)
        op = p.operand()
        buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(1, np.uint8)
        out = np.full(max(len(data), 1), 7, np.uint8)
        settled = np.zeros(len(data) // tile + 1, np.uint8)
        rc = self.lib.bbpe_pretokenize_tiles_once(
            self._ptr(op),
            op.size,
            self._ptr(buf),
            len(data),
            None,
            tile,
            items,
            margin,
            self._ptr(out),
            self._ptr(settled),
        )
        assert rc == 0
        return out[: len(data)], settled[: -(-len(data) // tile)]

    def special_starts(self, specials: list[bytes], text: bytes, escaped: bool) -> SpecialMatches:
        """special_match_at and special_match_with (SpecialStarts' help) at each position of text,
        with SpecialStarts' verdict, for the specials, given longest first as the tables order
        them."""
        offsets = np.cumsum([0] + [len(s) for s in specials]).astype(np.int32)
        data = np.frombuffer(b"".join(specials) + b"\0", np.uint8)
        src = np.frombuffer(text + b"\0", np.uint8)
        out = SpecialMatches(
            *(np.zeros(len(text), np.int32) for _ in range(4)),
            *(np.zeros(len(text), np.uint8) for _ in range(2)),
        )
        self.lib.bbpe_special_starts(
            self._ptr(offsets),
            self._ptr(data),
            len(specials),
            int(escaped),
            self._ptr(src),
            len(text),
            *(
                self._ptr(a)
                for a in (out.match, out.length, out.match_with, out.length_with, out.may, out.by_run)
            ),
        )
        out.may, out.by_run = out.may.astype(bool), out.by_run.astype(bool)
        return out

    def special_accept(self, lens, reverse: bool = False, listed_parts: int = 0) -> np.ndarray:
        """is_special (2: a match's first byte, 1: its others) of the leftmost-first resolution
        of matches of lengths `lens` (0: none): accept_special_matches, (reverse) its clusters
        walked from the last one back, or (listed_parts > 0) the matches listed in byte order and
        resolved listed_parts at a time (accept_listed_specials)."""
        lens = np.ascontiguousarray(lens, np.int32)
        out = np.zeros(max(len(lens), 1), np.uint8)
        order = listed_parts + 1 if listed_parts > 0 else int(reverse)
        self.lib.bbpe_special_accept(self._ptr(lens), len(lens), order, self._ptr(out))
        return out[: len(lens)]

    @staticmethod
    def _ptr(a):
        return None if a is None else a.ctypes.data_as(ctypes.c_void_p)

    @staticmethod
    def pretokenizer(pattern):
        return pretok.from_tiktoken_pattern(PATTERNS[pattern][1]) if isinstance(pattern, int) else pattern

    def flags(self, pattern, data: bytes, special: np.ndarray | None = None, chunk: int | tuple = 0):
        """pattern: an id of PATTERNS or a pretok.Pretokenizer. chunk 0: pretokenize_sequential;
        -1: the Python reference; k > 0: chunked by k; (k, lookback[, threads]): chunked by k
        with that lookback (-1: always scan), its chunks on that many threads."""
        p = self.pretokenizer(pattern)
        chunk, lookback, threads = (
            (chunk + (1,))[:3] if isinstance(chunk, tuple) else (chunk, self.lookback, 1)
        )
        if chunk == -1:
            return python_flags(p, data, special)
        op = p.operand()
        buf = np.frombuffer(data, np.uint8).copy() if data else np.zeros(1, np.uint8)
        out = np.full(max(len(data), 1), 7, np.uint8)
        rc = self.lib.bbpe_pretokenize(
            self._ptr(op),
            op.size,
            len(p.stages),
            self._ptr(buf),
            len(data),
            self._ptr(special),
            chunk,
            lookback,
            threads,
            self._ptr(out),
        )
        assert rc == 0
        return out[: len(data)]


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


def build_shim(out_dir: Path) -> Shim:
    """Compiles tests/cpp/pretok_shim.cc; skips the calling test without a compiler."""
    out = out_dir / "pretok_shim.so"
    built = compile_cpp("pretok_shim.cc", out, "-O2", "-shared", "-fPIC")
    assert built.returncode == 0, built.stderr
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
            flags[pos : pos + b] = pieces_to_flags(splitter(pattern).pre_tokenize_str(part), part, b)
            pos += b
    return flags


def special_mask(data: bytes) -> np.ndarray | None:
    sp = SPECIAL.encode()
    if sp not in data:
        return None
    mask = np.zeros(len(data), np.uint8)
    i = data.find(sp)
    while i >= 0:
        mask[i : i + len(sp)] = 1
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
    return (
        f"{PATTERNS[pattern][0]} {label}: first difference at byte {i} of {len(data)}: "
        f"{data[lo:i]!r} | {data[i : i + 40]!r}; ours={int(ours[i])} oracle={int(want[i])}"
    )


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


@functools.lru_cache(maxsize=None)
def tiktoken_enc(pattern: int):
    """tiktoken over the ranks of the pattern's vocabulary, with SPECIAL as its one special."""
    name, regex = PATTERNS[pattern]
    tok = load_tokenizer(name, "tiktoken")
    return testing.tiktoken_oracle(name, tok, regex, special_tokens={SPECIAL: tok.vocab.n_vocab + 1000})


def check_tiktoken_ids(enc, text: str, flags: np.ndarray):
    data = text.encode("utf-8")
    sp = special_mask(data)
    ours = []
    for piece in pieces_of(flags, data, sp):
        ours.extend([enc.encode_single_token(SPECIAL)] if piece is None else enc._encode_single_piece(piece))
    want = enc.encode(text, allowed_special="all") if sp is not None else enc.encode_ordinary(text)
    assert ours == want, f"{enc.name}: ids differ (len {len(ours)} vs {len(want)}) on {text[:80]!r}"


def check_hf_pieces(tok, text: str, flags: np.ndarray):
    data = text.encode("utf-8")
    want = pieces_to_flags(tok.pre_tokenizer.pre_tokenize_str(text), text, len(data))
    assert np.array_equal(flags, want), "HF tokenizer.json pre-tokenizer disagrees"


def hf_for(pattern):
    return [hf_tokenizer(name) for name, p in HF_FILES.items() if p == pattern]


# ---------------------------------------------------------------------------------------------
# Generated text

FRAGMENTS = (
    list("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ")
    + list("sdmtlvreSDMTLVRE") * 2
    + [
        "\u017f",
        "\u01c5",
        "\u01c8",
        "\u02b0",
        "\u00aa",
        "\u4e2d",
        "\u6587",
        "\u00e9",
        "\u00df",
        "\u0416",
        "\u0436",
        "\u0410\u0411",
        "\u0627",
        "\u0628",
        "\u0915",
        "\u093f",
        "\u094d",
        "\u0301",
        "\u0308",
        "\u20dd",
        "\u0903",
        "\uac00",
        "\u3042",
        "\u30a2",
        "\u0295",
        "\U00010d50",
    ]
    + list("0123456789")
    + ["\u0663", "\u00b2", "\u216b", "\u00bd", "\u0966", "\U0001d7ce"]
    + [" "] * 6
    + [
        "\n",
        "\r",
        "\r\n",
        "\t",
        "\u00a0",
        "\u3000",
        "\u2028",
        "\u2029",
        "\u0085",
        "\u000b",
        "\u000c",
        "\u2009",
        "\u200b",
        "\u180e",
        "\x1c",
    ]
    + list("''''/\\!?.,;:-\"#$%&*()[]{}<>@^_`|~+=")
    + ["\u2019", "\u00ab", "\u2014"]
    + [
        "\U0001f600",
        "\U0001f44d\U0001f3fd",
        "\u200d",
        "\ufe0f",
        "\U0001f468\u200d\U0001f469\u200d\U0001f467",
        "\x00",
        "\x7f",
        "\ue000",
        "\U000e0101",
        "\U000f0000",
    ]
    + [
        "'s",
        "'S",
        "'ll",
        "'LL",
        "'Ll",
        "'ve",
        "'VE",
        "'re",
        "'d",
        "'D",
        "'m",
        "'t",
        "'\u017f",
        "n't",
        "\u2019s",
        "  ",
        "   ",
        "\n\n",
        " \n",
        "\n ",
        SPECIAL,
    ]
)


def gen_text(rng: random.Random, max_frags: int = 40) -> str:
    return "".join(rng.choice(FRAGMENTS) for _ in range(rng.randint(1, max_frags)))
