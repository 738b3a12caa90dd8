"""Replay buffers shared between processes: one appends while another samples.

An asynchronous runner keeps sampling in one process while the optimizer trains in another;
both must see one replay buffer. :class:`AsyncReplayBuffer` *has* a buffer built with
``share_memory=True`` (every array and every cursor, counter and flag on OS shared memory, so
a forked child writes what its parent reads) and a reader-writer lock around it: appends and
priority updates take the write lock, sampling the read lock (several samplers may read at
once), except unique prioritized sampling, which briefly zeroes tree leaves and so writes.
Batches are gathered by fancy indexing, i.e. copied out of shared memory while the lock is
held, so a batch never changes under the learner after the lock is released.

Each concrete class only names the buffer it wraps (``BufferCls``); everything else the inner
buffer offers (``T``, ``B``, ``samples``, ``priority_tree``, ``windows``, ...) is delegated.
Build it in the parent before forking the processes that use it.
"""
from __future__ import annotations

from typing import Any, ClassVar

import numpy as np

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.non_sequence import (PrioritizedReplayBuffer, PrioritizedReplayFrameBuffer,
                                         UniformReplayBuffer, UniformReplayFrameBuffer)
from rlfast.replays.sampling import PrioritizedSampling
from rlfast.replays.sequence import (PrioritizedSequenceReplayBuffer,
                                     PrioritizedSequenceReplayFrameBuffer,
                                     UniformSequenceReplayBuffer,
                                     UniformSequenceReplayFrameBuffer)
from rlfast.replays.sum_tree import SumTree
from rlfast.replays.storage import ReplayStorage
from rlfast.replays.time_limit import TlPrioritizedReplayBuffer, TlUniformReplayBuffer
from rlfast.utils.processes import mp_context
from rlfast.utils.synchronize import RWLock

__all__ = [
    "AsyncReplayBuffer", "AsyncUniformReplayBuffer", "AsyncPrioritizedReplayBuffer",
    "AsyncUniformReplayFrameBuffer", "AsyncPrioritizedReplayFrameBuffer",
    "AsyncUniformSequenceReplayBuffer", "AsyncPrioritizedSequenceReplayBuffer",
    "AsyncUniformSequenceReplayFrameBuffer", "AsyncPrioritizedSequenceReplayFrameBuffer",
    "AsyncTlUniformReplayBuffer", "AsyncTlPrioritizedReplayBuffer",
]

_OWN = ("buffer", "rw_lock")  # never delegated (guards __getattr__ during unpickling)


class AsyncReplayBuffer:
    """A replay buffer on shared memory behind a reader-writer lock, for several processes.

    ``BufferCls(*args, share_memory=True, **kwargs)`` is built as ``self.buffer`` and
    ``RWLock(ctx)`` as ``self.rw_lock`` (``ctx``: a multiprocessing context, default
    :func:`~rlfast.utils.processes.mp_context`, i.e. fork). ``append_samples``,
    ``update_batch_priorities``, ``update_priorities`` and ``set_beta`` hold the write lock;
    ``sample_batch``, ``sample_idxs`` and ``extract_batch`` the read lock (the write lock for
    prioritized buffers with ``unique=True``). Other attributes are the inner buffer's. Note
    that ``update_batch_priorities`` refers to the last batch sampled *in the calling
    process*; ``update_priorities`` names its starts explicitly.
    """

    BufferCls: ClassVar[type[ReplayBufferBase] | None] = None
    frame_based: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.BufferCls is not None:
            cls.frame_based = bool(cls.BufferCls.frame_based)

    def __init__(self, *args: Any, ctx: Any = None, **kwargs: Any):
        if self.BufferCls is None:
            raise TypeError(f"{type(self).__name__} names no BufferCls; use one of the Async* "
                            f"subclasses (e.g. AsyncUniformReplayBuffer) or set BufferCls")
        if "share_memory" in kwargs:
            raise TypeError(f"{type(self).__name__} always builds its buffer with "
                            f"share_memory=True; do not pass share_memory "
                            f"(got share_memory={kwargs['share_memory']!r})")
        self.buffer = self.BufferCls(*args, share_memory=True, **kwargs)
        self.rw_lock = RWLock(mp_context() if ctx is None else ctx)

    def __getattr__(self, name: str) -> Any:
        # Called only for names not found normally: delegate to the inner buffer.
        if name in _OWN or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.buffer, name)

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(T={self.T}, B={self.B}, t={self.t}, "
                f"n_appended={self.storage.n_appended})")

    # ---------------------------------------------------------------- locked operations
    def _sampling_lock(self) -> Any:
        """The read lock, or the write lock when sampling modifies the tree (unique draws)."""
        scheme = self.buffer.scheme
        if isinstance(scheme, PrioritizedSampling) and scheme.unique:
            return self.rw_lock.write_lock
        return self.rw_lock.read_lock

    def append_samples(self, samples: Any) -> tuple[int, np.ndarray]:
        """Write ``[T_in, B]`` samples at the cursor under the write lock; returns
        ``(T_in, rows written)`` as the inner buffer's ``append_samples``."""
        with self.rw_lock.write_lock:
            return self.buffer.append_samples(samples)

    def sample_batch(self, batch_B: int) -> Any:
        """A batch of ``batch_B`` samples as torch tensors, gathered under the read lock
        (copies: nothing in it aliases the shared arrays)."""
        with self._sampling_lock():
            return self.buffer.sample_batch(batch_B)

    def sample_idxs(self, batch_B: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(T_idxs, B_idxs, is_weights or None)`` drawn under the read lock; the data at those
        indexes may be overwritten once the lock is released (prefer :meth:`sample_batch`)."""
        with self._sampling_lock():
            return self.buffer.sample_idxs(batch_B)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """The inner buffer's numpy batch at these start indexes, copied under the read lock."""
        with self.rw_lock.read_lock:
            return self.buffer.extract_batch(T_idxs, B_idxs)

    def update_batch_priorities(self, priorities: Any) -> None:
        """New raw priorities for the batch this process sampled last, under the write lock."""
        with self.rw_lock.write_lock:
            self.buffer.update_batch_priorities(priorities)

    def update_priorities(self, T_idxs: np.ndarray, B_idxs: np.ndarray, priorities: Any) -> None:
        """New raw priorities for the starts ``(T_idxs[i], B_idxs[i])`` of a batch drawn
        earlier (by any process), under the write lock; see
        :meth:`~rlfast.replays.sampling.PrioritizedSampling.update_priorities`."""
        scheme = self.buffer.scheme
        if not isinstance(scheme, PrioritizedSampling):
            raise TypeError(f"{type(self).__name__} is not prioritized: it has no "
                            f"update_priorities; use an AsyncPrioritized* replay buffer")
        with self.rw_lock.write_lock:
            scheme.update_priorities(T_idxs, B_idxs, priorities)

    def set_beta(self, beta: float) -> None:
        """Set the shared importance-sampling exponent (every process sees it), under the
        write lock."""
        with self.rw_lock.write_lock:
            self.buffer.set_beta(beta)

    # ---------------------------------------------------------------- delegated views
    @property
    def storage(self) -> ReplayStorage:
        """The inner buffer's shared :class:`~rlfast.replays.storage.ReplayStorage`."""
        return self.buffer.storage

    @property
    def scheme(self) -> Any:
        """The inner buffer's sampling scheme (uniform or prioritized)."""
        return self.buffer.scheme

    @property
    def priority_tree(self) -> SumTree | None:
        """The shared :class:`~rlfast.replays.sum_tree.AsyncSumTree` (None when uniform)."""
        return self.buffer.priority_tree

    @property
    def T(self) -> int:
        """Time length of the ring."""
        return self.buffer.T

    @property
    def B(self) -> int:
        """Number of environments (columns)."""
        return self.buffer.B

    @property
    def size(self) -> int:
        """Capacity in transitions (T * B)."""
        return self.buffer.size

    @property
    def t(self) -> int:
        """Cursor: the next row to be written (shared by every process)."""
        return self.buffer.t

    @property
    def n_step_return(self) -> int:
        """Steps summed into each replayed return."""
        return self.buffer.n_step_return

    @property
    def discount(self) -> float:
        """Discount of those returns."""
        return self.buffer.discount

    @property
    def samples(self) -> Any:
        """The stored ``[T, B]`` arrays (on shared memory; read them under the read lock)."""
        return self.buffer.samples

    @property
    def samples_return_(self) -> np.ndarray:
        """The ``[T, B]`` n-step returns (the rewards when n is 1)."""
        return self.buffer.samples_return_

    @property
    def samples_done_n(self) -> np.ndarray:
        """The ``[T, B]`` n-step done flags (the dones when n is 1)."""
        return self.buffer.samples_done_n

    @property
    def nbytes(self) -> int:
        """Bytes of all shared storage, sum tree (and time-limit windows) included."""
        return self.buffer.nbytes

    @property
    def beta(self) -> float:
        """The current importance-sampling exponent (prioritized buffers only)."""
        return self.buffer.beta

    @property
    def alpha(self) -> float:
        """The priority exponent: priorities are stored as ``p ** alpha`` (prioritized only)."""
        return self.buffer.alpha


class AsyncUniformReplayBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.UniformReplayBuffer` shared between processes."""

    BufferCls = UniformReplayBuffer


class AsyncPrioritizedReplayBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.PrioritizedReplayBuffer` shared between processes."""

    BufferCls = PrioritizedReplayBuffer


class AsyncUniformReplayFrameBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.UniformReplayFrameBuffer` shared between processes."""

    BufferCls = UniformReplayFrameBuffer


class AsyncPrioritizedReplayFrameBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.PrioritizedReplayFrameBuffer` shared between processes."""

    BufferCls = PrioritizedReplayFrameBuffer


class AsyncUniformSequenceReplayBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.UniformSequenceReplayBuffer` shared between processes."""

    BufferCls = UniformSequenceReplayBuffer


class AsyncPrioritizedSequenceReplayBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.PrioritizedSequenceReplayBuffer` shared between processes."""

    BufferCls = PrioritizedSequenceReplayBuffer


class AsyncUniformSequenceReplayFrameBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.UniformSequenceReplayFrameBuffer` shared between processes."""

    BufferCls = UniformSequenceReplayFrameBuffer


class AsyncPrioritizedSequenceReplayFrameBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.PrioritizedSequenceReplayFrameBuffer` shared between processes."""

    BufferCls = PrioritizedSequenceReplayFrameBuffer


class AsyncTlUniformReplayBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.TlUniformReplayBuffer` shared between processes."""

    BufferCls = TlUniformReplayBuffer


class AsyncTlPrioritizedReplayBuffer(AsyncReplayBuffer):
    """:class:`~rlfast.replays.TlPrioritizedReplayBuffer` shared between processes."""

    BufferCls = TlPrioritizedReplayBuffer
