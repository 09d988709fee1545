"""`encode` (files -> token shards) and `verify` (shards against the reference); the work is
in blockbpe_jax/corpus/job.py."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ..corpus.documents import SPLITS_HELP, WINDOW_BYTES
from ..corpus.shards import EVERY_TOKEN_FORMATS, FORMATS
from ..corpus.shards.flat import DEFAULT_SHARD_TOKENS
from ..corpus.plan import DEFAULT_PACK_WIDTH
from .common import (
    PROG,
    CLIError,
    add_vocab_options,
    check_mode,
    check_positive,
    device_named,
    load_tokenizer,
    parse_allowed_special,
    tokenizer_and_device,
    version,
)


def cmd_encode(args) -> int:
    from ..corpus import job

    paths = job.check_inputs(args.inputs)
    split, chunk = job.parse_split(args.split)
    check_positive(
        ("--batch-size", args.batch_size),
        ("--shard-size", args.shard_size),
        ("--max-tokens", args.max_tokens),
        ("--max-len", args.max_len),
        ("--batch-bytes", args.batch_bytes),
        ("--window-bytes", args.window_bytes),
        ("--shard-tokens", args.shard_tokens),
    )
    if args.pack_width < 0:
        raise CLIError(f"--pack-width must be 0 or more, got {args.pack_width}")
    if chunk and args.max_len and chunk > args.max_len:
        raise CLIError(f"--split chunk:{chunk} makes documents longer than --max-len {args.max_len}")
    if args.format in EVERY_TOKEN_FORMATS and (args.max_tokens is not None or args.pad_id is not None):
        raise CLIError(
            f"--max-tokens and --pad-id apply to --format npz/npy ({args.format} shards keep every token)"
        )
    if args.verify is not None and args.format != "flat":
        raise CLIError("--verify checks flat shards (--format flat)")
    stream = job.first_stream(paths) if args.verify is not None else None
    if stream is not None:
        raise CLIError(f"--verify reads the inputs again: {stream} is a stream (standard input, a pipe)")
    job.enable_executable_cache()  # a second run of the job loads its executables
    # (the input is read while the vocabulary and the accelerator load)
    read = job.read_ahead(
        paths, split=args.split, jsonl_field=args.jsonl_field, window_bytes=args.window_bytes
    )
    try:
        tok, device = tokenizer_and_device(args)
        check_mode(tok, args.mode, device)
        allowed = parse_allowed_special(args.allowed_special, tok)
        name = (
            args.prefix
            if args.prefix is not None
            else ("shard-" if args.format in ("npz", "npy") else "shard")
        )
        vocab_arg = (
            dict(tiktoken=args.tiktoken)
            if args.tiktoken
            else dict(vocab=str(Path(args.vocab).expanduser().resolve()))
        )
        if args.pattern is not None:  # (verify loads the vocabulary as encode did)
            vocab_arg["pattern"] = args.pattern
        meta = job.encode_files(
            tok,
            paths,
            os.path.join(os.path.expanduser(args.output), name),
            fmt=args.format,
            split=args.split,
            jsonl_field=args.jsonl_field,
            window_bytes=args.window_bytes,
            mode=args.mode,
            allowed_special=allowed,
            batch_bytes=args.batch_bytes,
            max_docs=args.batch_size,
            max_len=args.max_len,
            pack_width=args.pack_width,
            shard_tokens=args.shard_tokens,
            shard_docs=args.shard_size,
            max_tokens=args.max_tokens,
            pad_id=args.pad_id or 0,
            block_size=args.block_size,
            device=device,
            overwrite=args.overwrite,
            append_eod=args.eod_id if args.eod_id is not None else args.append_eod,
            progress=not args.quiet,
            meta=dict(tool=f"{PROG} {version()}", vocab_arg=vocab_arg, device=str(device)),
            read=read,
        )
    finally:  # (stops the reading when the job did not start: no thread left in native code)
        read.close()
    mb = sum(size or 0 for size in job.input_sizes(paths)) / 1e6  # (as check_inputs took them)
    secs = meta["seconds"]
    print(
        f"{meta['documents']} documents, {meta['tokens']} tokens -> {len(meta['shards'])} shard(s) "
        f"in {args.output} ({secs:.1f} s, {mb / max(secs, 1e-9):.1f} MB/s of input)"
    )
    truncated = meta.get("truncated_documents", 0)
    if truncated:
        print(
            f"warning: {truncated} document(s) had more than --max-tokens {args.max_tokens} tokens "
            f"and were truncated (counts hold their true lengths)",
            file=sys.stderr,
        )
    if args.verify is not None:
        return _verify(os.path.join(os.path.expanduser(args.output), name), tok, args.verify, 0)
    return 0


def _verify(prefix: str, tok, sample: int, seed: int) -> int:
    from ..corpus import job

    r = job.verify(prefix, tok, sample=sample, seed=seed)
    print(
        f"verify: ok: {r['shards']} shard(s), {r['documents']} documents, {r['tokens']} tokens "
        f"consistent; {r['checked']} sampled documents equal to {r['reference']}"
    )
    return 0


def cmd_verify(args) -> int:
    from ..corpus.shards.flat import load_sidecar

    if args.sample < 0:
        raise CLIError(f"--sample must be >= 0, got {args.sample}")
    meta, _ = load_sidecar(args.prefix)
    if args.vocab is None and args.tiktoken is None:
        arg = meta.get("vocab_arg") or {}
        if not arg:
            raise CLIError(f"{args.prefix}: the sidecar names no vocabulary: give --vocab or --tiktoken")
        pattern = args.pattern if args.pattern is not None else arg.get("pattern")
        tok = load_tokenizer(arg.get("vocab"), arg.get("tiktoken"), pattern)
    else:
        tok = load_tokenizer(args.vocab, args.tiktoken, args.pattern)
    check_mode(tok, meta["mode"], device_named("cpu"))  # (its reference: tiktoken or the CPU path)
    if tok.vocab.n_vocab != meta["n_vocab"]:
        raise CLIError(
            f"{tok.vocab.source}: n_vocab {tok.vocab.n_vocab}, the shards were written "
            f"with {meta['n_vocab']} ({meta['vocab_source']})"
        )
    return _verify(args.prefix, tok, args.sample, args.seed)


def add_parsers(sub) -> None:
    e = sub.add_parser(
        "encode",
        help="tokenize text or JSONL files into flat token shards",
        description="Tokenize text or JSONL files (plain, .gz or .zst). --format flat (default): "
        "DIR/NAME_<k>.bin (every document's ids back to back, uint16 when "
        "n_vocab <= 65536 else uint32, little-endian) + DIR/NAME_<k>.idx "
        "(int64 offsets in tokens, n_docs + 1) + DIR/NAME.json. npz/npy: "
        "padded ids int32[N, T], counts, file_index, position + manifest.json.",
    )
    e.add_argument(
        "inputs",
        nargs="+",
        metavar="FILE",
        help="UTF-8 text or JSONL files (.gz, .zst ok), .parquet files (with --field; needs pyarrow), "
        "directories (the files under them, in path order; names starting with . or _ left out), "
        "or streams read once as they come: a pipe, `-` for standard input (e.g. `zstd -dc *.zst | ... -`)",
    )
    e.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    add_vocab_options(e, " (this or --tiktoken is required)")
    e.add_argument(
        "--mode",
        choices=("exact", "bytes"),
        default="exact",
        help="exact: ids equal to tiktoken / HF (default); bytes: BlockBPE paper mode",
    )
    e.add_argument(
        "--split",
        default="lines",
        metavar="HOW",
        help=f"documents: {SPLITS_HELP}; default lines (ignored with --jsonl-field)",
    )
    e.add_argument(
        "--field",
        "--jsonl-field",
        dest="jsonl_field",
        metavar="FIELD",
        help="inputs are JSONL (each line's FIELD, a string, is one document) or parquet "
        "(column FIELD, one document per row)",
    )
    e.add_argument(
        "--format",
        choices=FORMATS,
        default="flat",
        help="flat: .bin/.idx token shards (default); arrayrecord: NAME_<k>.array_record, "
        "one record per document (its ids as little-endian uint16/uint32 bytes; needs "
        "array_record); megatron: Megatron-LM's indexed dataset, NAME_<k>.bin/.idx pairs; "
        "npz: padded, one file per shard; npy: padded, one file per "
        "array per shard",
    )
    e.add_argument(
        "--prefix",
        metavar="NAME",
        help="shard file name prefix (default: shard for flat, shard- for npz/npy)",
    )
    e.add_argument(
        "--batch-bytes",
        type=int,
        default=4 << 20,
        metavar="N",
        help="padded bytes (documents x power-of-two width) per encode call (default "
        "4 MiB); a longer document is encoded alone, whole",
    )
    e.add_argument("--batch-size", type=int, metavar="B", help="at most B documents per encode call")
    e.add_argument(
        "--window-bytes",
        type=int,
        default=WINDOW_BYTES,
        metavar="N",
        help=f"input bytes read, planned and sent to the device at a time (default {WINDOW_BYTES >> 20} "
        "MiB); the job's buffers, on the device too, grow with it",
    )
    e.add_argument(
        "--pack-width",
        type=int,
        default=DEFAULT_PACK_WIDTH,
        metavar="N",
        help="documents shorter than N bytes share rows of N bytes, a special token after each "
        f"(default {DEFAULT_PACK_WIDTH}; 0: each document in a row of its own)",
    )
    e.add_argument(
        "--shard-tokens",
        type=int,
        default=DEFAULT_SHARD_TOKENS,
        metavar="N",
        help=f"flat/arrayrecord/megatron: start a new shard after N tokens (default {DEFAULT_SHARD_TOKENS})",
    )
    e.add_argument(
        "--shard-size",
        type=int,
        metavar="N",
        help="documents per shard (default: 65536 for npz/npy, no limit for flat)",
    )
    e.add_argument(
        "--max-tokens",
        type=int,
        metavar="T",
        help="npz/npy: fixed width of ids; longer documents are truncated (counts keep "
        "true lengths). Default: each shard as wide as its longest",
    )
    e.add_argument(
        "--max-len",
        type=int,
        metavar="L",
        help="fixed byte width of every batch (documents longer than L are an error). "
        "Default: the longest in the batch, rounded up to a power of two",
    )
    e.add_argument(
        "--allowed-special",
        default="none",
        metavar="WHICH",
        help="special tokens recognised in the text: none (default), all, or A,B,...",
    )
    e.add_argument("--pad-id", type=int, help="npz/npy: id after each row's tokens (default 0)")
    e.add_argument(
        "--append-eod",
        action="store_true",
        help="the end-of-document id after every document's ids, as Megatron's preprocess_data "
        "--append-eod: the vocabulary's end-of-text special (<|endoftext|>, </s>, ...), or --eod-id",
    )
    e.add_argument(
        "--eod-id", type=int, metavar="ID", help="append ID after every document (implies --append-eod)"
    )
    e.add_argument(
        "--block-size", type=int, default=256, choices=(256, 512, 1024), help="CUDA threads per string"
    )
    e.add_argument("--device", choices=("cpu", "gpu"), help="default: JAX's default device")
    e.add_argument(
        "--verify",
        type=int,
        nargs="?",
        const=1000,
        metavar="N",
        help="then verify the shards, re-encoding N sampled documents (default 1000)",
    )
    e.add_argument("--overwrite", action="store_true", help="replace an existing output")
    e.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_encode)

    c = sub.add_parser(
        "verify",
        help="check flat shards and re-encode a sample with the reference",
        description="Check every shard's .idx/.bin against each other and the sidecar, "
        "then re-read the inputs and re-encode a random sample of documents "
        "with the reference (tiktoken for tiktoken-format vocabularies, "
        "else the CPU path). Exit 1 when they differ.",
    )
    c.add_argument("prefix", metavar="PREFIX", help="DIR/NAME as encode wrote it (DIR/NAME.json), or DIR")
    add_vocab_options(c, " (default: the one the sidecar names)")
    c.add_argument(
        "--sample",
        type=int,
        default=1000,
        metavar="N",
        help="documents to re-encode (default 1000; 0: consistency only)",
    )
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(func=cmd_verify)
