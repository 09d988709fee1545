"""Test helpers: tokenizers and oracles loaded once per session, backends to run on, batched
comparison.

Other shared test code lives by topic: strategies.py (hypothesis settings and text),
synthetic.py (small vocabulary files and HF pre-tokenizer configurations), pretok_shim.py (the
C++ pre-tokenizer and its piece oracles), raw_oracles.py (oracles for invalid UTF-8), families.py
(tokenizer files of other model families). Fixtures are in conftest.py.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pytest
import regex

import blockbpe_jax as bb
from blockbpe_jax import testing
from blockbpe_jax._data import find_data_dir
from blockbpe_jax.tables.build import build_vocab_tables
from blockbpe_jax.vocab import Vocab, load_tiktoken_file, load_tokenizer_json

FORMATS = ("tiktoken", "json")
REPO = Path(__file__).resolve().parents[1]


def compile_cpp(source: str, out: Path, *flags: str) -> subprocess.CompletedProcess:
    """tests/cpp/<source> compiled to `out` by $CXX or g++ (C++17, ffi/ on the include path,
    then `flags`); skips the calling test without a compiler. The caller checks the result."""
    cxx = os.environ.get("CXX") or shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip(f"no C++ compiler (g++) to build tests/cpp/{source}")
    cmd = [
        cxx,
        "-std=c++17",
        "-I",
        str(REPO / "ffi"),
        *flags,
        str(REPO / "tests" / "cpp" / source),
        "-o",
        str(out),
    ]
    return subprocess.run(cmd, capture_output=True, text=True)


def compile_sanitized(source: str, out: Path, sanitizers: str) -> Path:
    """compile_cpp with -fsanitize=`sanitizers` (and -O1 -g -pthread, no recovery); skips the
    calling test where the compiler has no runtime for them, fails it on any other error."""
    flags = ("-O1", "-g", "-pthread", f"-fsanitize={sanitizers}", "-fno-sanitize-recover=all")
    built = compile_cpp(source, out, *flags)
    if built.returncode != 0 and "sanitize" in built.stderr and "cannot find" in built.stderr:
        pytest.skip(f"this compiler has no {sanitizers} sanitizer runtime: {built.stderr.strip()[:200]}")
    assert built.returncode == 0, built.stderr
    return out


def unicodedata16():
    """The unicodedata2 module at Unicode 16.0 (the tables' version: the NFC oracle of the
    normalizer tests), or the test is skipped saying what to install."""
    try:
        import unicodedata2
    except ImportError:
        pytest.skip("unicodedata2 not installed (pip install unicodedata2==16.0.0)")
    if unicodedata2.unidata_version != "16.0.0":
        pytest.skip(f"unicodedata2 is Unicode {unicodedata2.unidata_version}, need 16.0.0")
    return unicodedata2


CPU = jax.devices("cpu")[0]
# BLOCKBPE_FULL=1: every corpus whole and more generated examples (slow).
FULL = os.environ.get("BLOCKBPE_FULL", "") not in ("", "0")


@functools.cache
def benchmark_module(name: str):
    """benchmarks/<name>.py as a module, in sys.modules as `name` (dataclasses look there; the
    benchmarks import each other by that name)."""
    spec = importlib.util.spec_from_file_location(name, REPO / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def gpu_devices() -> list:
    try:
        return jax.devices("gpu")
    except RuntimeError:
        return []


# (device kind, block size) combinations: the CPU once, the GPU with every block size.
BACKENDS = [pytest.param(("cpu", 256), id="cpu")] + [
    pytest.param(
        ("gpu", bs),
        id=f"gpu{bs}",
        marks=pytest.mark.skipif(not gpu_devices(), reason="no GPU visible to JAX"),
    )
    for bs in (256, 512, 1024)
]


def device_for(kind: str):
    return jax.devices("cpu")[0] if kind == "cpu" else gpu_devices()[0]


def load_tokenizer(name: str, fmt: str) -> bb.Tokenizer:
    """A shared vocabulary (loaded once); skips the calling test when the data is absent."""
    if find_data_dir() is None:
        pytest.skip("shared data not found: set BLOCKBPE_DATA or place it at <repo>/../shared/data")
    vocab_path(name, fmt)
    return _load_tokenizer(name, fmt)


def vocab_path(name: str, fmt: str = "tiktoken"):
    """The shared vocabulary file `name` in format `fmt` ("tiktoken" or "json"); skips the
    calling test when the shared data or that file is absent."""
    if find_data_dir() is None:
        pytest.skip("shared data not found: set BLOCKBPE_DATA or place it at <repo>/../shared/data")
    path = testing.data_dir() / "vocab" / testing.VOCAB_FILES[name][FORMATS.index(fmt)]
    if not path.is_file():
        pytest.skip(f"vocabulary file absent from the shared data: {path}")
    return path


@functools.lru_cache(maxsize=None)
def _load_tokenizer(name: str, fmt: str) -> bb.Tokenizer:
    return bb.Tokenizer.from_file(vocab_path(name, fmt))


@functools.lru_cache(maxsize=None)
def oracle(name: str, fmt: str, pattern: str):
    return testing.tiktoken_oracle(name, load_tokenizer(name, fmt), pattern)


def mismatches(
    tok: bb.Tokenizer,
    texts: list[bytes],
    refs: list[list[int]],
    *,
    device,
    mode: str,
    block_size: int = 256,
    allowed_special="none",
    batch: int = 256,
    max_len: int | None = None,
) -> list[tuple[int, list[int], list[int]]]:
    """Encodes `texts` in batches and returns (index, ours, reference) for every difference."""
    bad = []
    max_len = max_len or max(16, max(len(t) for t in texts))
    for start in range(0, len(texts), batch):
        chunk = texts[start : start + batch]
        ids, counts = tok.encode_batch(
            chunk,
            max_len=max_len,
            mode=mode,
            block_size=block_size,
            allowed_special=allowed_special,
            device=device,
        )
        ids, counts = np.asarray(ids), np.asarray(counts)
        for k, ref in enumerate(refs[start : start + batch]):
            ours = ids[k, : counts[k]].tolist()
            if counts[k] != len(ref) or ours != ref:
                bad.append((start + k, ours, ref))
    return bad


@functools.lru_cache(maxsize=None)
def tiktoken_enc(name: str, mode: str):
    """tiktoken over the vocabulary's ranks and specials: the real pattern, or (?s:.+)."""
    tok = load_tokenizer(name, "tiktoken")
    return oracle(name, "tiktoken", tok.vocab.pattern if mode == "exact" else testing.BYTES_MODE_PATTERN)


@functools.lru_cache(maxsize=None)
def hf_tokenizer(name: str):
    """HF tokenizers on the shared tokenizer.json of `name` (one instance: do not reconfigure it)."""
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(vocab_path(name, "json")))


def specials_of(name: str, fmt: str) -> list[str]:
    return sorted(load_tokenizer(name, fmt).vocab.special_tokens)


# ---------------------------------------------------------------------------------------------
# The loader's own view of the shared files (tests of blockbpe_jax.vocab and .tables)
# ---------------------------------------------------------------------------------------------

VOCAB_CASES = {
    "r50k": ("tiktoken/r50k_base.tiktoken", "r50k"),
    "p50k": ("tiktoken/p50k_base.tiktoken", "r50k"),
    "cl100k": ("tiktoken/cl100k_base.tiktoken", "cl100k"),
    "o200k": ("tiktoken/o200k_base.tiktoken", "o200k"),
    "llama3": ("llama3/tokenizer.model", "llama3"),
    "gpt2_hf": ("gpt2/tokenizer.json", "r50k"),
    # The HF port of cl100k carries the pre-2024 cl100k regex, which is Llama 3's (see vocab/patterns.py).
    "cl100k_hf": ("cl100k_hf/tokenizer.json", "llama3"),
    "o200k_hf": ("o200k_hf/tokenizer.json", "o200k"),
    "llama3_hf": ("llama3/tokenizer.json", "llama3"),
}
# (tiktoken-format name, tokenizer.json name) of the same vocabulary
SAME_VOCAB = [("r50k", "gpt2_hf"), ("cl100k", "cl100k_hf"), ("o200k", "o200k_hf"), ("llama3", "llama3_hf")]


@functools.cache
def load_vocab(data_dir: Path, name: str) -> Vocab:
    path = data_dir / "vocab" / VOCAB_CASES[name][0]
    return load_tokenizer_json(path) if path.suffix == ".json" else load_tiktoken_file(path)


@functools.cache
def vocab_tables(data_dir: Path, name: str):
    return build_vocab_tables(load_vocab(data_dir, name))


# ---------------------------------------------------------------------------------------------
# The piece table's hash, restated


def piece_hash_reference(key: bytes) -> int:
    """piece_hash restated in plain Python ints. Keys of up to 16 bytes: their bytes 0-7 and
    8-15 as little-endian words lo and hi (zero-padded), x = lo * C1 ^ hi * C2 (mod 2**64),
    x ^= x >> 32, then the high word of x * C3, the length mixed in; longer keys: 32-bit FNV-1a
    (the FNV authors' algorithm). Also the cheap stand-in for piece_hash in exhaustive lookups
    (probing_with_reference_hash): the real one hashes a single key through the vectorised
    builder, ~0.1 ms a call, ~25 s over o200k's tokens."""
    if len(key) <= 16:
        padded = key.ljust(16, b"\x00")
        lo, hi = int.from_bytes(padded[:8], "little"), int.from_bytes(padded[8:], "little")
        x = (lo * 0x9E3779B97F4A7C15 ^ hi * 0xC2B2AE3D27D4EB4F) % 2**64
        x ^= x >> 32
        return (x * 0x165667B19E3779F9 % 2**64 >> 32) ^ (len(key) * 0x85EBCA6B % 2**32)
    h = 0x811C9DC5
    for b in key:
        h = ((h ^ b) * 0x01000193) % 2**32
    return h


@contextlib.contextmanager
def probing_with_reference_hash():
    """tables.probe.lookup_piece hashing with piece_hash_reference: the same probe, an
    independent hash (a table the builder's vectorised hash placed is found only where the two
    agree); tests/tables/test_vocab_tables.py checks piece_hash against it on every vocabulary."""
    from blockbpe_jax.tables import probe

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(probe, "piece_hash", piece_hash_reference)
        yield


@functools.cache
def sample_text(data_dir: Path) -> str:
    """A mix of prose, code and non-Latin text, to draw pre-tokenized pieces from."""
    corpus = data_dir / "corpus"
    prose = (corpus / "war_and_peace_en.txt").read_text(encoding="utf-8")[20_000:40_000]
    code = gzip.open(corpus / "code_python_stdlib.py.txt.gz", "rb").read(30_000).decode("utf-8", "ignore")
    other = (
        "Привет, мир! Он сказал: «нет». 你好，世界。東京タワーに行きました。 مرحبا بالعالم "
        "Ελληνικά κείμενα 😀🎉👍🏽 naïve café ſtraße I'M HE'S they'RE  \t\r\n\n  \u00a0x\u2003y "
        "1234567 3.14159 ١٢٣ ⅧⅫ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 \x00\x01\x7f"
    )
    return prose + code + other


def pieces(vocab: Vocab, text: str, limit: int) -> list[bytes]:
    """Distinct pre-tokenized pieces (python `regex` stands in for the pre-tokenizer here)."""
    seen = dict.fromkeys(m.encode("utf-8") for m in regex.findall(vocab.pattern, text))
    return list(seen)[:limit]


# ---------------------------------------------------------------------------------------------
# Texts and comparison for the tokenizer families
# ---------------------------------------------------------------------------------------------


def corpus_texts(data_dir: Path, per_corpus: int, seed: int) -> list[str]:
    texts = []
    for k, path in enumerate(testing.corpus_paths(data_dir)):
        raw = testing.read_corpus(path)
        texts += [t.decode("utf-8") for t in testing.excerpts(raw, 1, 8192, seed=seed + k)[:per_corpus]]
    return texts


MIXED = [
    "Hello 12345 world日本語のテキスト、カタカナ。ひらがな 中文123汉字 'll x's don't\n\n  y \t\u3000z",
    "!!?? a-b $5.00 é e\u0301 ٣٤٥ 𝟘𝟙 \U0001f600\U0001f44d\U0001f3fd x\u200dy",
    "x\n  ",
    " ",
    "",
    "abc123def4567 日本123語 '''s #!a [b] \r\n\r\n   x",
    "ΑΒΓ αβγ Привет мир مرحبا नमस्ते 가나다",
    "   leading and trailing   ",
    "1234567890123",
    "a.b,c!d?e",
    "\t\n\r\x0b\x0c",
]


def ours(tok, texts, mode="exact", backend=("cpu", 256), allowed_special="none"):
    ids, counts = tok.encode_batch(
        texts,
        device=device_for(backend[0]),
        mode=mode,
        allowed_special=allowed_special,
        block_size=backend[1],
        max_tokens=max(8, max(len(t if isinstance(t, bytes) else t.encode()) for t in texts) + 2),
    )
    ids, counts = np.asarray(ids), np.asarray(counts)
    return [ids[i, : counts[i]].tolist() for i in range(len(texts))]


def encode_raw(tok, texts, backend=("cpu", 256), allowed_special="all"):
    """(ids, counts) as NumPy arrays from the primitive itself on raw UTF-8 (no host
    normalization: what `bb.encode` does with bytes it is handed), T = width + 2."""
    dev = device_for(backend[0])
    data, lengths = bb.pack_strings(texts, max_len=max(16, max(len(t.encode()) for t in texts)))
    out = bb.encode(
        jax.device_put(data, dev),
        jax.device_put(lengths, dev),
        tok,
        max_tokens=data.shape[1] + 2,
        block_size=backend[1],
        allowed_special=allowed_special,
    )
    return np.asarray(out.ids), np.asarray(out.counts)


def assert_same(tok, texts, reference, backend=("cpu", 256), allowed_special="none"):
    got = ours(tok, texts, backend=backend, allowed_special=allowed_special)
    for text, g in zip(texts, got):
        want = reference(text)
        assert g == want, (
            f"{tok.vocab.name}: first difference at token "
            f"{next((i for i, (a, b) in enumerate(zip(g, want)) if a != b), min(len(g), len(want)))} "
            f"of {text[:120]!r}"
        )


# ---------------------------------------------------------------------------------------------
# Our tiktoken-style view next to tiktoken
# ---------------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def _pair(name: str):
    tok = load_tokenizer(name, "tiktoken")
    return tok.as_tiktoken(), tiktoken_enc(name, "exact")


def pair(name: str):
    pytest.importorskip("tiktoken")
    return _pair(name)


def custom_pickle_encoding():
    """tiktoken's test_pickle Encoding: r50k's ranks and pattern + `<|pickle|>` at 100000, so
    no `<|endoftext|>` and a hole of ids between the ranks and the special."""
    tiktoken = pytest.importorskip("tiktoken")
    _, r50k = pair("r50k")
    return tiktoken.Encoding(
        name="custom_enc",
        pat_str=r50k._pat_str,
        mergeable_ranks=r50k._mergeable_ranks,
        special_tokens={"<|pickle|>": 100_000},
    )


def outcome(fn, enc):
    try:
        return ("ok", fn(enc))
    except Exception as e:  # noqa: BLE001 - compared below
        return ("raise", type(e), str(e) if isinstance(e, ValueError) else None)


def same(name: str, fn):
    """fn on our view and on tiktoken: equal results, or the same exception (same message for
    ValueError). Returns our result."""
    ours, ref = pair(name)
    a, b = outcome(fn, ours), outcome(fn, ref)
    assert a == b, f"{name}: ours {a!r} != tiktoken {b!r}"
    if a[0] == "raise":
        raise a[1](a[2] or "raised")
    return a[1]


def both(name: str):
    return pair(name)


# Texts that stress SentencePiece BPE: whitespace runs (the tie group sentencepiece breaks by
# position), edge cases, runs of one character.
SPACES = [
    " " * k + tail
    for k in (1, 2, 3, 13, 14, 15, 16, 17, 18, 29, 30, 31, 32, 33, 45, 100, 1000, 4000)
    for tail in ("", "x", "\n")
]

EDGES = [
    "",
    " ",
    "  a",
    "a\u2581b",
    "\u2581",
    "\x01\x02",
    "\ufffd",
    "\U0001f600 \U0001f44d\U0001f3fd",
    "\t\tindent\n    four\n        eight",
    "x" * 300,
    "ab" * 200,
    "1234567890" * 5,
]

RUNS = [
    pre + ch * k + post
    for ch in "-=#*._~0\t\u2500\u2581 "
    for k in (1, 2, 3, 7, 15, 16, 17, 31, 33, 64, 65, 257)
    for pre, post in (("", ""), ("a ", "b"), (" ", "\n"))
]


def packed_segments(tokens, segment_ids, positions):
    """Each row's segments, left to right, checking the layout's invariants on the way."""
    out = []
    for r in range(tokens.shape[0]):
        seg, row = segment_ids[r], []
        live = int((seg > 0).sum())
        assert (seg[:live] > 0).all() and (seg[live:] == 0).all(), "padding only at the end"
        assert (positions[r, live:] == 0).all()
        for s in range(1, int(seg.max(initial=0)) + 1):
            where = np.flatnonzero(seg == s)
            assert where.size and (np.diff(where) == 1).all(), "a segment is one run"
            assert (positions[r, where] == np.arange(where.size)).all()
            row.append(tokens[r, where].tolist())
        out.append(row)
    return out


def encode_argv(src, out, vocab, *options) -> list[str]:
    """The command line `encode SRC -o OUT --vocab VOCAB OPTIONS... -q` (for cli.main)."""
    return [str(a) for a in ("encode", src, "-o", out, "--vocab", vocab, *options, "-q")]


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def may_cross_special(tok, text: str, allowed="all") -> bool:
    """Whether the CUDA pre-pass finds that rewriting the row to NFC may cross a special of the
    call, and so reports it (ffi/cuda/nfc_prepass.cuh, nfc_rewrite_may_cross_special): a
    special with a byte that is not ASCII or is one NFC writes for another code point (';',
    '`', 'K'), or a special's last byte before a code point whose decomposition starts with a
    mark or with one that composes with that byte."""
    ud = unicodedata16()
    specials = [s.encode() for s in tok._special_key(allowed)]
    if any(max(s) >= 0x80 or set(s) & set(b";`K") for s in specials):
        return True
    ends = {chr(s[-1]) for s in specials}
    for a, b in zip(text, text[1:]):
        if a in ends and ord(b) >= 0x80:
            first = ud.normalize("NFD", b)[0]
            if ud.combining(first) or ud.normalize("NFC", a + first) != a + first:
                return True
    return False


def documented_over_report(text: str) -> bool:
    """The one kind of NFC string the device check reports (ffi/pretok/nfc.h, kCccTrail): a
    mark that may compose (quick check Maybe) whose last unblocked starter decomposes to marks."""
    from blockbpe_jax.pretok import unicode as uni

    qc, ccc, trail = uni.nfc_quick_check(), uni.ccc(), uni.nfc_trail()
    cps = [ord(ch) for ch in text]
    for i, c in enumerate(cps):
        if qc[c] != 1:
            continue
        j = i - 1
        while j >= 0 and ccc[cps[j]] != 0 and 0 < ccc[cps[j]] < ccc[c]:
            j -= 1
        if j >= 0 and ccc[cps[j]] == 0 and trail[cps[j]] and (ccc[c] != 0 or j == i - 1):
            return True
    return False
