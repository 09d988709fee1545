"""`blockbpe-jax`: tokenize files into flat token shards (or padded .npz/.npy), verify them,
benchmark, inspect a vocabulary.

    blockbpe-jax encode book.txt -o out/ --vocab cl100k_base.tiktoken --split lines --verify
    blockbpe-jax verify out/shard --sample 1000
    blockbpe-jax encode data.jsonl --jsonl-field text -o out/ --tiktoken o200k_base --format npz --max-tokens 2048
    blockbpe-jax bench --vocab cl100k_base.tiktoken            # War and Peace from the shared data
    blockbpe-jax info --vocab tokenizer.json

Exit status: 0 on success, 2 for a usage or input problem (missing file, bad vocabulary, bad
option, bad input line; one line on stderr naming the culprit), 1 when tokenization itself
fails or verify finds shards that differ.
Also runnable as `python -m blockbpe_jax`.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from .documents import SPLITS_HELP, check_utf8, chunk_cuts  # noqa: F401 (chunk_cuts: API)
from .shards import CorpusError, VerifyError

PROG = "blockbpe-jax"


class CLIError(Exception):
    """A usage or input problem: reported as one line, exit status 2."""

    def __init__(self, message: str, prog: str = PROG):
        super().__init__(message)
        self.prog = prog


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage block and exits; we want one line and our own exit path.
    def error(self, message):
        raise CLIError(f"{message} (see {self.prog} --help)", prog=self.prog)


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


def load_tokenizer(vocab: str | os.PathLike | None = None, tiktoken_name: str | None = None):
    """A Tokenizer from a vocabulary path (file, or a directory holding tokenizer.json or
    tokenizer.model) or a tiktoken encoding name (tiktoken's cache; TIKTOKEN_CACHE_DIR works
    offline). Raises CLIError with a one-line message."""
    import blockbpe_jax as bb

    if vocab is not None and tiktoken_name is not None:
        raise CLIError("give either --vocab or --tiktoken, not both")
    if tiktoken_name is not None:
        try:
            import tiktoken
        except ImportError:
            raise CLIError("--tiktoken needs the tiktoken package (pip install tiktoken)") from None
        try:
            enc = tiktoken.get_encoding(tiktoken_name)
        except ValueError as e:
            if "Unknown encoding" in str(e):
                names = ", ".join(tiktoken.list_encoding_names())
                raise CLIError(f"unknown tiktoken encoding {tiktoken_name!r} (known: {names})") from None
            raise CLIError(f"tiktoken encoding {tiktoken_name!r}: {_one_line(e)}") from None
        except Exception as e:  # network / cache failures come in many types
            cache = os.environ.get("TIKTOKEN_CACHE_DIR", "<tiktoken's default cache>")
            raise CLIError(f"cannot load tiktoken encoding {tiktoken_name!r} ({type(e).__name__}: "
                           f"{_one_line(e, 120)}); offline, point TIKTOKEN_CACHE_DIR at a cache that holds "
                           f"it (now {cache}) or pass --vocab FILE") from None
        try:
            return bb.Tokenizer.from_tiktoken(enc)
        except bb.VocabError as e:
            raise CLIError(str(e)) from None
    if vocab is None:
        raise CLIError("no vocabulary: give --vocab PATH or --tiktoken NAME")
    path = Path(vocab).expanduser()
    if not path.exists():
        raise CLIError(f"{path}: vocabulary not found")
    if path.is_dir():
        for name in ("tokenizer.json", "tokenizer.model"):
            if (path / name).is_file():
                path = path / name
                break
        else:
            raise CLIError(f"{path}: a directory without tokenizer.json or tokenizer.model")
    try:
        return bb.Tokenizer.from_file(path)
    except bb.VocabError as e:
        raise CLIError(_one_line(e)) from None
    except (OSError, UnicodeError) as e:
        raise CLIError(f"{path}: cannot read vocabulary: {_one_line(e)}") from None


def _shared_vocab_default() -> Path | None:
    from ._data import find_data_dir

    root = find_data_dir()
    path = root / "vocab" / "tiktoken" / "cl100k_base.tiktoken" if root else None
    return path if path is not None and path.is_file() else None


def _one_line(e: BaseException | str, limit: int = 300) -> str:
    text = str(e).strip()
    text = text.splitlines()[0] if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def parse_allowed_special(text: str, tok):
    """"none" | "all" | "A,B,..." -> the `allowed_special` argument of encode."""
    if text in ("none", "all"):
        return text
    names = [s for s in text.split(",") if s]
    unknown = [s for s in names if s not in tok.vocab.special_tokens]
    if unknown:
        known = sorted(tok.vocab.special_tokens)
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise CLIError(f"--allowed-special: {', '.join(unknown)} not special tokens of "
                       f"{tok.vocab.name} (known: {shown or 'none'})")
    return set(names)


def _check_mode(tok, mode: str, device=None) -> None:
    """Fails early (CLIError) when `mode` cannot run with this vocabulary and build."""
    import jax

    from . import ops
    from .tokenizer import pack_strings

    device = device or jax.devices()[0]
    data, lengths = pack_strings([b"ok"], max_len=16)
    try:  # one tiny call: the same checks and errors as the real thing
        ops.encode(jax.device_put(data, device), jax.device_put(lengths, device),
                   tok.tables("none", device), max_tokens=16, mode=mode)
    except (ValueError, jax.errors.JaxRuntimeError) as e:
        raise CLIError(f"--mode {mode}: {_one_line(e)}") from None


def _device(name: str | None):
    import jax

    if name is None:
        return jax.devices()[0]
    try:
        return jax.devices(name)[0]
    except RuntimeError as e:
        raise CLIError(f"--device {name}: {_one_line(e)}") from None


def _tokenizer_and_device(args):
    """load_tokenizer and _device at once: the accelerator's start-up (seconds on a GPU) runs
    in a thread while the vocabulary loads; a vocabulary error is still reported first."""
    import threading

    found: dict = {}

    def start():
        try:
            found["device"] = _device(args.device)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in order
            found["error"] = e

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    tok = load_tokenizer(args.vocab, args.tiktoken)
    thread.join()
    if "error" in found:
        raise found["error"]
    return tok, found["device"]


# --------------------------------------------------------------------------------------------
# encode, verify (the work is in blockbpe_jax/corpus.py)
# --------------------------------------------------------------------------------------------


def cmd_encode(args) -> int:
    from . import corpus

    paths = corpus.check_inputs(args.inputs)
    split, chunk = corpus.parse_split(args.split)
    for name, val in (("--batch-size", args.batch_size), ("--shard-size", args.shard_size),
                      ("--max-tokens", args.max_tokens), ("--max-len", args.max_len),
                      ("--batch-bytes", args.batch_bytes), ("--shard-tokens", args.shard_tokens)):
        if val is not None and val < 1:
            raise CLIError(f"{name} must be a positive integer, got {val}")
    if chunk and args.max_len and chunk > args.max_len:
        raise CLIError(f"--split chunk:{chunk} makes documents longer than --max-len {args.max_len}")
    if args.format in ("flat", "arrayrecord") and (args.max_tokens is not None or args.pad_id is not None):
        raise CLIError(f"--max-tokens and --pad-id apply to --format npz/npy ({args.format} shards keep "
                       f"every token)")
    if args.verify is not None and args.format != "flat":
        raise CLIError("--verify checks flat shards (--format flat)")
    tok, device = _tokenizer_and_device(args)
    _check_mode(tok, args.mode, device)
    allowed = parse_allowed_special(args.allowed_special, tok)
    name = args.prefix if args.prefix is not None else ("shard-" if args.format in ("npz", "npy") else "shard")
    vocab_arg = (dict(tiktoken=args.tiktoken) if args.tiktoken
                 else dict(vocab=str(Path(args.vocab).expanduser().resolve())))
    meta = corpus.encode_files(
        tok, paths, os.path.join(os.path.expanduser(args.output), name), fmt=args.format,
        split=args.split, jsonl_field=args.jsonl_field, mode=args.mode, allowed_special=allowed,
        batch_bytes=args.batch_bytes, max_docs=args.batch_size, max_len=args.max_len,
        shard_tokens=args.shard_tokens, shard_docs=args.shard_size, max_tokens=args.max_tokens,
        pad_id=args.pad_id or 0, block_size=args.block_size, device=device,
        overwrite=args.overwrite, progress=not args.quiet,
        meta=dict(tool=f"{PROG} {_version()}", vocab_arg=vocab_arg, device=str(device)))
    mb = sum(p.stat().st_size for p in paths) / 1e6
    secs = meta["seconds"]
    print(f"{meta['documents']} documents, {meta['tokens']} tokens -> {len(meta['shards'])} shard(s) "
          f"in {args.output} ({secs:.1f} s, {mb / max(secs, 1e-9):.1f} MB/s of input)")
    truncated = meta.get("truncated_documents", 0)
    if truncated:
        print(f"warning: {truncated} document(s) had more than --max-tokens {args.max_tokens} tokens "
              f"and were truncated (counts hold their true lengths)", file=sys.stderr)
    if args.verify is not None:
        return _verify(os.path.join(os.path.expanduser(args.output), name), tok, args.verify, 0)
    return 0


def _verify(prefix: str, tok, sample: int, seed: int) -> int:
    from . import corpus

    r = corpus.verify(prefix, tok, sample=sample, seed=seed)
    print(f"verify: ok: {r['shards']} shard(s), {r['documents']} documents, {r['tokens']} tokens "
          f"consistent; {r['checked']} sampled documents equal to {r['reference']}")
    return 0


def cmd_verify(args) -> int:
    from .shards import load_sidecar

    if args.sample < 0:
        raise CLIError(f"--sample must be >= 0, got {args.sample}")
    meta, _ = load_sidecar(args.prefix)
    if args.vocab is None and args.tiktoken is None:
        arg = meta.get("vocab_arg") or {}
        if not arg:
            raise CLIError(f"{args.prefix}: the sidecar names no vocabulary: give --vocab or --tiktoken")
        tok = load_tokenizer(arg.get("vocab"), arg.get("tiktoken"))
    else:
        tok = load_tokenizer(args.vocab, args.tiktoken)
    if tok.vocab.n_vocab != meta["n_vocab"]:
        raise CLIError(f"{tok.vocab.source}: n_vocab {tok.vocab.n_vocab}, the shards were written "
                       f"with {meta['n_vocab']} ({meta['vocab_source']})")
    return _verify(args.prefix, tok, args.sample, args.seed)


# --------------------------------------------------------------------------------------------
# bench
# --------------------------------------------------------------------------------------------


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


def cmd_bench(args) -> int:
    import jax

    from . import ops
    from .tokenizer import pack_strings

    if args.file is not None:
        path = Path(args.file).expanduser()
        if not path.is_file():
            raise CLIError(f"{path}: no such file")
    else:
        from ._data import find_data_dir

        root = find_data_dir()
        path = root / "corpus" / "war_and_peace_en.txt" if root else None
        if path is None or not path.is_file():
            raise CLIError("no input: give a FILE (the shared War and Peace was not found; "
                           "set BLOCKBPE_DATA)")
    vocab = args.vocab
    if vocab is None and args.tiktoken is None:
        vocab = _shared_vocab_default()
        if vocab is None:
            raise CLIError("no vocabulary: give --vocab PATH or --tiktoken NAME")
    for name, val in (("--batch", args.batch), ("--bytes", args.bytes), ("--repeats", args.repeats)):
        if val < 1:
            raise CLIError(f"{name} must be a positive integer, got {val}")
    tok = load_tokenizer(vocab, args.tiktoken)
    device = _device(args.device)
    _check_mode(tok, args.mode, device)
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
    run = jax.jit(lambda d, n, t: ops.encode(d, n, t, max_tokens=T, mode=args.mode,
                                             block_size=args.block_size, check_lengths=False))
    t = time.perf_counter()
    ids, counts = jax.block_until_ready(run(d_data, d_len, tables))
    compile_s = time.perf_counter() - t
    dev_s = _median_time(lambda: jax.block_until_ready(run(d_data, d_len, tables)), args.repeats)

    def end_to_end():
        dd, ll = pack_strings(texts, max_len=args.bytes)
        jax.device_get(run(jax.device_put(dd, device), jax.device_put(ll, device), tables))

    e2e_s = _median_time(end_to_end, args.repeats)
    ntok = int(np.asarray(counts).sum())
    result = dict(vocab=tok.vocab.name, mode=args.mode, device=str(device), file=str(path),
                  batch=args.batch, bytes_per_string=args.bytes, input_bytes=nbytes, tokens=ntok,
                  block_size=args.block_size, repeats=args.repeats, compile_s=round(compile_s, 3),
                  device_s=dev_s, device_MBps=nbytes / dev_s / 1e6, tokens_per_s=ntok / dev_s,
                  end_to_end_s=e2e_s, end_to_end_MBps=nbytes / e2e_s / 1e6)
    if args.compare_tiktoken:
        result.update(_bench_tiktoken(tok, texts, args, np.asarray(ids), np.asarray(counts), nbytes))
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"{tok.vocab.name}, mode={args.mode}, {device}: {args.batch} x {args.bytes} B "
          f"({nbytes / 1e6:.2f} MB, {ntok} tokens) from {path.name}")
    print(f"  on-device encode : {result['device_MBps']:9.2f} MB/s  {ntok / dev_s / 1e6:7.2f} M tokens/s "
          f"(median of {args.repeats}; compile {compile_s:.2f} s)")
    print(f"  end to end       : {result['end_to_end_MBps']:9.2f} MB/s  (pack + copy in + encode + copy out)")
    if "tiktoken_MBps" in result:
        print(f"  tiktoken (host)  : {result['tiktoken_MBps']:9.2f} MB/s  "
              f"ids equal: {result['tiktoken_ids_equal']}")
    return 0


def _bench_tiktoken(tok, texts, args, ids, counts, nbytes) -> dict:
    try:
        import tiktoken
    except ImportError:
        raise CLIError("--compare-tiktoken needs the tiktoken package") from None
    v = tok.vocab
    pattern = v.pattern if args.mode == "exact" else r"(?s:.+)"
    special = v.special_ids
    enc = tiktoken.Encoding(f"{v.name}_bench", pat_str=pattern, special_tokens=dict(v.special_tokens),
                            mergeable_ranks={b: i for i, b in enumerate(v.token_bytes)
                                             if b is not None and i not in special})
    strs = [t.decode("utf-8") for t in texts]
    ref = enc.encode_ordinary_batch(strs)
    secs = _median_time(lambda: enc.encode_ordinary_batch(strs), args.repeats)
    equal = all(int(counts[b]) == len(r) and ids[b, : len(r)].tolist() == r for b, r in enumerate(ref))
    return dict(tiktoken_s=secs, tiktoken_MBps=nbytes / secs / 1e6, tiktoken_ids_equal=equal)


# --------------------------------------------------------------------------------------------
# info
# --------------------------------------------------------------------------------------------


def exact_mode_status(tok) -> tuple[bool, str]:
    """(usable, explanation) for mode="exact" with this vocabulary in this build."""
    try:
        _check_mode(tok, "exact")
    except CLIError as e:
        return False, str(e).removeprefix("--mode exact: ")
    stages = tok.vocab.pretokenizer.stages if tok.vocab.pretokenizer else ()
    name = tok.vocab.pattern_name or "compiled from its regex"
    return True, f"yes (pre-tokenizer: {name}" + (f", {len(stages)} stages)" if len(stages) > 1 else ")")


def cmd_info(args) -> int:
    import jax

    from . import ops

    tok = load_tokenizer(args.vocab, args.tiktoken)
    v = tok.vocab
    from .ops import TABLE_OPERANDS
    tables = dict(zip(TABLE_OPERANDS, tok.host_tables("all" if v.special_tokens else "none")))
    exact_ok, exact_text = exact_mode_status(tok)
    specials = sorted(v.special_tokens.items(), key=lambda kv: kv[1])
    info = dict(
        name=v.name, source=v.source, n_vocab=v.n_vocab, mergeable_tokens=len(v.mergeable_ids),
        merges=len(v.merges), special_tokens=dict(specials), pattern_name=v.pattern_name,
        pattern=v.pattern, whole_piece_shortcut=v.whole_piece_shortcut, unsupported=v.unsupported,
        exact_mode=exact_ok, exact_mode_detail=exact_text, max_piece_len=tok.max_piece_len,
        table_bytes=sum(a.nbytes for a in tables.values()),
        tables={k: dict(shape=list(a.shape), dtype=str(a.dtype), bytes=int(a.nbytes))
                for k, a in tables.items()},
        cuda_module=ops.HAS_CUDA_MODULE, devices=[str(d) for d in jax.devices()],
    )
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    shown = specials if args.all_specials else specials[:10]
    special_text = ", ".join(f"{s}={i}" for s, i in shown)
    if len(shown) < len(specials):
        special_text += f", ... ({len(specials) - len(shown)} more; --all-specials)"
    rows = [
        ("vocabulary", v.name),
        ("source", v.source),
        ("n_vocab", f"{v.n_vocab} ({len(v.mergeable_ids)} mergeable, {len(v.merges)} merge pairs)"),
        ("special tokens", f"{len(specials)}" + (f": {special_text}" if specials else "")),
        ("pattern", f"{v.pattern_name or 'unrecognised'}: {v.pattern}" if v.pattern or not v.pretokenizer
         else " | ".join(f"{st.behaviour} {st.pattern!r}" for st in v.pretokenizer.stages)),
        ("whole-piece shortcut", "yes" if v.whole_piece_shortcut else "no"),
        ("exact mode", exact_text if exact_ok else f"no: {exact_text}"),
        ("bytes mode", "yes"),
        ("max piece length", f"{tok.max_piece_len} bytes"),
        ("table bytes", f"{info['table_bytes']:,} ("
         + ", ".join(f"{k} {a.nbytes:,}" for k, a in tables.items()) + ")"),
        ("backends", f"cpu{', cuda' if ops.HAS_CUDA_MODULE else ''} built; JAX devices: "
         + ", ".join(info["devices"])),
    ]
    width = max(len(k) for k, _ in rows)
    for k, val in rows:
        print(f"{k:<{width}}  {val}")
    return 0


# --------------------------------------------------------------------------------------------
# Parser and entry point
# --------------------------------------------------------------------------------------------


def _version() -> str:
    try:
        from . import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "?"


def _add_vocab_options(p, required_hint: str) -> None:
    g = p.add_argument_group("vocabulary")
    g.add_argument("--vocab", metavar="PATH",
                   help=".tiktoken file, Llama-3 tokenizer.model, tokenizer.json, or a directory "
                        "holding one" + required_hint)
    g.add_argument("--tiktoken", metavar="NAME",
                   help="tiktoken encoding name (e.g. cl100k_base), loaded through tiktoken's cache "
                        "(TIKTOKEN_CACHE_DIR works offline)")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog=PROG, description="Byte-level BPE tokenization on the GPU (JAX FFI).",
                     epilog="Exit status: 0 ok, 2 usage/input error, 1 tokenization failure.")
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True

    e = sub.add_parser("encode", help="tokenize text or JSONL files into flat token shards",
                       description="Tokenize text or JSONL(.gz) files. --format flat (default): "
                                   "DIR/NAME_<k>.bin (every document's ids back to back, uint16 when "
                                   "n_vocab <= 65536 else uint32, little-endian) + DIR/NAME_<k>.idx "
                                   "(int64 offsets in tokens, n_docs + 1) + DIR/NAME.json. npz/npy: "
                                   "padded ids int32[N, T], counts, file_index, position + manifest.json.")
    e.add_argument("inputs", nargs="+", metavar="FILE",
                   help="UTF-8 text or JSONL files (.gz ok), or .parquet files (with --field; needs pyarrow)")
    e.add_argument("-o", "--output", required=True, metavar="DIR", help="output directory")
    _add_vocab_options(e, " (this or --tiktoken is required)")
    e.add_argument("--mode", choices=("exact", "bytes"), default="exact",
                   help="exact: ids equal to tiktoken / HF (default); bytes: BlockBPE paper mode")
    e.add_argument("--split", default="lines", metavar="HOW", help=f"documents: {SPLITS_HELP}; "
                   "default lines (ignored with --jsonl-field)")
    e.add_argument("--field", "--jsonl-field", dest="jsonl_field", metavar="FIELD",
                   help="inputs are JSONL (each line's FIELD, a string, is one document) or parquet "
                        "(column FIELD, one document per row)")
    e.add_argument("--format", choices=("flat", "arrayrecord", "npz", "npy"), default="flat",
                   help="flat: .bin/.idx token shards (default); arrayrecord: NAME_<k>.array_record, "
                        "one record per document (its ids as little-endian uint16/uint32 bytes; needs "
                        "array_record); npz: padded, one file per shard; npy: padded, one file per "
                        "array per shard")
    e.add_argument("--prefix", metavar="NAME",
                   help="shard file name prefix (default: shard for flat, shard- for npz/npy)")
    e.add_argument("--batch-bytes", type=int, default=4 << 20, metavar="N",
                   help="padded bytes (documents x power-of-two width) per encode call (default "
                        "4 MiB); a longer document is encoded alone, whole")
    e.add_argument("--batch-size", type=int, metavar="B", help="at most B documents per encode call")
    e.add_argument("--shard-tokens", type=int, default=1 << 28, metavar="N",
                   help="flat/arrayrecord: start a new shard after N tokens (default 2**28)")
    e.add_argument("--shard-size", type=int, metavar="N",
                   help="documents per shard (default: 65536 for npz/npy, no limit for flat)")
    e.add_argument("--max-tokens", type=int, metavar="T",
                   help="npz/npy: fixed width of ids; longer documents are truncated (counts keep "
                        "true lengths). Default: each shard as wide as its longest")
    e.add_argument("--max-len", type=int, metavar="L",
                   help="fixed byte width of every batch (documents longer than L are an error). "
                        "Default: the longest in the batch, rounded up to a power of two")
    e.add_argument("--allowed-special", default="none", metavar="WHICH",
                   help="special tokens recognised in the text: none (default), all, or A,B,...")
    e.add_argument("--pad-id", type=int, help="npz/npy: id after each row's tokens (default 0)")
    e.add_argument("--block-size", type=int, default=256, choices=(256, 512, 1024),
                   help="CUDA threads per string")
    e.add_argument("--device", choices=("cpu", "gpu"), help="default: JAX's default device")
    e.add_argument("--verify", type=int, nargs="?", const=1000, metavar="N",
                   help="then verify the shards, re-encoding N sampled documents (default 1000)")
    e.add_argument("--overwrite", action="store_true", help="replace an existing output")
    e.add_argument("-q", "--quiet", action="store_true", help="no progress bar")
    e.set_defaults(func=cmd_encode)

    c = sub.add_parser("verify", help="check flat shards and re-encode a sample with the reference",
                       description="Check every shard's .idx/.bin against each other and the sidecar, "
                                   "then re-read the inputs and re-encode a random sample of documents "
                                   "with the reference (tiktoken for tiktoken-format vocabularies, "
                                   "else the CPU path). Exit 1 when they differ.")
    c.add_argument("prefix", metavar="PREFIX", help="DIR/NAME as encode wrote it (DIR/NAME.json), or DIR")
    _add_vocab_options(c, " (default: the one the sidecar names)")
    c.add_argument("--sample", type=int, default=1000, metavar="N",
                   help="documents to re-encode (default 1000; 0: consistency only)")
    c.add_argument("--seed", type=int, default=0)
    c.set_defaults(func=cmd_verify)

    b = sub.add_parser("bench", help="quick local throughput on a file (default: War and Peace)",
                       description="Encode a batch of excerpts of FILE (default: the shared War and "
                                   "Peace) and report MB/s, on the device and end to end.")
    b.add_argument("file", nargs="?", metavar="FILE", help="UTF-8 text (.gz ok)")
    _add_vocab_options(b, " (default: the shared cl100k_base.tiktoken)")
    b.add_argument("--mode", choices=("exact", "bytes"), default="exact")
    b.add_argument("--batch", type=int, default=256, help="strings per call (default 256)")
    b.add_argument("--bytes", type=int, default=512, help="bytes per string (default 512)")
    b.add_argument("--repeats", type=int, default=5)
    b.add_argument("--block-size", type=int, default=256, choices=(256, 512, 1024))
    b.add_argument("--device", choices=("cpu", "gpu"))
    b.add_argument("--compare-tiktoken", action="store_true",
                   help="also time tiktoken on the same excerpts and check the ids are equal")
    b.add_argument("--json", action="store_true", help="print a JSON object")
    b.set_defaults(func=cmd_bench)

    i = sub.add_parser("info", help="describe a vocabulary",
                       description="Vocabulary size, special tokens, pre-tokenizer pattern, exact "
                                   "mode support, device table sizes.")
    _add_vocab_options(i, " (this or --tiktoken is required)")
    i.add_argument("--all-specials", action="store_true", help="list every special token")
    i.add_argument("--json", action="store_true", help="print a JSON object")
    i.set_defaults(func=cmd_info)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except CLIError as e:
        print(f"{e.prog}: error: {e}", file=sys.stderr)
        return 2
    except VerifyError as e:
        print(f"{PROG}: verify failed: {e}", file=sys.stderr)
        return 1
    except CorpusError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2
    except SystemExit as e:  # --help / --version
        return e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130
    except Exception as e:
        import jax

        if isinstance(e, jax.errors.JaxRuntimeError):
            print(f"{PROG}: error: tokenization failed: {_one_line(e)}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
