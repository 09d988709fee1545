"""Checks the item-2 design on the CPU: BPE of one long piece from overlapping spans.

    python3 benchmarks/span_stitch.py [--out DIR] [--vocabs cl100k o200k r50k]
        [--margins 64 128 256 512] [--offsets 0] [--align 1] [--prefixes ""] [--reach-back 0]
        [--tile 2048]

The piece starts `offset` bytes into its row (after `prefix`, which belongs to the piece).
The row's tiles (--tile bytes, kTileBytes) cut it into chunks; each chunk gets a span (the chunk and `margin`
bytes either side, clipped to the piece; its start rounded down to the piece's start plus a
multiple of `align`: ffi/core/span_stitch.h, stitch_span) that is BPE-encoded on its own;
neighbouring spans are stitched at their first shared token (same start, same id). Two
valid encodings that share a token join into a valid encoding of the union (rust-gems `bpe`
README, Corollary III), and the valid encoding of a text is unique, so a stitch that finds a
shared token at every tile boundary is exact; one that does not has to fall back to the whole
piece. Each adversarial kind (blockbpe_jax.testing.ADVERSARIAL) at 64 KiB and 1 MiB, each
margin, offset and prefix: whether every boundary found a shared token, whether the result
equals tiktoken's BPE of the piece, and how far into the overlap (from the later span's
start) the furthest shared token was. tiktoken with pattern (?s:.+) (one piece) is the
reference and encodes the spans. Writes DIR/span_stitch.json.

--reach-back R models a second round (not built on the GPU): at a boundary without a shared
token, the later span starts R bytes earlier (aligned as before) and the search is repeated;
only if that fails too is the piece merged whole. Two kinds beyond testing.ADVERSARIAL test it:
runs that start inside the piece and cross tile boundaries (letters_runs: random letters with a
run of 600 "z" across every 4096th byte; run_in_piece: "xyz" then one letter), whose phase the
first round's spans miss.
"""

from __future__ import annotations

import argparse
import itertools
import json
import pathlib
import random

import tiktoken
import tiktoken.load

from blockbpe_jax import testing

TILE = 2048  # kTileBytes of the default build (CMake BLOCKBPE_TILE_BYTES)


def _letters(rng, n: int) -> bytes:
    return bytes(rng.choice(b"abcdefghij") for _ in range(n))


EXTRA_KINDS = {  # the first round's residual cases (benchmarks/single_string.py has them too)
    "letters_runs": lambda rng, n: (
        _letters(rng, 4096 - 300) + b"".join(b"z" * 600 + _letters(rng, 4096 - 600) for _ in range(n // 4096))
    )[:n],
    "run_in_piece": lambda rng, n: b"xyz" + b"a" * (n - 3),
}


def piece_encoder(vocab: str) -> tiktoken.Encoding:
    path = testing.data_dir() / "vocab" / testing.VOCAB_FILES[vocab][0]
    ranks = tiktoken.load.load_tiktoken_bpe(str(path))
    return tiktoken.Encoding(
        f"{vocab}_piece", pat_str=testing.BYTES_MODE_PATTERN, mergeable_ranks=ranks, special_tokens={}
    )


def token_starts(enc: tiktoken.Encoding, text: bytes, at: int) -> list[tuple[int, int]]:
    """(start, id) of each token of BPE(text), text starting at byte `at` of the piece."""
    out = []
    for t in enc._encode_bytes(text):  # (one piece: the pattern matches everything)
        out.append((at, t))
        at += len(enc.decode_single_token_bytes(t))
    return out


def stitch_span(
    lo: int, hi: int, tile: int, margin: int, align: int, tile_bytes: int = TILE
) -> tuple[int, int]:
    """stitch_span of ffi/core/span_stitch.h (row positions, tiles of tile_bytes)."""
    chunk_lo, chunk_hi = max(lo, tile * tile_bytes), min(hi, (tile + 1) * tile_bytes)
    start = chunk_lo - margin
    start = lo if start <= lo else lo + (start - lo) // align * align
    return start, min(hi, chunk_hi + margin)


def stitch(
    enc, piece: bytes, margin: int, offset: int = 0, align: int = 1, reach: int = 0, tile_bytes: int = TILE
):
    """(ids or None, index of the first boundary without a shared token, largest offset of a
    shared token into its overlap, boundaries that needed the second round)."""
    lo, hi = offset, offset + len(piece)

    def encoded(tile: int, back: int = 0):
        a, b = stitch_span(lo, hi, tile, margin, align, tile_bytes)
        a = stitch_span(lo, hi, tile, margin + back, align, tile_bytes)[0]
        return a, token_starts(enc, piece[a - lo : b - lo], a)

    def first_shared(mine, theirs):
        theirs = set(theirs)
        return next((k for k, x in enumerate(mine) if x in theirs), None)

    encoded_spans = [encoded(t) for t in range(lo // tile_bytes, (hi - 1) // tile_bytes + 1)]
    ids, after, worst, second = [], lo, 0, 0  # after: tokens of the output end here
    for t, (_, mine) in enumerate(encoded_spans):
        mine = [x for x in mine if x[0] >= after]
        if t + 1 == len(encoded_spans):
            ids += [tok for _, tok in mine]
            break
        shared = first_shared(mine, encoded_spans[t + 1][1])
        if shared is None and reach:  # second round: the later span starts earlier
            encoded_spans[t + 1] = encoded(lo // tile_bytes + t + 1, reach)
            second += 1
            shared = first_shared(mine, encoded_spans[t + 1][1])
        if shared is None:
            return None, t, worst, second
        right_lo = encoded_spans[t + 1][0]
        ids += [tok for _, tok in mine[: shared + 1]]
        start, tok = mine[shared]
        worst = max(worst, start - right_lo)
        after = start + len(enc.decode_single_token_bytes(tok))
    return ids, None, worst, second


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=pathlib.Path, default=None)
    ap.add_argument("--vocabs", nargs="+", default=["cl100k", "o200k", "r50k"])
    ap.add_argument("--margins", nargs="+", type=int, default=[64, 128, 256, 512])
    ap.add_argument("--offsets", nargs="+", type=int, default=[0], help="the piece's start in its row")
    ap.add_argument("--align", type=int, default=1, help="span starts: piece start + a multiple")
    ap.add_argument("--prefixes", nargs="+", default=[""], help="text before the run, in the piece")
    ap.add_argument("--reach-back", type=int, default=0, help="second round: the later span R bytes earlier")
    ap.add_argument("--extra-kinds", action="store_true", help="also letters_runs and run_in_piece")
    ap.add_argument("--tile", type=int, default=TILE, help="tile bytes (kTileBytes)")
    args = ap.parse_args(argv)
    rows, bad = [], 0
    for vocab in args.vocabs:
        enc = piece_encoder(vocab)
        rng = random.Random(0)
        kinds = {**testing.ADVERSARIAL, **(EXTRA_KINDS if args.extra_kinds else {})}
        for kind, make in kinds.items():
            for n in (64 * 1024, 1024 * 1024):
                body = make(rng, n)
                refs = {prefix: enc._encode_bytes(prefix.encode() + body) for prefix in args.prefixes}
                for prefix, margin, offset in itertools.product(args.prefixes, args.margins, args.offsets):
                    piece, ref = prefix.encode() + body, refs[prefix]
                    ids, failed_at, worst, second = stitch(
                        enc, piece, margin, offset, args.align, args.reach_back, args.tile
                    )
                    row = {
                        "vocab": vocab,
                        "kind": kind,
                        "bytes": len(piece),
                        "prefix": prefix,
                        "offset": offset,
                        "align": args.align,
                        "margin": margin,
                        "reach_back": args.reach_back,
                        "tile": args.tile,
                        "second_round_boundaries": second,
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
        (args.out / "span_stitch.json").write_text(json.dumps(rows, indent=1))
    return 1 if bad else 0  # a stitch that differs from BPE would refute the design


if __name__ == "__main__":
    raise SystemExit(main())
