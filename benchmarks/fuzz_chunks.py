"""The fuzz campaign's host work (benchmarks/fuzz_campaign.py), spread over a pool of
processes: a chunk of a family's strings generated and its references computed.

A family's strings are cut into chunks of CHUNK strings. Chunk c of family `key` is generated
by fuzz_strings.StringSource built from family_seed(seed, key) and restarted at
chunk_seed(seed, key, c): string c * CHUNK + k depends on (seed, key, c, k) alone, whichever
process makes it and whatever ran before, so a mismatch is reproduced by `chunk_strings`. Each
string's variant (fuzz_families.Variant: mode, allowed specials, invalid UTF-8) is drawn by
share from the same generator.

The references are the campaign's bottleneck (HF tokenizers, tiktoken and the invalid-UTF-8
oracles in Python cost far more a string than making it), and a reference library's own threads scale
poorly on short strings, so each pool process runs them on one thread (RAYON_NUM_THREADS=1,
tiktoken with num_threads=1) and the pool spreads chunks over the cores. A chunk comes back as
groups, one per (variant, width): the strings, the references' token counts and their ids
end to end (int32), which the campaign packs into device batches and compares on the device.
"""

from __future__ import annotations

import dataclasses
import itertools
import pathlib
import time
import zlib

import numpy as np

import fuzz_strings
from blockbpe_jax import testing
from fuzz_families import Family, load_family

CHUNK = 2048  # strings of a chunk: part of every string's identity (see chunk_seed)
# Row widths of the device batches: a string goes in the narrowest that holds it.
WIDTHS = (64, 256, 1024, 4096, 16384, fuzz_strings.MAX_LEN)
# The environment of a pool process: references on one thread, JAX (imported with the
# campaign's modules, never used there) kept off the GPU.
WORKER_ENV = {
    "RAYON_NUM_THREADS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "OMP_NUM_THREADS": "1",
    "JAX_PLATFORMS": "cpu",
}


def family_seed(seed: int, key: str) -> int:
    """The seed of family `key`'s string pools."""
    return seed * 1_000_003 + zlib.crc32(key.encode())


def chunk_seed(seed: int, key: str, chunk: int) -> int:
    """The seed of chunk `chunk` of family `key`: its variants, lengths and slices."""
    return (family_seed(seed, key) << 32) ^ (chunk * 0x9E3779B1 + 1)


def width_of(n: int) -> int:
    """The narrowest of WIDTHS that holds `n` bytes."""
    return next(w for w in WIDTHS if n <= w)


def chunk_strings(family: Family, source: fuzz_strings.StringSource, seed: int, chunk: int, count: int):
    """Chunk `chunk`'s first `count` strings of `family` (a chunk has CHUNK; the last one of a
    family may have fewer, a prefix of the full chunk): [(variant index, bytes)]."""
    source.restart(chunk_seed(seed, family.key, chunk))
    indices, shares = range(len(family.variants)), [v.share for v in family.variants]
    out = []
    for _ in range(count):  # a variant, then its string: any prefix of a chunk is the same
        p = source.rng.choices(indices, shares)[0]
        out.append((p, source.draw(invalid=family.variants[p].invalid)))
    return out


@dataclasses.dataclass
class Group:
    """The strings of one chunk that share a variant and a width, with their references."""

    variant: str
    width: int
    index: np.ndarray  # int64: each string's number in its family (chunk * CHUNK + k)
    strings: list[bytes]
    ref_counts: np.ndarray  # int32: each string's number of reference tokens
    ref_ids: np.ndarray  # int32: the reference tokens of every string, end to end


@dataclasses.dataclass
class Chunk:
    """A chunk's result: its groups and the core-seconds spent on it."""

    key: str
    chunk: int
    groups: list[Group]
    generate_s: float
    reference_s: dict  # variant name -> seconds


# ---------------------------------------------------------------------------------------------
# the pool process's side

_STATE: dict = {}  # root, corpora, and the families loaded in this process (the last few)
_KEEP_FAMILIES = 2


def init_worker(root: str) -> None:
    """A pool process's initializer (the pool is started with WORKER_ENV in its environment):
    the shared data's root and its corpora."""
    _STATE["root"] = pathlib.Path(root)
    _STATE["corpora"] = [testing.read_corpus(p) for p in testing.corpus_paths(_STATE["root"])]
    _STATE["families"] = {}


def _family(key: str, seed: int):
    """(Family, StringSource) of `key` in this process, loaded once (None: not there)."""
    families = _STATE["families"]
    if (key, seed) not in families:
        while len(families) >= _KEEP_FAMILIES:
            del families[next(iter(families))]
        family = load_family(_STATE["root"], key, threads=1)
        source = (
            None
            if family is None
            else fuzz_strings.StringSource(family_seed(seed, key), family.specials, _STATE["corpora"])
        )
        families[(key, seed)] = (family, source)
    return families[(key, seed)]


def run_chunk(key: str, seed: int, chunk: int, count: int) -> Chunk:
    """Generates chunk `chunk` of family `key` (`count` strings) and computes its references."""
    family, source = _family(key, seed)
    if family is None:
        raise RuntimeError(f"family {key}: its files or packages are not there in a pool process")
    t0 = time.perf_counter()
    drawn = chunk_strings(family, source, seed, chunk, count)
    generate_s = time.perf_counter() - t0
    by_key: dict = {}
    for k, (p, s) in enumerate(drawn):
        by_key.setdefault((p, width_of(len(s))), []).append((chunk * CHUNK + k, s))
    groups, reference_s = [], {}
    for (p, width), items in sorted(by_key.items()):
        variant = family.variants[p]
        strings = [s for _, s in items]
        t = time.perf_counter()
        refs = variant.reference(strings)
        reference_s[variant.name] = reference_s.get(variant.name, 0.0) + time.perf_counter() - t
        counts = np.fromiter(map(len, refs), np.int32, len(refs))
        flat = np.fromiter(itertools.chain.from_iterable(refs), np.int32, int(counts.sum()))
        index = np.fromiter((i for i, _ in items), np.int64, len(items))
        groups.append(Group(variant.name, width, index, strings, counts, flat))
    return Chunk(key, chunk, groups, generate_s, reference_s)


def regenerate(root: pathlib.Path, key: str, seed: int, string: int) -> tuple[str, bytes]:
    """String number `string` of family `key` under `seed`, and its variant's name, made again
    (as a campaign's JSON names a mismatch): the reproducer, in this process."""
    family = load_family(root, key, threads=1)
    corpora = [testing.read_corpus(p) for p in testing.corpus_paths(root)]
    source = fuzz_strings.StringSource(family_seed(seed, key), family.specials, corpora)
    chunk, k = divmod(string, CHUNK)
    p, s = chunk_strings(family, source, seed, chunk, k + 1)[k]
    return family.variants[p].name, s
