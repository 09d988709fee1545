"""`blockbpe-jax`: tokenize files into flat token shards (or padded .npz/.npy), verify them,
benchmark, inspect a vocabulary.

    blockbpe-jax encode book.txt -o out/ --vocab cl100k_base.tiktoken --split lines --verify
    blockbpe-jax verify out/shard --sample 1000
    blockbpe-jax encode data.jsonl --jsonl-field text -o out/ --tiktoken o200k_base --format npz --max-tokens 2048
    blockbpe-jax bench --vocab cl100k_base.tiktoken            # War and Peace from the shared data
    blockbpe-jax info --vocab tokenizer.json
    blockbpe-jax info --vocab my_ranks.tiktoken --pattern cl100k   # a rank file tiktoken does not publish

Exit status: 0 on success, 2 for a usage or input problem (missing file, bad vocabulary, bad
option, bad input line, an output directory that cannot be made; one line on stderr naming the
culprit), 1 when tokenization itself fails, an output cannot be written (a full disk) or verify
finds shards that differ (one line too). A job that fails removes what it wrote, and the output
directory when it made it.
Also runnable as `python -m blockbpe_jax` and `python -m blockbpe_jax.cli`.

One module per job: common (errors, vocabulary and device loading, shared options), encode
(encode, verify), bench, info. Each subcommand module adds its own parser.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Sequence

from ..corpus.documents import chunk_cuts  # noqa: F401 (chunk_cuts: API)
from ..corpus.types import CorpusError, VerifyError
from . import bench, encode, info
from .bench import make_excerpts  # noqa: F401 (API)
from .common import (  # noqa: F401
    PROG,
    CLIError,
    _Parser,
    check_environment,
    load_tokenizer,
    one_line,
    parse_allowed_special,
    version,
)
from .info import exact_mode_status  # noqa: F401 (API)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog=PROG,
        description="Byte-level BPE tokenization on the GPU (JAX FFI).",
        epilog="Exit status: 0 ok, 2 usage/input error, 1 tokenization or write failure.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for module in (encode, bench, info):
        module.add_parsers(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        check_environment()
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
    except OSError as e:  # (an output the job could not write: a full or read-only disk)
        print(f"{PROG}: error: {one_line(e)}", file=sys.stderr)
        return 1
    except Exception as e:
        import jax

        if isinstance(e, jax.errors.JaxRuntimeError):
            print(f"{PROG}: error: tokenization failed: {one_line(e)}", file=sys.stderr)
            return 1
        raise


def console_main() -> int:
    """The command's entry point (`blockbpe-jax`, `python -m blockbpe_jax`): `main` in a process
    of its own, where JAX's GPU client does not preallocate 75% of the GPU's memory (on an
    H200 that first allocation took 1.6 s of a 3.4 s start-up, benchmarks/startup.py; the
    job's buffers are allocated as they grow). XLA_PYTHON_CLIENT_PREALLOCATE, when set, wins.

    Once `main` has returned (every output file written and closed), the process ends without
    the interpreter's teardown: tearing down JAX's GPU client, the job's device and pinned
    buffers and its executables took 0.45 s of a 3.4 s corpus job on the GPU host."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    return end_process(main())


def end_process(code: int) -> int:
    """Ends the process with `code` at once, its standard streams flushed first."""
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # (a closed pipe or stream: nothing more can go there)
            pass
    os._exit(code)
