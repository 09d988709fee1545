"""Reading the corpus job's inputs: text/JSONL(.gz) files -> documents (`Doc`), with a one-line
CorpusError naming the file and line for every bad input (unreadable file, bad JSONL line,
missing field, invalid UTF-8)."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from pathlib import Path
from typing import Iterator, NamedTuple, Sequence

from .shards import CorpusError

SPLITS_HELP = "lines (one document per non-empty line), file (one per file), chunk:N (pieces of at most N bytes)"
class Doc(NamedTuple):
    data: bytes
    file_index: int
    position: int  # 1-based line for lines/jsonl, byte offset for chunk, 0 for file
    consumed: int  # input bytes this document accounts for (progress)


def parse_split(text: str) -> tuple[str, int]:
    if text in ("lines", "file"):
        return text, 0
    if text.startswith("chunk:"):
        try:
            n = int(text[6:])
        except ValueError:
            n = 0
        if n >= 4:
            return "chunk", n
    raise CorpusError(f"--split {text!r}: expected {SPLITS_HELP}; N >= 4")


def check_inputs(paths: Sequence[str | os.PathLike]) -> list[Path]:
    out = [Path(p).expanduser() for p in paths]
    for p in out:
        if not p.exists():
            raise CorpusError(f"{p}: no such file")
        if not p.is_file():
            raise CorpusError(f"{p}: not a regular file")
        if not os.access(p, os.R_OK):
            raise CorpusError(f"{p}: cannot read: permission denied")
    return out


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def check_utf8(data: bytes, path: Path, line: int | None) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = _line_of(data, e.start) if line is None else line
        raise CorpusError(f"{path}:{line}: not valid UTF-8 (byte {e.start}: {e.reason})") from None


def chunk_cuts(data: bytes, n: int) -> Iterator[tuple[int, int]]:
    """(start, end) of consecutive pieces of at most n bytes, each ending on a UTF-8 character
    boundary, cut just before the last whitespace of the piece's second half when there is one
    (pre-tokenizer pieces start with their space, so such a cut changes few tokens)."""
    i, size = 0, len(data)
    while i < size:
        j = min(size, i + n)
        if j < size:
            ws = max(data.rfind(c, i + n // 2, j) for c in (b" ", b"\n", b"\t", b"\r"))
            if ws > i:
                j = ws
            else:
                while j > i and (data[j] & 0xC0) == 0x80:
                    j -= 1
                if j == i:  # cannot happen in valid UTF-8 with n >= 4
                    j = min(size, i + n)
        yield i, j
        i = j


def _jsonl_doc(line: bytes, path: Path, line_no: int, field: str) -> bytes:
    try:
        obj = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}:{line_no}: not valid UTF-8 (byte {e.start}: {e.reason})") from None
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}:{line_no}: not valid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise CorpusError(f"{path}:{line_no}: not a JSON object ({type(obj).__name__})")
    if field not in obj:
        raise CorpusError(f"{path}:{line_no}: no field {field!r} (--jsonl-field)")
    text = obj[field]
    if not isinstance(text, str):
        raise CorpusError(f"{path}:{line_no}: field {field!r} is {type(text).__name__}, not a string")
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise CorpusError(f"{path}:{line_no}: field {field!r} is not valid UTF-8 (lone surrogate "
                          f"at character {e.start})") from None


def iter_documents(paths: Sequence[Path], split: str = "lines", chunk: int = 0,
                   jsonl_field: str | None = None) -> Iterator[Doc]:
    """The documents of the files, in order; CorpusError (file:line) on a bad input."""
    for fi, path in enumerate(paths):
        line_no = 0
        try:
            f = gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")
            with f:
                if jsonl_field is not None or split == "lines":
                    for line_no, line in enumerate(f, start=1):
                        if jsonl_field is not None:
                            if line.strip():
                                yield Doc(_jsonl_doc(line, path, line_no, jsonl_field), fi, line_no, len(line))
                            continue
                        body = line[:-1] if line.endswith(b"\n") else line
                        body = body[:-1] if body.endswith(b"\r") else body
                        if body:
                            check_utf8(body, path, line_no)
                            yield Doc(body, fi, line_no, len(line))
                    continue
                data = f.read()
        except (OSError, EOFError, zlib.error) as e:
            where = f"{path}:{line_no + 1}" if line_no else str(path)
            raise CorpusError(f"{where}: cannot read: {_one_line(e)}") from None
        check_utf8(data, path, None)
        if split == "file":
            yield Doc(data, fi, 0, len(data))
        else:
            for a, b in chunk_cuts(data, chunk):
                yield Doc(data[a:b], fi, a, b - a)


def _one_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines()[0] if text else type(e).__name__)[:300]
