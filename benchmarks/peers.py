"""CPU tokenizers a user would pick instead of blockbpe_jax, behind one small interface.

Each peer is a `Peer(name, encode, to_lists, version)`: `encode(list[str])` is the call that is
timed (the peer's own batch API, as fast as it is documented to go), `to_lists(result)` turns
its output into `list[list[int]]` for the exactness check against tiktoken. The calls are the
ones in ../shared/tools/peer_bench.py, which produced the numbers in ../shared/DESIGN.md:

- tiktoken         `Encoding.encode_ordinary_batch(texts, num_threads=N)`
- hf_tokenizers    `Tokenizer.encode_batch(texts, add_special_tokens=False)`
- gigatoken        `Tokenizer.from_tiktoken(path).encode_batch_padded(texts, pad_id=0)`
                   (one padded uint32 matrix + lengths); `encode_batch_list` as a second entry
- quicktok         `quicktok.get_encoding("cl100k_base").encode_batch(texts)` (flat ids +
                   offsets; bundled vocabulary, so cl100k only)
- tokie            `Tokenizer.from_json(tokenizer.json).encode_batch(texts, add_special_tokens=False)`

A peer that fails to import or to load is returned in `unavailable` with the reason; whether
its ids equal tiktoken's is decided by the caller on the benchmark inputs (see `check`).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from blockbpe_jax.testing import VOCAB_FILES
from blockbpe_jax.vocab import KNOWN_PATTERNS

# The reference tokenizer of each vocabulary: its rank file and tokenizer.json (testing.VOCAB_FILES),
# tiktoken's own pattern (vocab.KNOWN_PATTERNS), so it needs no network and no tiktoken_ext.
PATTERNS = {name: KNOWN_PATTERNS[name] for name in ("r50k", "cl100k")}
SPECIALS = {"r50k": {"<|endoftext|>": 50256}, "cl100k": {"<|endoftext|>": 100257}}
FILES = {name: VOCAB_FILES[name][:2] for name in ("r50k", "cl100k")}


@dataclass
class Peer:
    name: str
    encode: Callable[[list], Any]
    to_lists: Callable[[Any], list]
    version: str = "?"


@dataclass
class PeerSet:
    vocab: str
    threads: int
    reference: Any  # the tiktoken.Encoding whose ids are the truth
    peers: dict = field(default_factory=dict)  # name -> Peer (tiktoken included)
    unavailable: dict = field(default_factory=dict)  # name -> reason

    def reference_ids(self, texts: list) -> list:
        return [list(r) for r in self.reference.encode_ordinary_batch(texts, num_threads=self.threads)]


def _version(module) -> str:
    try:
        from importlib.metadata import version

        return version(module)
    except Exception:  # noqa: BLE001
        return "?"


def _rows_from_matrix(ids: np.ndarray, lengths) -> list:
    ids = np.asarray(ids)
    return [ids[i, : int(n)].tolist() for i, n in enumerate(np.asarray(lengths))]


def _rows_from_flat(flat: np.ndarray, offsets) -> list:
    flat = np.asarray(flat)
    offsets = np.asarray(offsets)
    return [flat[offsets[i] : offsets[i + 1]].tolist() for i in range(len(offsets) - 1)]


def _hf_style(name: str, tokenizer, version: str) -> Peer:
    """A peer with HF tokenizers' batch API (tokie has the same): encodings holding `.ids`."""
    return Peer(
        name,
        lambda xs: tokenizer.encode_batch(xs, add_special_tokens=False),
        lambda got: [e.ids for e in got],
        version,
    )


def reference_encoding(data_dir, vocab: str, pattern: str | None = None):
    """tiktoken over the shared rank file (no network), with the vocabulary's own pattern."""
    import tiktoken
    import tiktoken.load

    ranks = tiktoken.load.load_tiktoken_bpe(str(data_dir / "vocab" / FILES[vocab][0]))
    return tiktoken.Encoding(
        f"{vocab}_ref",
        pat_str=pattern or PATTERNS[vocab],
        mergeable_ranks=ranks,
        special_tokens=SPECIALS[vocab],
    )


def load(data_dir, vocab: str = "cl100k", threads: int | None = None, only: tuple | None = None) -> PeerSet:
    """Every peer that imports and loads here, for `vocab` ("cl100k" or "r50k")."""
    threads = threads or os.cpu_count() or 1
    # Rayon-based peers (gigatoken, tokie, HF) read this once, at their first parallel call.
    os.environ.setdefault("RAYON_NUM_THREADS", str(threads))
    tk_path = str(data_dir / "vocab" / FILES[vocab][0])
    hf_path = str(data_dir / "vocab" / FILES[vocab][1])
    ref = reference_encoding(data_dir, vocab)
    ps = PeerSet(vocab=vocab, threads=threads, reference=ref)
    as_lists = lambda got: [list(map(int, g)) for g in got]  # noqa: E731
    ps.peers["tiktoken"] = Peer(
        "tiktoken",
        lambda xs: ref.encode_ordinary_batch(xs, num_threads=threads),
        as_lists,
        _version("tiktoken"),
    )

    def want(name):
        return only is None or name in only

    if want("hf_tokenizers"):
        try:
            from tokenizers import Tokenizer as HFTokenizer

            hf = HFTokenizer.from_file(hf_path)
            ps.peers["hf_tokenizers"] = _hf_style("hf_tokenizers", hf, _version("tokenizers"))
        except Exception as e:  # noqa: BLE001
            ps.unavailable["hf_tokenizers"] = repr(e)[:300]
    if want("gigatoken") or want("gigatoken_padded"):
        try:
            import gigatoken

            gt = gigatoken.Tokenizer.from_tiktoken(tk_path)
            ver = _version("gigatoken")
            ps.peers["gigatoken_padded"] = Peer(
                "gigatoken_padded",
                lambda xs: gt.encode_batch_padded(xs, pad_id=0),
                lambda got: _rows_from_matrix(got[0], got[1]),
                ver,
            )
            ps.peers["gigatoken"] = Peer("gigatoken", lambda xs: gt.encode_batch_list(xs), as_lists, ver)
        except Exception as e:  # noqa: BLE001
            ps.unavailable["gigatoken"] = repr(e)[:300]
    if want("quicktok"):
        if vocab != "cl100k":
            ps.unavailable["quicktok"] = f"bundled vocabularies only; no {vocab}"
        else:
            try:
                import quicktok

                qt = quicktok.get_encoding("cl100k_base")
                ps.peers["quicktok"] = Peer(
                    "quicktok",
                    lambda xs: qt.encode_batch(xs),
                    lambda got: _rows_from_flat(got[0], got[1]),
                    _version("quicktok-v1"),
                )
            except Exception as e:  # noqa: BLE001
                ps.unavailable["quicktok"] = repr(e)[:300]
    if want("tokie"):
        try:
            import tokie

            tt = tokie.Tokenizer.from_json(hf_path)
            ps.peers["tokie"] = _hf_style("tokie", tt, _version("tokie"))
        except Exception as e:  # noqa: BLE001
            ps.unavailable["tokie"] = repr(e)[:300]
    return ps


def check(peer: Peer, texts: list, ref_ids: list) -> tuple[bool, str]:
    """(equal, detail): runs the peer once and compares every row with tiktoken's ids."""
    try:
        got = peer.to_lists(peer.encode(texts))
    except Exception as e:  # noqa: BLE001
        return False, f"error: {e!r}"[:300]
    if len(got) != len(ref_ids):
        return False, f"{len(got)} rows, expected {len(ref_ids)}"
    for i, (g, r) in enumerate(zip(got, ref_ids)):
        if list(g) != r:
            j = next((k for k, (a, b) in enumerate(zip(g, r)) if a != b), min(len(g), len(r)))
            return False, f"row {i} differs at token {j}: {list(g[j : j + 5])} vs {r[j : j + 5]}"
    return True, "ids equal to tiktoken's"


if __name__ == "__main__":  # smoke test: python benchmarks/peers.py
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from blockbpe_jax.testing import data_dir

    ps = load(data_dir())
    xs = ["Hello world, it's 2026!", "  multiple   spaces\n\nand lines", "Ünïcödé ½ 123456"]
    ref = ps.reference_ids(xs)
    for name, p in ps.peers.items():
        print(f"{name:18s} {p.version:10s}", *check(p, xs, ref))
    for name, why in ps.unavailable.items():
        print(f"{name:18s} unavailable: {why}")
