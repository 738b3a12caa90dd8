"""Replay of single transitions that knows time-limit ends from true terminations.

A gymnasium episode cut by a time limit (``truncated``) is not a terminal state: the value
of the state it stopped in is not zero, so the n-step target should still bootstrap. The
samplers reset the environment on every ``done``, so the observation that *follows* the last
step is not the next stored observation; an environment made with
``rlfast.envs.make(..., final_observation=True)`` reports it as
``env_info.final_observation``. Stored in the buffer (an example field ``final_observation``),
it becomes the bootstrap state of every window a time limit cut:

    target = return_ + bootstrap_discount * V(target_inputs)
    bootstrap_discount = gamma ** m    (m = steps from t to the window's end, <= n)
                       = 0             after a true termination

Without a ``final_observation`` field, windows cut by a time limit get
``bootstrap_discount = 0`` and ``has_final_observation`` is False: the algorithm should then
leave them out of the loss (``timeout_n`` marks them) rather than learn a zero value.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.collections import SamplesFromReplayTL
from rlfast.replays.non_sequence import extract_transitions
from rlfast.replays.ring import ring_rows
from rlfast.replays.sampling import PrioritizedSampling, UniformSampling
from rlfast.replays.storage import ReplayStorage
from rlfast.utils.buffer import np_mp_array

__all__ = ["TlUniformReplayBuffer", "TlPrioritizedReplayBuffer"]


def check_timeout_field(storage: Any) -> None:
    """A time-limit buffer's storage must hold the ``timeout`` field."""
    if "timeout" not in storage.samples._fields:
        raise ValueError(f"time-limit replay needs a 'timeout' field in the example (from "
                         f"env_info.timeout); fields: {tuple(storage.samples._fields)}")


def find_window_ends(done: Any, timeout: Any, rows: Any, T: int, n: int, timeout_n: Any,
                     steps: Any, open_: Any, masked_fill: Callable[[Any, Any, int], Any]) -> None:
    """In place, for the n-step windows starting at ``rows`` (numpy arrays or torch tensors
    alike): ``timeout_n`` where the first done is a time-limit end, ``steps`` the steps to
    the window's end (the first done inclusive, else left as n), ``open_`` cleared where a
    done was seen. ``masked_fill(steps, mask, value)`` writes ``value`` where ``mask``."""
    for k in range(n):
        rk = (rows + k) % T
        ends = open_ & (done[rk] != 0)
        timeout_n |= ends & (timeout[rk] != 0)
        masked_fill(steps, ends, k + 1)
        open_ &= ~ends


def discount_powers(discount: float, n: int) -> np.ndarray:
    """``discount ** m`` for ``m = 0 .. n`` (float64): the bootstrap discount of each end."""
    return discount ** np.arange(n + 1, dtype=np.float64)


class _TimeLimitWindows:
    """Per-step facts about each n-step window, kept up to date as samples arrive:
    ``timeout_n`` (the first done in the window is a time-limit end) and ``steps_n`` (steps
    from the window's start to its end: the first done inclusive, else n). With
    ``share_memory`` both arrays live on OS shared memory (seen by forked children)."""

    def __init__(self, storage: ReplayStorage, share_memory: bool = False):
        check_timeout_field(storage)
        self.storage = storage
        shape = storage.samples.done.shape
        self.share_memory = bool(share_memory)
        zeros = np_mp_array if self.share_memory else np.zeros
        self.timeout_n = zeros(shape, bool)
        self.steps_n = zeros(shape, np.int16)
        self.steps_n[...] = storage.n_step_return

    @property
    def nbytes(self) -> int:
        return int(self.timeout_n.nbytes + self.steps_n.nbytes)

    def update(self, start: int, T_in: int) -> None:
        """Recompute the windows that end in (or reach into) the rows just written."""
        s = self.storage
        n = s.n_step_return
        done, timeout = s.samples.done, s.samples.timeout
        if n == 1:  # one-step windows: cut by a time limit iff the step itself timed out
            rows = ring_rows(start, T_in, s.T)
            self.timeout_n[rows] = (done[rows] != 0) & (timeout[rows] != 0)
            return
        # Windows starting up to n - 1 rows before the new ones reach into them. (Before the
        # first wrap some of these rows are unwritten; they are recomputed once written.)
        rows = ring_rows(start - n + 1, T_in + n - 1, s.T)
        timeout_n = np.zeros((len(rows),) + done.shape[1:], dtype=bool)
        steps = np.full(timeout_n.shape, n, dtype=np.int16)
        open_ = np.ones(timeout_n.shape, dtype=bool)  # no done seen yet in the window
        find_window_ends(done, timeout, rows, s.T, n, timeout_n, steps, open_, np.putmask)
        self.timeout_n[rows] = timeout_n
        self.steps_n[rows] = steps


class _TimeLimitAppend:
    """``append_samples`` and ``nbytes`` of every time-limit buffer, numpy or device: the
    buffer's ``windows`` (per-step window facts) follow each append."""

    def _set_windows(self, windows: Any) -> None:
        self.windows = windows
        self.has_final_observation = "final_observation" in self.storage.samples._fields

    def append_samples(self, samples: Any) -> tuple[int, np.ndarray]:
        """Append as every buffer does, then update the n-step windows the new rows touch
        (whether each was cut by a time limit, and where it ends)."""
        start = self.storage.t
        T_in, rows = super().append_samples(samples)
        if T_in:
            self.windows.update(start, T_in)
        return T_in, rows

    @property
    def nbytes(self) -> int:
        """Bytes of all storage, the per-step window facts included."""
        return super().nbytes + self.windows.nbytes


class _TimeLimitExtraction(_TimeLimitAppend):
    """``extract_batch`` shared by the uniform and prioritized time-limit buffers."""

    def _setup_time_limit(self, share_memory: bool = False) -> None:
        self._set_windows(_TimeLimitWindows(self.storage, share_memory=share_memory))
        self._powers = discount_powers(self.storage.discount, self.storage.n_step_return)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> SamplesFromReplayTL:
        """The numpy transitions at these steps, with ``timeout``, ``timeout_n`` and the
        ``bootstrap_discount`` of each target (see the module docstring); windows cut by a
        time limit bootstrap from the stored final observation when there is one."""
        s = self.storage
        batch = extract_transitions(s, T_idxs, B_idxs)
        timeout_n = self.windows.timeout_n[T_idxs, B_idxs]
        steps = self.windows.steps_n[T_idxs, B_idxs]
        done_n = np.asarray(batch.done_n) != 0
        bootstrap = ~done_n
        if self.has_final_observation:
            bootstrap |= timeout_n
            cut = np.flatnonzero(timeout_n)
            if cut.size:  # bootstrap from the observation after the time-limit step
                last = (np.asarray(T_idxs)[cut] + steps[cut] - 1) % s.T
                batch.target_inputs.observation[cut] = \
                    s.samples.final_observation[last, np.asarray(B_idxs)[cut]]
        discount = np.where(bootstrap, self._powers[steps], 0.0).astype(np.float32)
        return SamplesFromReplayTL(*batch, timeout=s.samples.timeout[T_idxs, B_idxs],
                                   timeout_n=timeout_n, bootstrap_discount=discount)


class TlUniformReplayBuffer(_TimeLimitExtraction, ReplayBufferBase):
    """Uniform transition replay with time-limit bootstrapping (see the module docstring).

    ``example`` needs ``observation``, ``action``, ``reward``, ``done``, ``timeout`` and may
    have ``final_observation``; ``sample_batch`` returns ``SamplesFromReplayTL``. With
    ``share_memory`` all its state lives on OS shared memory (see :mod:`rlfast.replays.async_`).
    """

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, share_memory: bool = False):
        storage = ReplayStorage(example, size, B, discount, n_step_return,
                                share_memory=share_memory)
        super().__init__(storage, UniformSampling(storage, off_backward=n_step_return,
                                                  share_memory=share_memory))
        self._setup_time_limit(share_memory)


class TlPrioritizedReplayBuffer(_TimeLimitExtraction, ReplayBufferBase):
    """Prioritized transition replay with time-limit bootstrapping; batches are
    ``SamplesFromReplayTLPri`` (with ``is_weights``). Arguments as
    :class:`~rlfast.replays.PrioritizedReplayBuffer` (``share_memory`` included)."""

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 share_memory: bool = False):
        storage = ReplayStorage(example, size, B, discount, n_step_return,
                                share_memory=share_memory)
        scheme = PrioritizedSampling(
            storage, off_backward=n_step_return, stride=1, alpha=alpha, beta=beta,
            default_priority=default_priority, unique=unique,
            input_priorities=input_priorities, input_priority_shift=input_priority_shift,
            share_memory=share_memory)
        super().__init__(storage, scheme)
        self._setup_time_limit(share_memory)
