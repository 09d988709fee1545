"""Shared data and oracles for tests, benchmarks and examples (needs tiktoken / tokenizers).

The corpora and vocabularies live outside the repo (`blockbpe_jax._data.find_data_dir`).
"""

from __future__ import annotations

import gzip
import random
from pathlib import Path

from ._data import find_data_dir

# name -> (.tiktoken-format file, tokenizer.json), relative to the data dir's vocab/.
VOCAB_FILES = {
    "r50k": ("tiktoken/r50k_base.tiktoken", "gpt2/tokenizer.json"),
    "cl100k": ("tiktoken/cl100k_base.tiktoken", "cl100k_hf/tokenizer.json"),
    "o200k": ("tiktoken/o200k_base.tiktoken", "o200k_hf/tokenizer.json"),
    "llama3": ("llama3/tokenizer.model", "llama3/tokenizer.json"),
}
BYTES_MODE_PATTERN = r"(?s:.+)"  # tiktoken with this pattern == our bytes mode
# Qwen2's pre-tokenizer regex (single digits): tests/test_families_*.py and benchmarks/families.py
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def data_dir() -> Path:
    path = find_data_dir()
    if path is None:
        raise FileNotFoundError("shared data not found: set BLOCKBPE_DATA or place it at ../shared/data")
    return path


def corpus_paths(root: Path | None = None) -> list[Path]:
    root = root or data_dir()
    return sorted(p for p in (root / "corpus").iterdir() if p.is_file())


def read_corpus(path: Path) -> bytes:
    """The raw UTF-8 bytes of a corpus file (.gz files decompressed)."""
    return gzip.open(path, "rb").read() if path.suffix == ".gz" else path.read_bytes()


def excerpts(raw: bytes, lo: int, hi: int, seed: int = 0) -> list[bytes]:
    """Cuts `raw` into consecutive excerpts of lo..hi bytes (covering all of it), each ending
    on a UTF-8 character boundary (so it may run up to 3 bytes past hi)."""
    rng = random.Random(seed)
    out, i = [], 0
    while i < len(raw):
        j = min(len(raw), i + rng.randint(lo, hi))
        while j < len(raw) and (raw[j] & 0xC0) == 0x80:
            j += 1
        out.append(raw[i:j])
        i = j
    return out


def tekken_oracle(path: Path):
    """(tiktoken.Encoding, id offset) of a Mistral Tekken file, built as mistral_common's
    Tekkenizer builds it: ranks below default_vocab_size - num_special, id = rank + offset."""
    import base64
    import json

    import tiktoken

    doc = json.loads(Path(path).read_bytes())
    cfg = doc["config"]
    n_special = cfg["default_num_special_tokens"]
    inner = cfg["default_vocab_size"] - n_special
    ranks = {base64.b64decode(e["token_bytes"]): e["rank"] for e in doc["vocab"] if e["rank"] < inner}
    enc = tiktoken.Encoding(Path(path).stem, pat_str=cfg["pattern"], mergeable_ranks=ranks, special_tokens={})
    return enc, n_special


def tiktoken_oracle(name: str, tokenizer, pattern: str, special_tokens: dict | None = None):
    """A tiktoken.Encoding over the same ranks and specials as `tokenizer`, with `pattern`
    (`special_tokens`, where given, in place of the tokenizer's specials)."""
    import tiktoken
    import tiktoken.load

    path = data_dir() / "vocab" / VOCAB_FILES[name][0]
    if special_tokens is None:
        special_tokens = dict(tokenizer.vocab.special_tokens)
    return tiktoken.Encoding(
        f"{name}_oracle",
        pat_str=pattern,
        mergeable_ranks=tiktoken.load.load_tiktoken_bpe(str(path)),
        special_tokens=special_tokens,
    )


# ---------------------------------------------------------------------------------------------
# Raw bytes (invalid UTF-8 included). Policy (ffi/pretok/tables.h): each byte not covered by a
# valid shortest-form UTF-8 sequence is one code point of an ordinary symbol class; BPE runs on
# the raw bytes. The oracles split the text in which each such byte is a private-use character
# (pua_view), map the pieces back to raw byte ranges and BPE-encode each with the reference.


def pua_view(raw: bytes) -> tuple[str, list[int]]:
    """(text, offsets): `raw` as text in which every byte not covered by a valid shortest-form
    UTF-8 sequence is one private-use character (U+E080..U+E0FF, class Co, a symbol);
    offsets[i] is the raw byte offset of character i (one extra entry: len(raw)).

    Python's decoder with surrogateescape turns exactly those bytes into U+DC80..U+DCFF, one
    per byte (its error ranges are maximal subparts: a lead byte then continuation bytes,
    none of which can start a valid sequence)."""
    import numpy as np

    cps = np.frombuffer(
        raw.decode("utf-8", "surrogateescape").encode("utf-32-le", "surrogatepass"), np.uint32
    )
    escaped = (cps >= 0xDC80) & (cps <= 0xDCFF)
    widths = np.where(escaped, 1, 1 + (cps >= 0x80) + (cps >= 0x800) + (cps >= 0x10000))
    offsets = np.zeros(len(cps) + 1, np.int64)
    np.cumsum(widths, out=offsets[1:])
    assert offsets[-1] == len(raw)
    text = np.where(escaped, cps - 0xDC00 + 0xE000, cps).astype("<u4").tobytes().decode("utf-32-le")
    return text, offsets.tolist()


def split_at_specials(raw: bytes, specials) -> list[bytes | str]:
    """`raw` cut at the special tokens `specials` (strings; the longest first where two start
    at the same byte): the ordinary byte spans (non-empty) and the specials (as str), in order."""
    import regex

    if not specials:
        return [raw] if raw else []
    alternatives = sorted((s.encode("utf-8") for s in specials), key=len, reverse=True)
    out: list[bytes | str] = []
    pos = 0
    for m in regex.finditer(b"|".join(map(regex.escape, alternatives)), raw):
        if m.start() > pos:
            out.append(raw[pos : m.start()])
        out.append(m.group().decode("utf-8"))
        pos = m.end()
    if pos < len(raw):
        out.append(raw[pos:])
    return out


def tiktoken_raw_ids(enc, raw: bytes, specials=()) -> list[int]:
    """tiktoken's ids for raw bytes under the invalid-UTF-8 policy, `specials` recognised: the
    pattern's pieces found by Python's `regex` in the private-use view (as tiktoken's own
    `_encode_only_native_bpe` splits), each piece's raw bytes encoded by `_encode_single_piece`.
    With pattern `(?s:.+)` (BYTES_MODE_PATTERN) this is bytes mode. Linear in the length
    (tests/fuzz_oracles.py has an O(n^3) version that reads tiktoken's own split)."""
    import regex

    pattern = regex.compile(enc._pat_str)
    out: list[int] = []
    for span in split_at_specials(raw, specials):
        if isinstance(span, str):
            out.append(enc._special_tokens[span])
            continue
        text, offsets = pua_view(span)
        text = _as_tiktoken_classes(text)
        for m in pattern.finditer(text):
            out.extend(enc._encode_single_piece(span[offsets[m.start()] : offsets[m.end()]]))
    return out


_TIKTOKEN_ASSIGNED: dict[str, bool] = {}


def _as_tiktoken_classes(text: str) -> str:
    """`text` with each code point that tiktoken's regex engine calls unassigned replaced by
    U+E000 (private use: for every pattern here the same classes as unassigned): Python's
    `regex`, which splits for the oracle, may know a newer Unicode version than tiktoken."""
    from .pretok import versions

    wide = {ch for ch in text if ch >= "\x80"}
    new = [ch for ch in wide if ch not in _TIKTOKEN_ASSIGNED]
    if new:
        assigned = versions.assigned_in("tiktoken", "".join(new))
        _TIKTOKEN_ASSIGNED.update((ch, ord(ch) in assigned) for ch in new)
    gone = [ch for ch in wide if not _TIKTOKEN_ASSIGNED[ch]]
    return text.translate({ord(ch): "\ue000" for ch in gone}) if gone else text


def hf_raw_ids(hf, special_ids, raw: bytes, mode: str) -> list[int]:
    """HF tokenizers' ids (`hf`: a byte-level BPE Tokenizer without a normalizer) for raw bytes
    under the invalid-UTF-8 policy: HF finds its added tokens (ids `special_ids`) and, in exact
    mode, its pre-tokenizer pieces in the private-use view; its BPE model encodes each piece's
    raw bytes (bytes mode: each whole span between added tokens)."""
    from .vocab import bytes_to_unicode

    byte_level = bytes_to_unicode()  # byte -> character: a str.translate table for latin-1 text
    text, offsets = pua_view(raw)
    out: list[int] = []

    def ordinary(a: int, b: int):
        if a >= b:
            return
        spans = (
            [(b0, e0) for _, (b0, e0) in hf.pre_tokenizer.pre_tokenize_str(text[a:b])]
            if mode == "exact"
            else [(0, b - a)]
        )
        for s, e in spans:
            piece = raw[offsets[a + s] : offsets[a + e]]
            out.extend(t.id for t in hf.model.tokenize(piece.decode("latin-1").translate(byte_level)))

    pos = 0
    enc = hf.encode(text, add_special_tokens=False)
    for token_id, (s, e) in zip(enc.ids, enc.offsets):
        if token_id in special_ids:
            ordinary(pos, s)
            out.append(token_id)
            pos = e
    ordinary(pos, len(text))
    return out


# The contractions the pre-tokenizers' patterns single out ('s 't 're 've 'm 'll 'd), in both cases.
CONTRACTIONS = ["'s", "'S", "'ll", "'LL", "'ve", "'Re", "'d", "'m", "'t"]
# Fragments that stress pre-tokenizers: scripts, case, digits of several kinds, whitespace
# runs, contractions (also with U+2019 and U+017F), punctuation, emoji, combining marks.
TEXT_FRAGMENTS = [
    "hello",
    "Hello",
    "HELLO",
    "hELLo",
    "Привет",
    "日本語",
    "مرحبا",
    "नमस्ते",
    "ǅungla",
    "ʰmod",
    "ﬁne",
    "Straße",
    "ΣΊΣΥΦΟΣ",
    "1",
    "12",
    "123",
    "1234567",
    "٣٤٥",
    "½",
    "Ⅻ",
    "3.14",
    "1,000",
    " ",
    "  ",
    "   ",
    "\t",
    "\n",
    "\n\n",
    "\r\n",
    "\r",
    " \n ",
    "\u00a0",
    "\u3000",
    "\u2028",
    "\x0b",
    "\x0c",
    "\u0085",
    *CONTRACTIONS,
    "'",
    "''",
    "’s",
    "'ſ",
    "don't",
    "I'M",
    ".",
    ",",
    "!?",
    "...",
    "/",
    "//",
    "@#$",
    "(",
    ")",
    "-",
    "—",
    "«»",
    "🎉",
    "👩‍👩‍👧",
    "🇯🇵",
    "❤️",
    "e\u0301",
    "\u0301",
    "a\u0308\u0323",
    "\u200d",
]


def mixed_text(specials=()):
    """A hypothesis strategy for text mixing TEXT_FRAGMENTS, arbitrary Unicode and `specials`."""
    from hypothesis import strategies as st

    pieces = st.sampled_from(TEXT_FRAGMENTS) | st.text(max_size=6)
    if specials:
        pieces = pieces | st.sampled_from(sorted(specials))
    return st.lists(pieces, max_size=48).map("".join)


def _base64_text(rng, n):
    import base64

    return base64.b64encode(rng.randbytes(n * 3 // 4))


def letters_runs(rng, n: int, tile: int = 4096) -> bytes:
    """One letter piece: random letters a-j with a run of 600 "z" across every tile boundary
    of the piece (benchmarks/span_stitch.py): the run's phase differs between spans that
    start before it and in it, so a boundary often has no shared token in the first round of
    the stitched spans (ffi/cuda/huge_pieces.cuh)."""
    text = bytes(rng.choice(b"abcdefghij") for _ in range(tile - 300))
    while len(text) < n:
        text += b"z" * 600 + bytes(rng.choice(b"abcdefghij") for _ in range(tile - 600))
    return text[:n]


# Adversarial single strings of about n bytes (rng: a random.Random): one pre-tokenizer piece
# of the whole string (one letter, letters a-j, spaces, CJK, emoji) or very many short ones.
ADVERSARIAL = {
    "one_letter": lambda rng, n: b"a" * n,
    "letters_a_j": lambda rng, n: bytes(rng.choice(b"abcdefghij") for _ in range(n)),
    "spaces": lambda rng, n: b" " * n,
    "digits": lambda rng, n: bytes(rng.choice(b"0123456789") for _ in range(n)),
    "whitespace_newlines": lambda rng, n: bytes(rng.choice(b" \t\n\r") for _ in range(n)),
    "cjk": lambda rng, n: "".join(chr(rng.randint(0x4E00, 0x9FFF)) for _ in range(n // 3)).encode(),
    "emoji": lambda rng, n: "".join(chr(rng.randint(0x1F300, 0x1F64F)) for _ in range(n // 4)).encode(),
    "base64": _base64_text,
    "apostrophes": lambda rng, n: bytes(rng.choice(b"'sS tl") for _ in range(n)),
}


def corpus_rows(data_dir, batch: int, width: int) -> list[str]:
    """`batch` excerpts of 1..width - 3 bytes from every shared corpus under data_dir, in turn."""
    pools = [excerpts(read_corpus(p), 1, width - 3, seed=k) for k, p in enumerate(corpus_paths(data_dir))]
    rows = []
    for k in range(batch):
        pool = pools[k % len(pools)]
        rows.append(pool[k // len(pools) % len(pool)].decode("utf-8", "ignore"))
    return rows
