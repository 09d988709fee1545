"""The corpus job's reader of lines and JSONL in Python: the path a block takes where the native
reader (ffi/core/jsonl.h) gives up, C-level calls first (`fast_block`: json's scanner per line),
then line by line (`line_documents`, json.loads as a user would), which raises the one-line
file:line CorpusError of a bad input. Both accept exactly what the native reader accepts."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Iterator

import numpy as np

from .compressed import READ_ERRORS, open_input
from ..types import CorpusError


def _line_of(data: bytes, offset: int) -> int:
    return data.count(b"\n", 0, offset) + 1


def check_utf8(data: bytes, path: Path, line: int | None) -> None:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = _line_of(data, e.start) if line is None else line
        raise CorpusError(f"{path}:{line}: not valid UTF-8 (byte {e.start}: {e.reason})") from None


def jsonl_document(line: bytes, path: Path, line_no: int, field: str) -> bytes:
    try:
        obj = json.loads(line.decode("utf-8"))
    except UnicodeDecodeError as e:
        raise CorpusError(f"{path}:{line_no}: not valid UTF-8 (byte {e.start}: {e.reason})") from None
    except json.JSONDecodeError as e:
        raise CorpusError(f"{path}:{line_no}: not valid JSON: {e}") from None
    except (ValueError, RecursionError) as e:  # an integer of too many digits, deep nesting
        raise CorpusError(f"{path}:{line_no}: not valid JSON: {one_line(e)}") from None
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
        raise CorpusError(
            f"{path}:{line_no}: field {field!r} is not valid UTF-8 (lone surrogate at character {e.start})"
        ) from None


JSON_SCAN = json.JSONDecoder().scan_once  # json.loads without its Python-level wrapper


def lines_of(path: Path) -> Iterator[bytes]:
    try:
        with open_input(path) as f:
            yield from f
    except READ_ERRORS as e:
        raise _ReadError(e) from None


class _ReadError(Exception):
    pass


def fast_block(block: bytes, field: str | None):
    """(blobs, indices of the lines kept) of a block of lines, or None when any line needs the
    line-by-line reader (invalid UTF-8 or JSON, a missing or non-string field, ...)."""
    try:
        text = block.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if field is None:
        lines = block.split(b"\n")
        if b"\r" in block:
            lines = [x[:-1] if x.endswith(b"\r") else x for x in lines]
        lens = np.fromiter(map(len, lines), np.int64, count=len(lines))
        kept = np.flatnonzero(lens)
        return [lines[i] for i in kept.tolist()], kept
    lines = list(map(str.strip, text.split("\n"), itertools.repeat(" \t\r")))
    lens = np.fromiter(map(len, lines), np.int64, count=len(lines))
    kept = np.flatnonzero(lens)
    lines = [lines[i] for i in kept.tolist()]
    try:
        parsed = list(map(JSON_SCAN, lines, itertools.repeat(0)))
        if any(end != n for (_, end), n in zip(parsed, lens[kept].tolist())):
            return None
        texts = [obj[field] for obj, _ in parsed]
        if not all(type(obj) is dict for obj, _ in parsed) or not all(type(t) is str for t in texts):
            return None
        return list(map(str.encode, texts)), kept
    except (StopIteration, ValueError, KeyError, TypeError, UnicodeEncodeError, RecursionError):
        return None


def line_documents(lines, path: Path, line_base: int, field: str | None) -> Iterator[tuple[bytes, int]]:
    """(document, line) of each line, one at a time; raises the file:line CorpusError."""
    line_no = line_base
    try:
        for line_no, line in enumerate(lines, start=line_base + 1):
            if field is not None:
                if line.strip():
                    yield jsonl_document(line, path, line_no, field), line_no
                continue
            body = line[:-1] if line.endswith(b"\n") else line
            body = body[:-1] if body.endswith(b"\r") else body
            if body:
                check_utf8(body, path, line_no)
                yield body, line_no
    except _ReadError as e:
        where = f"{path}:{line_no + 1}" if line_no else str(path)
        raise CorpusError(f"{where}: cannot read: {one_line(e.args[0])}") from None


def one_line(e: BaseException | str, limit: int = 300) -> str:
    """An exception's message (or a text) as one line: its first, at most `limit` characters."""
    text = str(e).strip()
    text = text.splitlines()[0] if text else type(e).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."
