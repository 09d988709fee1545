"""`bench`: a quick local throughput number on a file (default: the shared War and Peace)."""

from __future__ import annotations

import gzip
import json
import statistics
import time
from pathlib import Path

import numpy as np

from ..corpus.inputs.lines import check_utf8
from .common import CLIError, add_vocab_options, check_mode, check_positive, device_named, load_tokenizer


def make_excerpts(raw: bytes, batch: int, nbytes: int) -> list[bytes]:
    """`batch` consecutive excerpts of at most `nbytes` bytes ending on character boundaries,
    cycling through `raw` if it is short."""
    out, i = [], 0
    while len(out) < batch:
        if i >= len(raw):
            i = 0
        j = min(len(raw), i + nbytes)
        while j > i and j < len(raw) and (raw[j] & 0xC0) == 0x80:
            j -= 1
        out.append(raw[i:j])
        i = j
    return out


def _median_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _shared_vocab_default() -> Path | None:
    from .._data import find_data_dir

    root = find_data_dir()
    path = root / "vocab" / "tiktoken" / "cl100k_base.tiktoken" if root else None
    return path if path is not None and path.is_file() else None


def _input_file(name: str | None) -> Path:
    if name is not None:
        path = Path(name).expanduser()
        if not path.is_file():
            raise CLIError(f"{path}: no such file")
        return path
    from .._data import find_data_dir

    root = find_data_dir()
    path = root / "corpus" / "war_and_peace_en.txt" if root else None
    if path is None or not path.is_file():
        raise CLIError("no input: give a FILE (the shared War and Peace was not found; set BLOCKBPE_DATA)")
    return path


def cmd_bench(args) -> int:
    import jax

    from ..ops import primitive
    from ..text_rows import pack_strings

    path = _input_file(args.file)
    vocab = args.vocab
    if vocab is None and args.tiktoken is None:
        vocab = _shared_vocab_default()
        if vocab is None:
            raise CLIError("no vocabulary: give --vocab PATH or --tiktoken NAME")
    check_positive(("--batch", args.batch), ("--bytes", args.bytes), ("--repeats", args.repeats))
    tok = load_tokenizer(vocab, args.tiktoken, args.pattern)
    device = device_named(args.device)
    check_mode(tok, args.mode, device)
    raw = (gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")).read()
    check_utf8(raw, path, None)
    if not raw:
        raise CLIError(f"{path}: empty file")
    texts = make_excerpts(raw, args.batch, args.bytes)
    nbytes = sum(map(len, texts))
    data, lengths = pack_strings(texts, max_len=args.bytes)
    T = args.bytes  # tokens <= bytes

    d_data, d_len = jax.device_put(data, device), jax.device_put(lengths, device)
    tables = tok.tables("none", device)
    # The tables are an argument: closed over, they would be embedded in the program.
    run = jax.jit(
        lambda d, n, t: primitive.encode(
            d, n, t, max_tokens=T, mode=args.mode, block_size=args.block_size, check_lengths=False
        )
    )
    t = time.perf_counter()
    ids, counts = jax.block_until_ready(run(d_data, d_len, tables))
    compile_s = time.perf_counter() - t
    dev_s = _median_time(lambda: jax.block_until_ready(run(d_data, d_len, tables)), args.repeats)

    def end_to_end():
        dd, ll = pack_strings(texts, max_len=args.bytes)
        jax.device_get(run(jax.device_put(dd, device), jax.device_put(ll, device), tables))

    e2e_s = _median_time(end_to_end, args.repeats)
    ntok = int(np.asarray(counts).sum())
    result = dict(
        vocab=tok.vocab.name,
        mode=args.mode,
        device=str(device),
        file=str(path),
        batch=args.batch,
        bytes_per_string=args.bytes,
        input_bytes=nbytes,
        tokens=ntok,
        block_size=args.block_size,
        repeats=args.repeats,
        compile_s=round(compile_s, 3),
        device_s=dev_s,
        device_MBps=nbytes / dev_s / 1e6,
        tokens_per_s=ntok / dev_s,
        end_to_end_s=e2e_s,
        end_to_end_MBps=nbytes / e2e_s / 1e6,
    )
    if args.compare_tiktoken:
        result.update(_bench_tiktoken(tok, texts, args, np.asarray(ids), np.asarray(counts), nbytes))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(
        f"{tok.vocab.name}, mode={args.mode}, {device}: {args.batch} x {args.bytes} B "
        f"({nbytes / 1e6:.2f} MB, {ntok} tokens) from {path.name}"
    )
    print(
        f"  on-device encode : {result['device_MBps']:9.2f} MB/s  {ntok / dev_s / 1e6:7.2f} M tokens/s "
        f"(median of {args.repeats}; compile {compile_s:.2f} s)"
    )
    print(f"  end to end       : {result['end_to_end_MBps']:9.2f} MB/s  (pack + copy in + encode + copy out)")
    if "tiktoken_MBps" in result:
        print(
            f"  tiktoken (host)  : {result['tiktoken_MBps']:9.2f} MB/s  "
            f"ids equal: {result['tiktoken_ids_equal']}"
        )
    return 0


def _bench_tiktoken(tok, texts, args, ids, counts, nbytes) -> dict:
    try:
        import tiktoken
    except ImportError:
        raise CLIError("--compare-tiktoken needs the tiktoken package") from None
    v = tok.vocab
    pattern = v.pattern if args.mode == "exact" else r"(?s:.+)"
    special = v.special_ids
    enc = tiktoken.Encoding(
        f"{v.name}_bench",
        pat_str=pattern,
        special_tokens=dict(v.special_tokens),
        mergeable_ranks={b: i for i, b in enumerate(v.token_bytes) if b is not None and i not in special},
    )
    strs = [t.decode("utf-8") for t in texts]
    ref = enc.encode_ordinary_batch(strs)
    secs = _median_time(lambda: enc.encode_ordinary_batch(strs), args.repeats)
    equal = all(int(counts[b]) == len(r) and ids[b, : len(r)].tolist() == r for b, r in enumerate(ref))
    return dict(tiktoken_s=secs, tiktoken_MBps=nbytes / secs / 1e6, tiktoken_ids_equal=equal)


def add_parsers(sub) -> None:
    b = sub.add_parser(
        "bench",
        help="quick local throughput on a file (default: War and Peace)",
        description="Encode a batch of excerpts of FILE (default: the shared War and "
        "Peace) and report MB/s, on the device and end to end.",
    )
    b.add_argument("file", nargs="?", metavar="FILE", help="UTF-8 text (.gz ok)")
    add_vocab_options(b, " (default: the shared cl100k_base.tiktoken)")
    b.add_argument("--mode", choices=("exact", "bytes"), default="exact")
    b.add_argument("--batch", type=int, default=256, help="strings per call (default 256)")
    b.add_argument("--bytes", type=int, default=512, help="bytes per string (default 512)")
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--block-size", type=int, default=256, choices=(256, 512, 1024))
    b.add_argument("--device", choices=("cpu", "gpu"))
    b.add_argument(
        "--compare-tiktoken",
        action="store_true",
        help="also time tiktoken on the same excerpts and check the ids are equal",
    )
    b.add_argument("--json", action="store_true", help="print a JSON object")
    b.set_defaults(func=cmd_bench)
