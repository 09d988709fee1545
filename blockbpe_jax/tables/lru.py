"""A least-recently-used cache bounded by entries and bytes, for what a tokenizer keeps per set
of allowed specials (sets.py) and for the compiled searches of literal sets (specials.py)."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Callable


class BoundedCache:
    """A thread-safe least-recently-used cache bounded by its entries and their bytes (as the
    caller counts them). The newest entry is kept even when it alone is over the bytes."""

    def __init__(self, max_entries: int, max_bytes: int):
        self.max_entries, self.max_bytes = max_entries, max_bytes
        self._items: OrderedDict = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def get(self, key):
        with self._lock:
            entry = self._items.get(key)
            if entry is None:
                return None
            self._items.move_to_end(key)
            return entry[0]

    def put(self, key, value, nbytes: int):
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self._bytes -= old[1]
            self._items[key] = (value, nbytes)
            self._bytes += nbytes
            while len(self._items) > 1 and (
                len(self._items) > self.max_entries or self._bytes > self.max_bytes
            ):
                _, (_, size) = self._items.popitem(last=False)
                self._bytes -= size
        return value

    def get_or_build(self, key, build: Callable, size: Callable[[object], int]):
        value = self.get(key)
        if value is None:  # (built outside the lock: two threads may both build; one is kept)
            value = build()
            self.put(key, value, size(value))
        return value

    def __len__(self) -> int:
        return len(self._items)

    @property
    def nbytes(self) -> int:
        return self._bytes
