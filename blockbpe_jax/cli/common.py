"""What every subcommand shares: the one-line error, vocabulary and device loading, option
checks and the vocabulary options."""

from __future__ import annotations

import argparse
import os
import re
from pathlib import Path

from ..corpus.inputs.lines import one_line

PROG = "blockbpe-jax"


class CLIError(Exception):
    """A usage or input problem: reported as one line, exit status 2."""

    def __init__(self, message: str, prog: str = PROG):
        super().__init__(message)
        self.prog = prog


def check_environment() -> None:
    """Settings the package reads from the environment, checked before any work (a bad one is a
    usage error, not a traceback halfway through a job)."""
    from ..corpus.device_split import environment_setting
    from ..disk_cache import max_bytes

    try:
        max_bytes()
        environment_setting()
    except ValueError as e:
        raise CLIError(str(e)) from None


class _Parser(argparse.ArgumentParser):
    # argparse prints the usage block and exits; we want one line and our own exit path.
    def error(self, message):
        raise CLIError(f"{message} (see {self.prog} --help)", prog=self.prog)


def version() -> str:
    try:
        from .. import __version__

        return __version__
    except ImportError:  # pragma: no cover
        return "?"


def check_positive(*named: tuple[str, int | None]) -> None:
    """CLIError for the first (option, value) whose value is given and below 1 (the job's
    rule: corpus.types.check_positive)."""
    from ..corpus.types import check_positive as job_rule

    try:
        job_rule(*named)
    except (TypeError, ValueError) as e:
        raise CLIError(str(e)) from None


# --------------------------------------------------------------------------------------------
# Vocabulary
# --------------------------------------------------------------------------------------------


def load_tokenizer(
    vocab: str | os.PathLike | None = None, tiktoken_name: str | None = None, pattern: str | None = None
):
    """A Tokenizer from a vocabulary path (file, or a directory holding tokenizer.json or
    tokenizer.model) or a tiktoken encoding name (tiktoken's cache; TIKTOKEN_CACHE_DIR works
    offline). pattern: --pattern's value (`resolve_pattern`), for a tiktoken-format rank file.
    Raises CLIError with a one-line message."""
    import blockbpe_jax as bb

    if vocab is not None and tiktoken_name is not None:
        raise CLIError("give either --vocab or --tiktoken, not both")
    regex = resolve_pattern(pattern)
    if regex is not None and tiktoken_name is not None:
        raise CLIError("--pattern applies to --vocab FILE (a tiktoken encoding brings its own pattern)")
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
            raise CLIError(f"tiktoken encoding {tiktoken_name!r}: {one_line(e)}") from None
        except Exception as e:  # network / cache failures come in many types
            cache = os.environ.get("TIKTOKEN_CACHE_DIR", "<tiktoken's default cache>")
            raise CLIError(
                f"cannot load tiktoken encoding {tiktoken_name!r} ({type(e).__name__}: "
                f"{one_line(e, 120)}); offline, point TIKTOKEN_CACHE_DIR at a cache that holds "
                f"it (now {cache}) or pass --vocab FILE"
            ) from None
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
        if regex is not None:
            return bb.Tokenizer(bb.load_tiktoken_file(_rank_file(path), pattern=regex))
        return bb.Tokenizer.from_file(path)
    except bb.VocabError as e:
        raise CLIError(one_line(e)) from None
    except (OSError, UnicodeError) as e:
        raise CLIError(f"{path}: cannot read vocabulary: {one_line(e)}") from None


def resolve_pattern(text: str | None) -> str | None:
    """--pattern NAME|REGEX -> the regex: a known pattern's name (cl100k, o200k, r50k, llama3,
    or a tiktoken encoding's, e.g. cl100k_base) gives its pattern; other text is a regex,
    compiled here (a name we do not know, or a regex the pre-tokenizer compiler refuses: one-line
    CLIError). The compiled pattern is kept: the tokenizer that uses it compiles it no more."""
    if text is None:
        return None
    from ..vocab import KNOWN_PATTERNS, patterns

    name = patterns.pattern_name_known(text)
    if name is not None:
        return KNOWN_PATTERNS[name]
    if re.fullmatch(r"[A-Za-z][\w.-]*", text):  # (a word: meant as a name, never a useful regex)
        raise CLIError(
            f"--pattern: {text!r} is not a known pattern name (known: {', '.join(sorted(KNOWN_PATTERNS))}, "
            f"or a tiktoken encoding's such as cl100k_base); or give a regex"
        )
    from .. import pretok

    try:
        pretok.from_tiktoken_pattern(text).operand()
    except (ValueError, RecursionError) as e:  # (PretokenizerUnsupported is a ValueError)
        raise CLIError(f"--pattern: {one_line(e)}") from None
    return text


def _rank_file(path: Path) -> Path:
    """`path`, when --pattern can apply to it: a tiktoken-format rank file (not a tokenizer.json,
    GGUF or SentencePiece model, which bring their own pre-tokenizer or none)."""
    from ..vocab import gguf, sentencepiece

    try:
        with open(path, "rb") as f:
            head = f.read(64)
    except OSError:
        return path  # (the loader says why)
    if path.suffix == ".json" or gguf.is_gguf(head) or sentencepiece.is_sentencepiece_model(head):
        raise CLIError(
            f"--pattern applies to tiktoken-format rank files (.tiktoken, Llama 3's tokenizer.model); "
            f"{path} brings its own pre-tokenizer"
        )
    return path


def parse_allowed_special(text: str, tok):
    """ "none" | "all" | "A,B,..." -> the `allowed_special` argument of encode."""
    if text in ("none", "all"):
        return text
    names = [s for s in text.split(",") if s]
    unknown = [s for s in names if s not in tok.vocab.special_tokens]
    if unknown:
        known = sorted(tok.vocab.special_tokens)
        shown = ", ".join(known[:8]) + (", ..." if len(known) > 8 else "")
        raise CLIError(
            f"--allowed-special: {', '.join(unknown)} not special tokens of "
            f"{tok.vocab.name} (known: {shown or 'none'})"
        )
    return set(names)


def add_vocab_options(p, required_hint: str) -> None:
    g = p.add_argument_group("vocabulary")
    g.add_argument(
        "--vocab",
        metavar="PATH",
        help=".tiktoken file, Llama-3 tokenizer.model, tokenizer.json, or a directory "
        "holding one" + required_hint,
    )
    g.add_argument(
        "--tiktoken",
        metavar="NAME",
        help="tiktoken encoding name (e.g. cl100k_base), loaded through tiktoken's cache "
        "(TIKTOKEN_CACHE_DIR works offline)",
    )
    g.add_argument(
        "--pattern",
        metavar="NAME|REGEX",
        help="the pre-tokenizer pattern of a --vocab rank file (.tiktoken) that is not one of "
        "tiktoken's or Llama 3's own (those are known by their contents): a known pattern "
        "(cl100k, o200k, r50k, llama3, or an encoding name such as cl100k_base) or a regex",
    )


# --------------------------------------------------------------------------------------------
# Device and mode
# --------------------------------------------------------------------------------------------


def check_mode(tok, mode: str, device=None) -> None:
    """Fails early (CLIError) when `mode` cannot run with this vocabulary and build: the mode's
    rules (`primitive.resolve_mode`, on the host tables), and on an accelerator a build with the CUDA
    module. (A tiny encode call checked this before; its executable cost the command ~0.1 s,
    and ~1 s in its first process.)"""
    import jax

    from .. import native
    from ..ops import primitive

    device = device or jax.devices()[0]
    if device.platform != "cpu" and not native.HAS_CUDA_MODULE:
        raise CLIError(
            f"--device: this build has no CUDA module for {device} (nvcc was not found when it was built)"
        )
    try:
        primitive.resolve_mode(tok.tables("none", host=True), mode)
    except ValueError as e:
        raise CLIError(f"--mode {mode}: {one_line(e)}") from None


def device_named(name: str | None):
    import jax

    if name is None:
        return jax.devices()[0]
    try:
        return jax.devices(name)[0]
    except RuntimeError as e:
        raise CLIError(f"--device {name}: {one_line(e)}") from None


def tokenizer_and_device(args):
    """load_tokenizer and device_named at once: the accelerator's start-up (seconds on a GPU)
    runs in a thread while the vocabulary loads; a vocabulary error is still reported first."""
    import threading

    found: dict = {}

    def start():
        try:
            found["device"] = device_named(args.device)
        except BaseException as e:  # noqa: BLE001 - re-raised below, in order
            found["error"] = e

    thread = threading.Thread(target=start, daemon=True)
    thread.start()
    try:
        tok = load_tokenizer(args.vocab, args.tiktoken, args.pattern)
    finally:  # (a process ending while the thread is inside the client's start-up aborts)
        thread.join()
    if "error" in found:
        raise found["error"]
    return tok, found["device"]
