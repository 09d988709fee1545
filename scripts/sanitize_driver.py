"""Small GPU workload for compute-sanitizer (scripts/gpu_check.sh sanitize): every mode and
block size, special tokens, the shared-memory and the global-workspace paths, a three-stage
pre-tokenizer, an NFC tokenizer, a SentencePiece BPE model, Gemma 4's long runs (the block
passes' walk), bad rows with check_lengths=False, Tokenizer.encode_batch's pinned staging
(refills and a new shape), pieces longer than a tile in long rows (stitched spans, and merged
whole through the test hook), long pieces of few rows in warp sub-spans, the piece kernel (rows
left pending included, calls with specials), its SentencePiece BPE form (Gemma 3's runs of
specials among them), Lowercase in it. Exits non-zero if any result differs from the CPU
handler's."""

import os
import sys

import jax
import numpy as np

import blockbpe_jax as bb
from blockbpe_jax import testing

root = testing.data_dir()
tok = bb.Tokenizer.from_file(root / "vocab" / testing.VOCAB_FILES["cl100k"][0])
raw = (root / "corpus" / "war_and_peace_en.txt").read_bytes()[:200_000].decode("utf-8", "ignore")
texts = [raw[i * 900 : (i + 1) * 900] for i in range(16)] + [
    "",
    "<|endoftext|>x<|endoftext|>",
    " " * 3000 + "y",
    "9" * 1000,
]
gpu, cpu = jax.devices("gpu")[0], jax.devices("cpu")[0]
# The block-per-string kernel's paths first (BLOCKBPE_KERNEL=block: every call); the piece
# kernel, the default where a call allows it, has its own section at the end.
os.environ["BLOCKBPE_KERNEL"] = "block"
bad = 0


def compare(label, tokenizer, data, lengths, block_sizes=(256, 512, 1024), **kw):
    """The GPU's ids and counts at each block size against the CPU handler's; prints each."""
    global bad
    ref = bb.encode(jax.device_put(data, cpu), jax.device_put(lengths, cpu), tokenizer, **kw)
    for bs in block_sizes:
        out = bb.encode(
            jax.device_put(data, gpu), jax.device_put(lengths, gpu), tokenizer, block_size=bs, **kw
        )
        same = np.array_equal(np.asarray(out.ids), np.asarray(ref.ids)) and np.array_equal(
            np.asarray(out.counts), np.asarray(ref.counts)
        )
        bad += not same
        print(f"{label} block={bs}: {'ok' if same else 'DIFFERENT'}")
    return ref


def compare_in_piece_kernels(label, tokenizers, rows, shapes, extra_tokens=0, **kw):
    """compare() in the piece kernels (BLOCKBPE_KERNEL=piece) of each (name, tokenizer) on
    `rows` cut to each (width, chunk size) of `shapes`, the chunk size forced."""
    os.environ["BLOCKBPE_KERNEL"] = "piece"
    for width, chunk in shapes:
        os.environ["BLOCKBPE_PIECE_CHUNK"] = chunk
        cut = [r[:width] for r in rows]
        data_c, lengths_c = bb.pack_strings(cut, max_len=width)
        for name, tokenizer in tokenizers:
            compare(
                f"{label}{name} {len(cut)}x{width} chunk {chunk}",
                tokenizer,
                data_c,
                lengths_c,
                block_sizes=(256,),
                max_tokens=width + extra_tokens,
                **kw,
            )
    del os.environ["BLOCKBPE_KERNEL"], os.environ["BLOCKBPE_PIECE_CHUNK"]


for max_len in (4096, 12000):  # shared memory, then the global workspace
    data, lengths = bb.pack_strings(texts, max_len=max_len)
    for mode in ("exact", "bytes"):
        compare(
            f"L={max_len} mode={mode}", tok, data, lengths, max_tokens=1024, mode=mode, allowed_special="all"
        )
# A three-stage pre-tokenizer (DeepSeek-V3's Sequence of Splits) on the same vocabulary: the
# earlier stages' flags restart the later stages, in shared memory and in the workspace.
import dataclasses  # noqa: E402
from blockbpe_jax import pretok  # noqa: E402

split = lambda p: {"type": "Split", "pattern": {"Regex": p}, "behavior": "Isolated"}  # noqa: E731
staged_tok = bb.Tokenizer(
    dataclasses.replace(
        tok.vocab,
        pretokenizer=pretok.from_hf(
            {
                "type": "Sequence",
                "pretokenizers": [
                    split(r"\p{N}{1,3}"),
                    split(r"[一-龥぀-ゟ゠-ヿ]+"),
                    split(r" ?\p{L}+|\s+(?!\S)|\s+|[^\s\p{L}]+"),
                ],
            }
        ),
    )
)
for max_len in (4096, 12000):
    data, lengths = bb.pack_strings(texts, max_len=max_len)
    compare(f"3 stages L={max_len}", staged_tok, data, lengths, max_tokens=1024, allowed_special="all")
# An NFC tokenizer: decomposed text is reported (count -2) by the device check, the rest encoded.
nfc_tok = bb.Tokenizer(
    dataclasses.replace(tok.vocab, pretokenizer=dataclasses.replace(tok.vocab.pretokenizer, nfc=True))
)
nfc_texts = texts + ["cafe\u0301", "\u0958 \u0915\u093c", "\u1100\u1161 \uac00\u11a8", "\u1e0a\u0323"]
data, lengths = bb.pack_strings(nfc_texts, max_len=4096)
ref = compare("nfc", nfc_tok, data, lengths, max_tokens=1024)
print(f"nfc: {int((np.asarray(ref.counts) == -2).sum())} reported")
# NFC normalized on the device (ffi/cuda/nfc_prepass.cuh): rows in NFC read in place and the
# rest rewritten in parts, one row with a segment too long for a thread's scratch, one with
# too long a segment for any; at 4096 two encode passes, at 12000 (the tile pipeline) the copy.
rewrite_tok = bb.Tokenizer(
    dataclasses.replace(
        tok.vocab,
        pretokenizer=dataclasses.replace(
            tok.vocab.pretokenizer, nfc=True, normalizer=pretok.Normalizer(("nfc",))
        ),
    )
)
rewrite_texts = nfc_texts + ["a" + "\u0301" * 100 + " b", "a" + "\u0301" * 300, "e\u0301 " * 500]
for max_len in (4096, 12000):
    data, lengths = bb.pack_strings(rewrite_texts, max_len=max_len)
    ref = compare(f"nfc rewrite L={max_len}", rewrite_tok, data, lengths, max_tokens=2048)
print(f"nfc rewrite: {int((np.asarray(ref.counts) == -2).sum())} reported")
# With specials in the call the pre-pass also looks for a rewrite that may cross one
# (nfc_rewrite_may_cross_special); these rows cannot, so they are rewritten as without specials.
data, lengths = bb.pack_strings(rewrite_texts + ["<|endoftext|>cafe\u0301<|endoftext|>\u212b"], max_len=4096)
compare("nfc rewrite with specials", rewrite_tok, data, lengths, max_tokens=2048, allowed_special="all")
# SentencePiece BPE (merges over characters): Mistral v7 with its user-defined pieces, runs of
# spaces, bytes that are not UTF-8, in shared memory and in the workspace.
# (the files found as the tests find them: mistral-common, or copies in BLOCKBPE_FAMILY_FILES)
import pathlib  # noqa: E402

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests"))
import families as family_files  # noqa: E402

(sp_tok, sp_why), (v1_tok, v1_why) = (
    family_files.tokenizer("mistral-v7-spm"),
    family_files.tokenizer("mistral-v1-spm"),
)
print("SentencePiece files:", sp_why or "mistral-v7-spm found", "/", v1_why or "mistral-v1-spm found")
if sp_tok is not None:
    sp_texts = [t.encode() for t in texts] + [
        b"[REF]x " * 40,
        b" " * 2000 + b"y",
        b"a\xff\xe2\x96 b" * 50,
        "日本語 😀 é".encode() * 30,
    ]
    for max_len in (4096, 12000):
        data, lengths = bb.pack_strings(sp_texts, max_len=max_len)
        compare(f"sentencepiece L={max_len}", sp_tok, data, lengths, max_tokens=2048, allowed_special="all")
# Gemma 4 (first-only ranks): long runs of one character, whose block passes walk them.
g4_tok, g4_why = family_files.tokenizer("gemma4-gguf")
print("Gemma 4 file:", g4_why or "found")
if g4_tok is not None:
    g4_texts = [pre + c * k for c in ("a", " ", "\n", "=") for k in (70, 700, 3000) for pre in ("", "x")]
    data_g4, lengths_g4 = bb.pack_strings(g4_texts, max_len=4096)
    compare("gemma 4 runs", g4_tok, data_g4, lengths_g4, max_tokens=4096, allowed_special="all")
lengths_bad = lengths.copy()
lengths_bad[0] = max_len + 1
out = bb.encode(
    jax.device_put(data, gpu), jax.device_put(lengths_bad, gpu), tok, max_tokens=64, check_lengths=False
)
bad += int(np.asarray(out.counts)[0]) != -1
print(f"bad length flagged: {'ok' if int(np.asarray(out.counts)[0]) == -1 else 'DIFFERENT'}")
# Pieces longer than a tile (ffi/cuda/huge_pieces.cuh): stitched spans, then every
# stitch failed through the CUDA handler's test hook (the whole-piece merge).
import random  # noqa: E402

huge = [testing.ADVERSARIAL[k](random.Random(k), 11000) for k in ("letters_a_j", "spaces", "cjk", "emoji")]
data, lengths = bb.pack_strings(huge + [b"x " * 100 + b"ab" * 5000, b"", b"tail"], max_len=12000)
compare("huge pieces", tok, data, lengths, max_tokens=12000)
# A 1 MiB piece whose first round leaves boundaries unstitched: the second round (huge_reach).
runs = testing.letters_runs(random.Random("runs/1048576/0"), 1 << 20)
data_r, lengths_r = bb.pack_strings([runs], max_len=(1 << 20) + 8192)
compare("huge pieces, second round", tok, data_r, lengths_r, block_sizes=(256,), max_tokens=1 << 20)
os.environ["BLOCKBPE_STITCH_MARGIN"] = "-1"
compare("huge pieces merged whole", tok, data, lengths, max_tokens=12000)
del os.environ["BLOCKBPE_STITCH_MARGIN"]
# Few rows no wider than a tile (ffi/cuda/sub_spans.cuh): long pieces in warp sub-spans, one
# that does not stitch (a run inside it) by the block passes, many pieces in several rounds.
few = [testing.ADVERSARIAL[k](random.Random(k), 2000) for k in ("letters_a_j", "spaces", "cjk", "emoji")]
many = b" 7".join(testing.ADVERSARIAL["letters_a_j"](random.Random(k), 70) for k in range(25))
data_f, lengths_f = bb.pack_strings(few + [b"xyz" + b"a" * 1500, many, b"", b"tail"], max_len=2048)
compare("few rows, long pieces", tok, data_f, lengths_f, max_tokens=2048)
for k, (batch, width) in enumerate([(16, 1024), (16, 1024), (20, 4096), (16, 1024)] * 2):
    rows = [t[: width // 2] for t in (texts[k:] + texts[:k])[:batch]]
    ref = tok.encode_batch(rows, max_len=width, device=cpu, allowed_special="all")
    out = tok.encode_batch(rows, max_len=width, device=gpu, allowed_special="all")
    same = np.array_equal(np.asarray(out.ids), np.asarray(ref.ids)) and np.array_equal(
        np.asarray(out.counts), np.asarray(ref.counts)
    )
    bad += not same
    print(f"staged {batch}x{width} #{k}: {'ok' if same else 'DIFFERENT'}")
# The piece kernel (ffi/cuda/piece_kernel.cuh) where a call allows it:
# exact mode, no specials, rows of at most 4 KiB and more than a few of them; every chunk size
# the widths give; rows left pending (a long piece that is not a token, a full merge list) for
# encode_kernel; invalid UTF-8 and mixed scripts.
mixed = "日本語 😀👍🏽 é café Привет ١٢٣ 12345 \t\n  x".encode() * 40
piece_rows = [t.encode() for t in texts[:16]] + [
    b"",
    b"a",
    testing.ADVERSARIAL["letters_a_j"](random.Random(7), 300),
    b"a\xff\xe2\x96 b\xc3" * 60,
    mixed[:4000],
    b" ".join(testing.ADVERSARIAL["letters_a_j"](random.Random(k), 9) for k in range(400))[:4096],
    # misses of 17-32 bytes (the misses' cache's long keys), each twice: kept, then found
    b" ".join(
        testing.ADVERSARIAL["letters_a_j"](random.Random(k // 2), 16 + k // 2 % 16) for k in range(160)
    )[:4096],
]
compare_in_piece_kernels(
    "piece kernel",
    [("", tok), (" 3 stages", staged_tok)],  # (staged: blocks that skip a stage and blocks that do not)
    piece_rows * 3,
    ((512, "2"), (512, "16"), (1000, "4"), (4096, "16")),
)
# Calls with specials allowed (the piece kernel's instantiation with specials, where the build
# has one): specials at rows' starts and ends, back to back, across chunk edges, half a special.
eot = b"<|endoftext|>"
special_rows = [
    (eot * k + row[: 37 * k] + b"<|fim_prefix|><|endof" + row[37 * k :] + eot)[:4096]
    for k, row in enumerate(piece_rows)
]
compare_in_piece_kernels(
    "piece kernel specials",
    [("", tok), (" 3 stages", staged_tok)],
    special_rows * 2,
    ((512, "2"), (512, "8"), (1000, "4"), (4096, "16")),
    allowed_special="all",
)
# SentencePiece BPE in the piece kernel (ffi/cuda/char_piece_kernel.cuh): Mistral v7 (its
# user-defined pieces: the instantiation with specials) and v1 (none); rows left pending (a
# word of over 64 symbols) for encode_chars_kernel; invalid UTF-8, `▁` in the text, space runs;
# words cut at byte pieces, a row's prefix alone; every chunk size the widths give.
if sp_tok is not None and v1_tok is not None:
    sp_rows = [t.encode() for t in texts[:16]] + [
        b"",
        b" ",
        b"[REF]x [/REF] y" * 30,
        b"x" * 300,
        b"a\xff\xe2\x96 b\xc3" * 60,
        mixed[:4000],
        " \u2581\u2581 a  b\t".encode() * 60,
        b"\nfirst line\n\nnext" * 20,  # (word bounds: a byte piece first, after the prefix)
        b"2023 was 12345\x01x" * 20,
    ]
    compare_in_piece_kernels(
        "char piece kernel ",
        [("v7", sp_tok), ("v1", v1_tok)],
        sp_rows * 3,
        ((512, "2"), (512, "16"), (1000, "4"), (4096, "16")),
        extra_tokens=2,
        allowed_special="none",
    )
# Gemma 3's always-matched runs (newlines, tabs, `▁` for spaces) in the piece kernel: one-byte
# specials inside ASCII runs, runs across chunk edges and past 31 units, rows with a tag
# (`<b>`), characters past ASCII between specials and ASCII bytes.
g3_tok, g3_why = family_files.tokenizer("gemma3-gguf")
print("Gemma 3 file:", g3_why or "found")
if g3_tok is not None:
    g3_rows = [t.encode() for t in texts[:16]] + [
        b"a\n\nb\tc  d\n" * 40,
        b"x" + b"\n" * 70 + b"y" + b" " * 45 + b"\t" * 33,
        " \u2581 \u2581\u2581  z".encode() * 50,
        b"<b>x</b>\n\n  y" * 30,
        # (characters past ASCII among specials, runs and ASCII bytes)
        "\u00e9\n\u00e0 b\u2581c \u201cd\u201d\n\n\tx\u00ff".encode() * 40,
    ]
    compare_in_piece_kernels(
        "char piece kernel ",
        [("gemma3", g3_tok)],
        g3_rows * 2,
        ((512, "2"), (1000, "4"), (4096, "16")),
        extra_tokens=2,
        allowed_special="none",
    )
# Lowercase in the piece kernel: cl100k's tokenizer.json with HF's Lowercase normalizer, rows
# lowercased in place there; a row with a code point that is not (U+0130) left pending, which
# encode_kernel then reports (-2), as the CPU handler does.
import json  # noqa: E402
import tempfile  # noqa: E402

lower_doc = json.loads((root / "vocab" / "cl100k_hf" / "tokenizer.json").read_bytes())
lower_doc["normalizer"] = {"type": "Lowercase"}
lower_path = pathlib.Path(tempfile.mkdtemp()) / "tokenizer.json"
lower_path.write_text(json.dumps(lower_doc))
lower_tok = bb.Tokenizer.from_file(lower_path)
lower_rows = [t.upper() for t in texts[:16]] + [
    "\u0130stanbul ISTANBUL",
    "\u039f\u0394\u039f\u03a3 KELVIN \u212a",
    "",
]
for allowed in ("none", "all"):
    compare_in_piece_kernels(
        f"piece kernel lowercase ({allowed} specials)",
        [("", lower_tok)],
        [r.encode() + eot + r.encode()[:40] for r in lower_rows] * 2,
        ((512, "2"), (1024, "4"), (4096, "16")),
        extra_tokens=2,
        allowed_special=allowed,
    )
raise SystemExit(1 if bad else 0)
