"""Buffers of finished work kept for the next: the corpus job's window buffers
(corpus.device.WindowBuffers) and its readers' block buffers (corpus.inputs.files.BlockBuffers).
A fresh buffer costs its allocation and page faults (page-locked memory its registration too),
often more than the work it holds."""

from __future__ import annotations

import threading


class Spares:
    """Buffers kept by key, shared by threads, the most recent last."""

    def __init__(self):
        self._items: list = []  # (key, group, buffer)
        self._lock = threading.Lock()

    def take(self, key, size: int):
        """The most recent kept buffer of `key` whose `.size` is `size`, taken out, or None."""
        with self._lock:
            for k in range(len(self._items) - 1, -1, -1):
                if self._items[k][0] == key and self._items[k][2].size == size:
                    return self._items.pop(k)[2]
        return None

    def keep(self, key, buffer, limit: int, group=None) -> None:
        """Keeps `buffer` under `key`, dropping the oldest beyond `limit` of its group (those
        kept with the same `group`, by default the same key)."""
        group = key if group is None else group
        with self._lock:
            self._items.append((key, group, buffer))
            same = [k for k, (_, g, _) in enumerate(self._items) if g == group]
            for k in reversed(same[:-limit]):
                del self._items[k]
