"""Where blockbpe_jax keeps what it caches on disk, how an entry is written, and how much the
cache may hold.

One root for every cache: $BLOCKBPE_CACHE_DIR, default $XDG_CACHE_HOME/blockbpe_jax (else
~/.cache/blockbpe_jax); "" turns caching off. Below it one folder per kind: ranks/ (parsed
rank files, vocab/tiktoken_files.py), pretok/ (compiled pre-tokenizer automata), tables/ (built
vocabulary tables), and for the CLI executables/ (the corpus job's, corpus/executable_cache.py).

Entries are keyed by what they are built from, so a new version, vocabulary or option adds
entries and old ones are never read again: each write trims the cache to $BLOCKBPE_CACHE_MAX_MB
(default 2048), least recently used first (a load marks its entry used: `used`)."""

from __future__ import annotations

import io
import os
import threading
import time
from pathlib import Path

import numpy as np

KINDS = ("ranks", "pretok", "tables", "executables")
DEFAULT_MAX_MB = 2048
STALE_TMP_SECONDS = 3600  # a temporary file this old is a crashed writer's


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
                loaded = from_arrays(z)
            used(path)
            return loaded
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
    limit = max_bytes()  # (a malformed limit raises before anything is written)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
        tmp.write_bytes(data)
        tmp.replace(path)
    except OSError:
        return
    trim(path.parent.parent, limit, keep=path)  # (an entry is <root>/<kind>/<name>)


def usage() -> dict | None:
    """The cache's folder, limit and bytes held per kind (None when caching is off)."""
    root = cache_dir("")
    if root is None:
        return None
    held = dict.fromkeys(KINDS, 0)
    for kind, name, st in _files(root):
        if not name.endswith(".tmp"):
            held[kind] += st.st_size
    return dict(folder=str(root), limit_bytes=max_bytes(), bytes=held)


def used(path: Path) -> None:
    """Marks an entry as just used (its modification time: access times are often not kept)."""
    try:
        os.utime(path)
    except OSError:
        pass


def max_bytes() -> int:
    """The most bytes the cache may hold: $BLOCKBPE_CACHE_MAX_MB, default DEFAULT_MAX_MB."""
    text = os.environ.get("BLOCKBPE_CACHE_MAX_MB", "").strip()
    try:
        mb = float(text) if text else DEFAULT_MAX_MB
    except ValueError:
        mb = -1.0
    if not mb >= 0:  # (also NaN)
        raise ValueError(f"BLOCKBPE_CACHE_MAX_MB must be a number of megabytes, 0 or more, got {text!r}")
    return int(mb * 1e6)


def trim(root: Path, limit: int, keep: Path | None = None) -> None:
    """Removes the least recently used entries of every kind below `root` until they hold at
    most `limit` bytes (never `keep`, the entry just written), and temporary files that
    crashed writers left. Files that vanish meanwhile (another process trimming) are skipped."""
    entries, total, now = [], 0, time.time()
    for _, name, st in _files(root):
        if name.endswith(".tmp"):
            if now - st.st_mtime > STALE_TMP_SECONDS:
                _remove(name)
            continue
        entries.append((st.st_mtime, name, st.st_size))
        total += st.st_size
    for _, name, size in sorted(entries):
        if total <= limit:
            break
        if keep is not None and name == str(keep):
            continue
        _remove(name)
        total -= size


def _files(root: Path):
    """(kind, path, stat) of each file of each kind below `root` (one that vanishes while it is
    listed, removed by another process, is left out)."""
    for kind in KINDS:
        try:
            with os.scandir(root / kind) as it:
                listed = [e for e in it if e.is_file()]
        except OSError:
            continue
        for e in listed:
            try:
                yield kind, e.path, e.stat()
            except OSError:
                continue


def _remove(name: str) -> None:
    try:
        os.unlink(name)
    except OSError:
        pass
