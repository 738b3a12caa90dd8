"""Cross-process synchronization helpers.

``RWLock`` lets many processes read shared parameters at once while an update waits for
exclusive access; ``drain_queue`` empties a multiprocessing queue with guards against
the delay between ``put`` in one process and visibility in another; ``find_port`` picks
a free TCP port for ``torch.distributed`` rendezvous of concurrent runs on one machine.
"""

from __future__ import annotations

import multiprocessing as mp
import operator
import queue
import socket
from typing import Any

__all__ = ["RWLock", "drain_queue", "find_port"]

_BASE_PORT = 29500
_MAX_PORT = 65535


class _LockSide:
    """One side (read or write) of an RWLock, usable as a context manager."""

    def __init__(self, acquire, release):
        self.acquire = acquire
        self.release = release

    def __enter__(self) -> "_LockSide":
        self.acquire()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


class RWLock:
    """Multiple simultaneous readers, one writer; safe across processes.

    Use ``with lock.read_lock:`` around reads and ``with lock.write_lock:`` around writes.
    Readers share a "room" lock through a counter (the first reader in locks it, the last
    out unlocks it, which ``multiprocessing.Lock`` allows from any process); a turnstile
    that a waiting writer holds keeps new readers out so a writer is not starved. Built
    from ``multiprocessing`` primitives of ``ctx`` (default context), so it works in
    forked children and can be passed to spawned ones at process creation.
    """

    def __init__(self, ctx: Any = None):
        ctx = mp.get_context() if ctx is None else ctx
        self._room = ctx.Lock()        # held by the writer, or by the group of readers
        self._turnstile = ctx.Lock()   # held by a writer while it waits and writes
        self._count_lock = ctx.Lock()  # guards the reader count
        self._n_readers = ctx.RawValue("i", 0)
        self.read_lock = _LockSide(self._acquire_read, self._release_read)
        self.write_lock = _LockSide(self._acquire_write, self._release_write)

    def _acquire_read(self) -> None:
        with self._turnstile:
            pass
        with self._count_lock:
            self._n_readers.value += 1
            if self._n_readers.value == 1:
                self._room.acquire()

    def _release_read(self) -> None:
        with self._count_lock:
            if self._n_readers.value <= 0:
                raise RuntimeError("RWLock.read_lock released more times than acquired.")
            self._n_readers.value -= 1
            if self._n_readers.value == 0:
                self._room.release()

    def _acquire_write(self) -> None:
        self._turnstile.acquire()
        self._room.acquire()

    def _release_write(self) -> None:
        self._room.release()
        self._turnstile.release()


def drain_queue(queue_obj: Any, n_sentinel: int = 0, guard_sentinel: bool = False,
                timeout: float | None = None) -> list:
    """Empty a multiprocessing queue and return its contents as a list.

    With ``n_sentinel=0``: ``get(block=False)`` until ``queue.Empty`` (an item put by
    another process moments ago may not be visible yet). With ``n_sentinel > 0``: blocking
    ``get()`` until that many ``None`` sentinels arrived (one per producer that finished);
    sentinels are not returned, and ``timeout`` (seconds per ``get``) raises ``queue.Empty``
    instead of waiting forever on a dead producer. With ``guard_sentinel=True`` (needs
    ``n_sentinel=0``): stop at the first ``None`` and put it back, so a later blocking
    drain with ``n_sentinel > 0`` still sees it.
    """
    try:
        n_sentinel = operator.index(n_sentinel)
    except TypeError:
        raise TypeError(f"n_sentinel must be an integer >= 0; got {n_sentinel!r}.") from None
    if n_sentinel < 0:
        raise ValueError(f"n_sentinel must be >= 0; got {n_sentinel}.")
    if guard_sentinel and n_sentinel:
        raise ValueError(f"guard_sentinel=True needs n_sentinel=0; got n_sentinel={n_sentinel}.")
    contents = []
    if n_sentinel > 0:
        n_seen = 0
        while n_seen < n_sentinel:
            item = queue_obj.get(timeout=timeout)
            if item is None:
                n_seen += 1
            else:
                contents.append(item)
        return contents
    while True:
        try:
            item = queue_obj.get(block=False)
        except queue.Empty:
            return contents
        if item is None and guard_sentinel:
            queue_obj.put(None)
            return contents
        contents.append(item)


def _port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", port))
        except OSError:
            return False
    return True


def find_port(offset: int) -> int:
    """Return the first TCP port at or above ``29500 + offset`` that can be bound.

    Bound on all interfaces (so it is free on localhost too), for initializing
    ``torch.distributed`` in several separate runs on one machine: give each run its own
    offset. Another process may still take the port before it is used.
    """
    try:
        offset = operator.index(offset)
    except TypeError:
        raise TypeError(f"offset must be an integer >= 0; got {offset!r}.") from None
    if not 0 <= offset <= _MAX_PORT - _BASE_PORT:
        raise ValueError(f"offset must be in [0, {_MAX_PORT - _BASE_PORT}]; got {offset}.")
    for port in range(_BASE_PORT + offset, _MAX_PORT + 1):
        if _port_is_free(port):
            return port
    raise RuntimeError(f"No free TCP port in [{_BASE_PORT + offset}, {_MAX_PORT}].")
