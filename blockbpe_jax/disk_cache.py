"""Where blockbpe_jax keeps what it caches on disk, and how an entry is written.

One root for every cache: $BLOCKBPE_CACHE_DIR, default $XDG_CACHE_HOME/blockbpe_jax (else
~/.cache/blockbpe_jax); "" turns caching off. Below it one folder per kind: ranks/ (parsed
rank files, vocab/tiktoken_files.py), pretok/ (compiled pre-tokenizer automata), tables/ (built
vocabulary tables), and for the CLI executables/ (the corpus job's, executable_cache.py)."""

from __future__ import annotations

import io
import os
import threading
from pathlib import Path

import numpy as np


def cache_dir(kind: str) -> Path | None:
    """The folder of one kind of cache entry, or None when caching is off."""
    root = os.environ.get("BLOCKBPE_CACHE_DIR")
    if root == "":
        return None
    base = (
        Path(root)
        if root
        else Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "blockbpe_jax"
    )
    return base / kind


def kept_npz(kind: str, key: str | None, build, *, to_arrays, from_arrays, compressed: bool = False):
    """build()'s result, kept in `kind`/`key`.npz: from_arrays(the entry's arrays) when there is
    a readable entry, else built and written as to_arrays(result). A damaged entry (np.load
    checks each member's CRC) is built again and written over; key None, or caching off, is
    build() alone."""
    directory = cache_dir(kind) if key else None
    path = directory / f"{key}.npz" if directory else None
    if path is not None and path.exists():
        try:
            with np.load(path) as z:
                return from_arrays(z)
        except Exception:  # noqa: BLE001 (damaged in any way: built again below)
            pass
    built = build()
    if path is not None:
        save_npz(path, to_arrays(built), compressed=compressed)
    return built


def save_npz(path: Path, arrays: dict, *, compressed: bool = False) -> None:
    """Writes an .npz entry (`save_bytes`)."""
    buf = io.BytesIO()
    (np.savez_compressed if compressed else np.savez)(buf, **arrays)
    save_bytes(path, buf.getvalue())


def save_bytes(path: Path, data: bytes) -> None:
    """Writes an entry atomically (a reader never sees half of one, and writers on threads or
    in other processes each write their own file first); does nothing where the disk is
    read-only: a cache is an optimisation."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        pass
