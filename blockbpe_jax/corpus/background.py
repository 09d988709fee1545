"""`in_background`: an iterator's items produced by a thread ahead of their consumer (the
corpus job reads blocks and windows ahead of their use; the command starts reading its input
while the vocabulary and the accelerator load); `map_in_background`: the same for a function of
each item, on several threads."""

from __future__ import annotations

import collections
import queue
import threading
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Iterator


def in_background(items: Iterator, depth: int, name: str = "blockbpe-background") -> Iterator:
    """The items of `items`, produced from now on by a thread up to `depth` ahead; its
    exception is raised here, in order, when the consumer reaches it. The thread stops when the
    consumer stops, or is dropped without having started. An iterator this function made is
    returned as it is (its thread already reads ahead: the command's read-ahead windows).
    `name`: the thread's (what a profile or a stack dump shows)."""
    if items in _consumers:
        return items
    q: queue.Queue = queue.Queue(maxsize=depth)
    stop = threading.Event()
    end = object()

    def produce():
        try:
            for item in items:
                while not stop.is_set():
                    try:
                        q.put((item, None), timeout=0.1)
                        break
                    except queue.Full:
                        continue
                if stop.is_set():
                    if hasattr(items, "close"):  # (its own threads, e.g. a reader's, stop too)
                        items.close()
                    return
            q.put((end, None))
        except BaseException as e:  # noqa: BLE001 - handed to the consumer
            q.put((end, e))

    def halt():
        stop.set()
        while thread.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get_nowait()
            except queue.Empty:
                thread.join(timeout=0.1)

    def consume():
        try:
            while True:
                item, error = q.get()
                if item is end:
                    if error is not None:
                        raise error
                    return
                yield item
        finally:
            halt()

    thread = threading.Thread(target=produce, name=name, daemon=True)
    consumer = consume()
    weakref.finalize(consumer, stop.set)  # (a generator never started runs no `finally`)
    _consumers[consumer] = halt
    thread.start()
    return consumer


def map_in_background(fn: Callable, items: Iterator, threads: int, depth: int, name: str) -> Iterator:
    """fn(item) for each item of `items`, in order, computed on `threads` threads at once (fn
    must allow that) and handed on up to `depth` ahead of the consumer (so up to threads +
    depth + 1 items are taken from `items` ahead of it). An exception of fn is raised here, in
    order. One thread: fn runs on the producing thread itself."""
    if threads == 1:
        return in_background(map(fn, items), depth, name)

    def in_order() -> Iterator:
        with ThreadPoolExecutor(threads, name) as pool:
            pending: collections.deque = collections.deque()
            try:
                for item in items:
                    pending.append(pool.submit(fn, item))
                    if len(pending) >= threads:
                        yield pending.popleft().result()
                while pending:
                    yield pending.popleft().result()
            finally:
                for future in pending:  # (stopped early: those not started never start)
                    future.cancel()

    return in_background(in_order(), depth, name)


def stop_background(consumer) -> None:
    """Stops the thread behind an iterator in_background returned, started or not, and waits
    for it: a process must not end while it is inside native code (a daemon thread that takes
    the GIL back during the interpreter's shutdown is unwound through C++ frames, which
    aborts)."""
    halt = _consumers.get(consumer)
    if halt is not None:
        halt()


_consumers: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # in_background's iterators -> halt
