"""The corpus job's progress on stderr (`corpus.encode_documents_of`): a tqdm bar, or a counter
where tqdm is not installed."""

from __future__ import annotations

import sys
import threading
import time


class Progress:
    """tqdm over the input bytes encoded (MB/s; a window's bytes once its ids are written) with
    tokens/s, when importable; else a counter on stderr. Its clock starts with the job, although
    the bar is drawn at the first update (early errors print one line): a job of one window
    showed that window's bytes over no time (8 GB/s for a job of 8 MB/s). (Updated by the
    shard writer's threads: one at a time.)"""

    def __init__(self, total: int | None, enabled: bool):
        self.bar, self.total, self.enabled = None, total, enabled
        self.done = self.docs = self.tokens = 0
        self.t0 = self.last = time.monotonic()
        self._lock = threading.Lock()

    def update(self, nbytes: int, ndocs: int, ntokens: int) -> None:
        with self._lock:
            self._update(nbytes, ndocs, ntokens)

    def _update(self, nbytes: int, ndocs: int, ntokens: int) -> None:
        if self.enabled is True and self.bar is None:  # lazily: early errors print one line
            try:
                from tqdm import tqdm

                self.bar = tqdm(
                    total=self.total,
                    unit="B",
                    unit_scale=True,
                    unit_divisor=1000,
                    desc="encode",
                    file=sys.stderr,
                    dynamic_ncols=True,
                )
                ago = time.monotonic() - self.t0  # (its elapsed time and first rate: the job's)
                self.bar.start_t -= ago
                self.bar.last_print_t -= ago
            except ImportError:
                self.enabled = "counter"
        self.done, self.docs, self.tokens = self.done + nbytes, self.docs + ndocs, self.tokens + ntokens
        rate = self.tokens / max(time.monotonic() - self.t0, 1e-9)
        if self.bar is not None:
            self.bar.update(nbytes)
            self.bar.set_postfix_str(f"{self.docs} docs, {rate / 1e6:.2f} M tok/s", refresh=False)
        elif self.enabled == "counter" and time.monotonic() - self.last > 0.5:
            self.last = time.monotonic()
            print(f"\r{self._text()}", end="", file=sys.stderr, flush=True)

    def _text(self) -> str:
        secs = max(time.monotonic() - self.t0, 1e-9)
        return (
            f"encode: {self.docs} documents, {self.done / 1e6:.2f} MB ({self.done / secs / 1e6:.1f} "
            f"MB/s, {self.tokens / secs / 1e6:.2f} M tokens/s)"
        )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.enabled == "counter":
            print(f"\r{self._text()}", file=sys.stderr)
