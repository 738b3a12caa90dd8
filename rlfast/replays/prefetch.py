"""A host replay buffer whose batches a background thread prepares on the device ahead of use.

When the GPU's memory is too short for a device-resident replay, the replay stays in numpy and
each batch is gathered and copied to the device; on the learner's thread that idles the GPU.
:class:`PrefetchingReplay` moves it to a daemon thread: draw indexes, extract the numpy batch,
copy it into a page-locked staging block (all fields packed in one block per slot, so a batch
crosses in one copy), enqueue a ``non_blocking`` copy on a side stream and record an event that
the learner's stream waits on: the host never blocks. Priorities go back the same way: a
``non_blocking`` copy to a pinned buffer and an event that the thread waits on before it
applies them. On the CPU (tests) the same logic runs without streams and events.
"""
from __future__ import annotations

import itertools
import queue
import threading
import time
import traceback
import warnings
import weakref
from typing import Any, Callable

import numpy as np
import torch

from rlfast.replays.async_ import AsyncReplayBuffer
from rlfast.replays.base import _WITH_WEIGHTS, ReplayBufferBase
from rlfast.replays.sampling import PrioritizedSampling
from rlfast.utils.buffer import buffer_copy_, buffer_func
from rlfast.utils.checks import check_int, check_positive

__all__ = ["PrefetchingReplay"]

_ALIGN = 64  # bytes between the starts of packed fields (any dtype's alignment)
_POLL_S = 0.05  # how often waiting threads look at the stop flag and the other side's health
_NUMBERS = itertools.count()  # names the threads PrefetchingReplay-0, -1, ...


class _Slot:
    """One batch's worth of memory: a packed host staging block (pinned on CUDA) and its
    device twin (the same block on the CPU), the typed views of both, the start indexes of the
    batch it holds, and the CUDA events that order the copies (None on the CPU)."""

    def __init__(self, cuda: bool):
        self.host_fields: Any = None      # numpy views of the staging block, batch-shaped
        self.host_block: torch.Tensor | None = None
        self.device_block: torch.Tensor | None = None
        self.device_batch: Any = None     # what sample_batch returns
        self.T_idxs: np.ndarray | None = None
        self.B_idxs: np.ndarray | None = None
        self.priorities: torch.Tensor | None = None  # pinned landing place of new priorities
        self.priorities_given = False
        self.copied = torch.cuda.Event(blocking=True) if cuda else None
        self.released = torch.cuda.Event() if cuda else None
        self.priorities_landed = torch.cuda.Event(blocking=True) if cuda else None


def _pack(batch: Any) -> tuple[list[tuple[tuple[int, ...], torch.dtype, int, int]], int]:
    """``(shape, dtype, offset, nbytes)`` of every field of ``batch`` laid out in one block,
    each start aligned to ``_ALIGN`` bytes, and the block's size in bytes."""
    layout: list[tuple[tuple[int, ...], torch.dtype, int, int]] = []
    offset = 0

    def place(x: Any) -> None:
        nonlocal offset
        x = np.asarray(x)
        dtype = torch.from_numpy(np.empty(0, dtype=x.dtype)).dtype  # (refuses object arrays)
        nbytes = int(x.nbytes)
        layout.append((tuple(x.shape), dtype, offset, nbytes))
        offset += -(-nbytes // _ALIGN) * _ALIGN

    buffer_func(batch, place)
    return layout, max(offset, _ALIGN)


def _carve(block: torch.Tensor, like: Any, layout: list) -> Any:
    """Typed views of ``block`` at the layout's places, in the structure of ``like``."""
    places = iter(layout)

    def view(_: Any) -> torch.Tensor:
        shape, dtype, offset, nbytes = next(places)
        return block[offset:offset + nbytes].view(dtype).view(shape)

    return buffer_func(like, view)


class _Producer:
    """The background side: the buffer and its locks, the slots, the queues between the
    threads and the thread itself. It holds no reference to the :class:`PrefetchingReplay`
    that owns it, so that one can be garbage-collected (which closes this)."""

    def __init__(self, buffer: Any, batch_B: int, device: torch.device, n_slots: int):
        self.buffer = buffer
        self.batch_B = batch_B
        self.device = device
        self.cuda = device.type == "cuda"
        self.stream = torch.cuda.Stream(device=device) if self.cuda else None
        self.is_async = isinstance(buffer, AsyncReplayBuffer)
        if self.is_async:  # its reader-writer lock, shared with other processes
            self.inner, self.write_lock = buffer.buffer, buffer.rw_lock.write_lock
            self.sampling_lock: Callable[[], Any] = buffer._sampling_lock
        else:
            self.inner, self.write_lock = buffer, threading.Lock()
            self.sampling_lock = lambda: self.write_lock
        self.todo: queue.Queue = queue.Queue()  # ("fill", slot) / ("priorities", ...) / ...
        self.ready: queue.Queue = queue.Queue()  # filled slots, in the order drawn
        for _ in range(n_slots):
            self.todo.put(("fill", _Slot(self.cuda)))
        self.closing = threading.Event()
        self.stopped = threading.Event()
        self.error: BaseException | None = None
        self.error_traceback = ""
        self.thread: threading.Thread | None = None

    # ---------------------------------------------------------------- the thread
    def run(self) -> None:
        try:
            if self.cuda:
                torch.cuda.set_device(self.device)
            while not self.stopped.is_set():
                try:
                    item = self.todo.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                kind = item[0]
                if kind == "stop":
                    break
                if kind == "priorities":
                    self.apply_priorities(*item[1:])
                elif kind == "flush":
                    item[1].put(True)
                elif not self.closing.is_set():  # "fill": a free slot
                    self.fill(item[1])
                    self.ready.put(item[1])
        except BaseException as exc:  # noqa: BLE001 -- relayed to the consumer
            self.error_traceback = traceback.format_exc()
            self.error = exc  # last: the consumer reads the traceback once it sees this
            self.ready.put(None)  # wakes a waiting consumer

    def fill(self, slot: _Slot) -> None:
        """Draw and extract a batch under the lock, stage it and start its copy to the device."""
        with self.sampling_lock():
            T_idxs, B_idxs, is_weights = self.inner.sample_idxs(self.batch_B)
            batch = self.inner.extract_batch(T_idxs, B_idxs)
        if is_weights is not None:
            batch = _WITH_WEIGHTS[type(batch)](*batch, is_weights)
        if slot.host_block is None:
            self.allocate(slot, batch)
        if self.cuda:
            slot.copied.synchronize()  # the last copy out of this staging block has finished
        buffer_copy_(slot.host_fields, batch)
        slot.T_idxs, slot.B_idxs = np.asarray(T_idxs), np.asarray(B_idxs)
        slot.priorities_given = False
        if self.cuda:
            with torch.cuda.stream(self.stream):
                self.stream.wait_event(slot.released)  # the learner is done with the old batch
                slot.device_block.copy_(slot.host_block, non_blocking=True)
                slot.copied.record(self.stream)

    def allocate(self, slot: _Slot, batch: Any) -> None:
        """The slot's packed blocks, once, shaped by its first batch (pinned on CUDA)."""
        layout, nbytes = _pack(batch)
        slot.host_block = torch.empty(nbytes, dtype=torch.uint8, pin_memory=self.cuda)
        slot.host_fields = buffer_func(_carve(slot.host_block, batch, layout),
                                       lambda t: t.numpy())
        if self.cuda:
            with torch.cuda.stream(self.stream):
                slot.device_block = torch.empty(nbytes, dtype=torch.uint8, device=self.device)
        else:
            slot.device_block = slot.host_block
        slot.device_batch = _carve(slot.device_block, batch, layout)
        # Where the learner's priorities land (float32, as losses give; else reallocated once).
        slot.priorities = torch.empty(self.batch_B, dtype=torch.float32, pin_memory=self.cuda)

    def apply_priorities(self, slot: _Slot, T_idxs: np.ndarray, B_idxs: np.ndarray) -> None:
        """Wait for the priorities' copy to the host, then set them in the tree (locked)."""
        if self.cuda:
            slot.priorities_landed.synchronize()
        values = slot.priorities.to(torch.float64, copy=True).numpy()  # the buffer is reused
        if self.is_async:
            self.buffer.update_priorities(T_idxs, B_idxs, values)  # under its write lock
        else:
            with self.write_lock:
                self.inner.scheme.update_priorities(T_idxs, B_idxs, values)

    # ---------------------------------------------------------------- the consumer's side
    def raise_if_failed(self) -> None:
        if self.error is not None:
            exc = self.error
            raise RuntimeError(
                f"PrefetchingReplay: the prefetching thread failed with {type(exc).__name__}: "
                f"{exc}\n\nTraceback in the prefetching thread:\n{self.error_traceback}") from exc

    def wait(self, from_queue: queue.Queue, timeout: float, what: str) -> Any:
        """The next item of ``from_queue``, unless the thread fails or ``timeout`` s pass."""
        deadline = time.monotonic() + timeout
        while True:
            self.raise_if_failed()
            try:
                return from_queue.get(timeout=_POLL_S)
            except queue.Empty:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"PrefetchingReplay: no {what} after {timeout} s although the "
                                   f"prefetching thread is alive (is another process holding "
                                   f"the replay's lock?); raise timeout= if batches are slow")


def _shutdown(producer: _Producer, join_timeout: float) -> None:
    """Stop the thread after the priorities already handed over (no new fills); join it."""
    producer.closing.set()
    producer.todo.put(("stop",))
    thread = producer.thread
    if thread is None or thread is threading.current_thread():  # (collected by the thread)
        return
    thread.join(join_timeout)
    producer.stopped.set()  # a thread still busy skips the rest of its queue
    if thread.is_alive():
        warnings.warn(f"PrefetchingReplay: thread {thread.name} did not stop within "
                      f"{join_timeout} s (blocked on the replay's lock?); it is a daemon thread "
                      f"and stops once it is released", RuntimeWarning, stacklevel=3)


class PrefetchingReplay:
    """A numpy replay buffer with a daemon thread that keeps ``depth`` batches ready on
    ``device``, so the learner never waits for sampling or host-to-device copies.

    ``buffer``: any :class:`~rlfast.replays.base.ReplayBufferBase` (uniform or prioritized,
    frames, sequences, time-limit), guarded here by a ``threading.Lock`` around appends, draws,
    extraction and priority updates; or an :class:`~rlfast.replays.async_.AsyncReplayBuffer`
    (another process appends), guarded by its own reader-writer lock. The thread starts at the
    first :meth:`sample_batch` (so it never samples before the buffer holds enough data). It
    has ``depth + 1`` slots: ``depth`` batches ready plus the one the learner holds. **A
    returned batch stays valid until the next** :meth:`sample_batch` **or** :meth:`close`;
    then its slot is refilled (on CUDA only after the learner's stream finished the work
    enqueued before that call), so clone what must outlive it. Priorities given through
    :meth:`update_batch_priorities` reach the tree a few batches late (the batches already
    prepared were drawn before), as in Ape-X; likewise ``set_beta``. The thread draws with
    numpy's global RNG like the buffers, but its draws interleave with appends and priority
    updates by timing, so runs are not bit-reproducible: the plain host replay stays the
    reproducible default on the CPU. Other attributes (``T``, ``B``, ``size``, ``nbytes``,
    ``storage``, ``priority_tree``, ``alpha``, ``beta``, ...) are the buffer's. Use as a
    context manager or call :meth:`close`.
    """

    def __init__(self, buffer: Any, batch_B: int, device: torch.device | str = "cpu",
                 depth: int = 3, timeout: float = 60.0, join_timeout: float = 10.0):
        if not isinstance(buffer, (ReplayBufferBase, AsyncReplayBuffer)):
            raise TypeError(f"PrefetchingReplay wraps a replay buffer (ReplayBufferBase or "
                            f"AsyncReplayBuffer); got {type(buffer).__name__}")
        self.buffer = buffer
        me = "PrefetchingReplay"
        self.batch_B = check_int(batch_B, "batch_B", minimum=1, owner=me)
        self.depth = check_int(depth, "depth", minimum=1, owner=me)
        self.timeout = check_positive(timeout, "timeout", owner=me)
        self.join_timeout = check_positive(join_timeout, "join_timeout", owner=me)
        self.device = torch.device(device)
        if self.device.type not in ("cpu", "cuda"):
            raise ValueError(f"PrefetchingReplay: device must be 'cpu' or 'cuda[:i]'; got "
                             f"{device!r}")
        if self.device.type == "cuda":
            if not torch.cuda.is_available():
                raise ValueError(f"PrefetchingReplay: device {device!r} asked for but CUDA is "
                                 f"not available; use device='cpu'")
            if self.device.index is None:
                self.device = torch.device("cuda", torch.cuda.current_device())
        self._producer = _Producer(buffer, self.batch_B, self.device, self.depth + 1)
        self._held: _Slot | None = None
        self._finalizer = weakref.finalize(self, _shutdown, self._producer, self.join_timeout)

    # ---------------------------------------------------------------- batches
    def sample_batch(self, batch_B: int) -> Any:
        """The next prepared batch (the buffer's batch type, ``is_weights`` included when
        prioritized) as tensors on ``device``; releases the batch returned before. Blocks only
        when none is ready: up to ``timeout`` seconds, then TimeoutError; a failure in the
        prefetching thread is raised here as RuntimeError naming it, with its traceback."""
        if batch_B != self.batch_B:
            raise ValueError(f"PrefetchingReplay prepares batches of batch_B={self.batch_B}; "
                             f"got batch_B={batch_B!r}")
        producer = self._open_producer()
        if producer.thread is None:  # started lazily: the buffer holds data by now
            producer.thread = threading.Thread(target=producer.run, daemon=True,
                                               name=f"PrefetchingReplay-{next(_NUMBERS)}")
            producer.thread.start()
        if self._held is not None:
            slot, self._held = self._held, None
            if producer.cuda:
                slot.released.record(torch.cuda.current_stream(self.device))
            producer.todo.put(("fill", slot))
        slot = producer.wait(producer.ready, self.timeout, "batch ready")
        if slot is None:  # the sentinel of a failed thread: raises its error
            producer.raise_if_failed()
        if producer.cuda:
            stream = torch.cuda.current_stream(self.device)
            stream.wait_event(slot.copied)
            slot.device_block.record_stream(stream)  # freed at close only after its use here
        self._held = slot
        return slot.device_batch

    def update_batch_priorities(self, priorities: Any) -> None:
        """New raw priorities (one per sample, e.g. |TD error|; stored as ``p ** alpha``) of the
        batch last returned, read without a host synchronisation: copied (non_blocking) to a
        pinned buffer and applied by the prefetching thread after the batches it has already
        prepared. Call it once per batch; an error in the values (negative, not finite)
        surfaces at a later :meth:`sample_batch` or at :meth:`flush`."""
        producer = self._open_producer()
        if not isinstance(producer.inner.scheme, PrioritizedSampling):
            raise TypeError(f"{type(self.buffer).__name__} is not prioritized: it has no "
                            f"update_batch_priorities; use a Prioritized* replay buffer")
        slot = self._held
        if slot is None:
            raise RuntimeError("PrefetchingReplay.update_batch_priorities called before any "
                               "sample_batch (or after close)")
        if slot.priorities_given:
            raise RuntimeError("PrefetchingReplay.update_batch_priorities called twice for the "
                               "same batch; call it once per sample_batch")
        p = torch.as_tensor(priorities).detach()
        if p.numel() != self.batch_B:
            raise ValueError(f"expected {self.batch_B} priorities (one per sample of the last "
                             f"batch); got {p.numel()} (shape {tuple(p.shape)})")
        if slot.priorities.dtype != p.dtype:
            slot.priorities = torch.empty(self.batch_B, dtype=p.dtype, pin_memory=producer.cuda)
        slot.priorities.copy_(p.reshape(-1), non_blocking=True)
        if producer.cuda:
            slot.priorities_landed.record(torch.cuda.current_stream(self.device))
        slot.priorities_given = True
        producer.todo.put(("priorities", slot, slot.T_idxs, slot.B_idxs))

    def flush(self) -> None:
        """Wait (up to ``timeout``) until the priorities handed over so far are in the tree,
        e.g. before saving the replay; a host wait, not for the update loop."""
        producer = self._open_producer()
        if producer.thread is None:
            return
        flushed: queue.Queue = queue.Queue()
        producer.todo.put(("flush", flushed))
        producer.wait(flushed, self.timeout, "flush")

    @property
    def last_indexes(self) -> tuple[np.ndarray, np.ndarray]:
        """``(T_idxs, B_idxs)`` the thread drew for the batch last returned (host arrays)."""
        if self._held is None:
            raise RuntimeError("PrefetchingReplay.last_indexes: no batch is held")
        return self._held.T_idxs, self._held.B_idxs

    @property
    def n_ready(self) -> int:
        """How many batches are prepared and waiting now (diagnostics; approximate)."""
        return self._producer.ready.qsize()

    # ---------------------------------------------------------------- the buffer, locked
    def append_samples(self, samples: Any) -> tuple[int, np.ndarray]:
        """The buffer's ``append_samples`` under the (write) lock."""
        with self._producer.write_lock:
            return self._producer.inner.append_samples(samples)

    def sample_idxs(self, batch_B: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """The buffer's ``sample_idxs`` under the lock (draws beside the thread's)."""
        with self._producer.sampling_lock():
            return self._producer.inner.sample_idxs(batch_B)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """The buffer's numpy batch at these starts, under the lock."""
        with self._producer.sampling_lock():
            return self._producer.inner.extract_batch(T_idxs, B_idxs)

    def set_beta(self, beta: float) -> None:
        """The buffer's ``set_beta`` under the lock; batches already prepared keep the
        importance weights of the old exponent."""
        with self._producer.write_lock:
            self._producer.inner.set_beta(beta)

    def __getattr__(self, name: str) -> Any:
        # Only for names not found normally: the buffer's (T, B, size, nbytes, storage,
        # priority_tree, alpha, beta, t, samples, windows, batch_T, ...).
        if name == "buffer" or name.startswith("_"):  # (not set yet: no recursion)
            raise AttributeError(name)
        return getattr(self.buffer, name)

    # ---------------------------------------------------------------- lifetime
    def _open_producer(self) -> _Producer:
        if not self._finalizer.alive:
            raise RuntimeError("PrefetchingReplay is closed")
        return self._producer

    def close(self) -> None:
        """Apply the priorities already handed over, stop the thread and join it (waiting at
        most ``join_timeout`` seconds, then warning); idempotent. Batches returned before are
        invalid afterwards."""
        self._held = None
        self._finalizer()

    def __enter__(self) -> PrefetchingReplay:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()
