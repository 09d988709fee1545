"""Checks the item-2 design on the CPU: BPE of one long piece from overlapping windows.

    python3 benchmarks/window_stitch.py [--out DIR] [--vocabs cl100k o200k r50k]

Every 4096-byte tile of a piece gets a window (the tile and `margin` bytes either side,
clipped to the piece) that is BPE-encoded on its own; neighbouring windows are stitched at
their first shared token (same start, same id). Two valid encodings that share a token join
into a valid encoding of the union (rust-gems `bpe` README, Corollary III), and the valid
encoding of a text is unique, so a stitch that finds a shared token at every tile boundary is
exact; one that does not has to fall back to the whole piece. Each adversarial kind
(blockbpe_jax.testing.ADVERSARIAL) at 64 KiB and 1 MiB, each margin: whether every boundary
found a shared token, whether the result equals tiktoken's BPE of the piece, and how far into
the overlap (from the later window's start) the furthest shared token was. tiktoken with pattern (?s:.+) (one piece) is the
reference and encodes the windows. Writes DIR/window_stitch.json.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import random

import tiktoken
import tiktoken.load

from blockbpe_jax import testing

TILE = 4096


def piece_encoder(vocab: str) -> tiktoken.Encoding:
    path = testing.data_dir() / "vocab" / testing.VOCAB_FILES[vocab][0]
    ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    return tiktoken.Encoding(
        f"{vocab}_piece", pat_str=testing.BYTES_MODE_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


def spans(enc: tiktoken.Encoding, text: bytes, at: int) -> list[tuple[int, int]]:
    """(start, id) of each token of BPE(text), text starting at byte `at` of the piece."""
    out = []
    for t in enc._encode_bytes(text):  # (one piece: the pattern matches everything)
        out.append((at, t))
        at += len(enc.decode_single_token_bytes(t))
    return out


def stitch(enc, piece: bytes, margin: int):
    """(ids or None, index of the first boundary without a shared token, largest offset of a
    shared token into its overlap)."""
    n = len(piece)
    tiles = (n + TILE - 1) // TILE
    windows = []
    for t in range(tiles):
        lo, hi = max(0, t * TILE - margin), min(n, (t + 1) * TILE + margin)
        windows.append(spans(enc, piece[lo:hi], lo))
    ids, after, worst = [], 0, 0  # after: tokens of the output end here
    for t in range(tiles):
        mine = [x for x in windows[t] if x[0] >= after]
        if t + 1 == tiles:
            ids += [tok for _, tok in mine]
            break
        theirs = set(windows[t + 1])
        shared = next((k for k, x in enumerate(mine) if x in theirs), None)
        if shared is None:
            return None, t, worst
        ids += [tok for _, tok in mine[: shared + 1]]
        start, tok = mine[shared]
        worst = max(worst, start - max(0, (t + 1) * TILE - margin))
        after = start + len(enc.decode_single_token_bytes(tok))
    return ids, None, worst


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--vocabs", nargs="+", default=["cl100k", "o200k", "r50k"])
    ap.add_argument("--margins", nargs="+", type=int, default=[64, 128, 256, 512])
    args = ap.parse_args(argv)
    rows, bad = [], 0
    for vocab in args.vocabs:
        enc = piece_encoder(vocab)
        rng = random.Random(0)
        for kind, make in testing.ADVERSARIAL.items():
            for n in (64 * 1024, 1024 * 1024):
                piece = make(rng, n)
                ref = enc._encode_bytes(piece)
                for margin in args.margins:
                    ids, failed_at, worst = stitch(enc, piece, margin)
                    row = {
                        "vocab": vocab,
                        "kind": kind,
                        "bytes": len(piece),
                        "margin": margin,
                        "stitched": ids is not None,
                        "failed_boundary": failed_at,
                        "equal": ids == ref if ids is not None else None,
                        "max_sync_offset": worst,
                    }
                    bad += row["equal"] is False
                    rows.append(row)
                    print(json.dumps(row), flush=True)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "window_stitch.json").write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0  # a stitch that differs from BPE would refute the design


if __name__ == "__main__":
    raise SystemExit(main())
