"""Pre-allocated ``[T, B]`` ring of samples with n-step returns computed on arrival.

:class:`ReplayStorage` is the part every replay buffer *has*: the sample arrays, the time
cursor, the n-step returns ``samples_return_`` / ``samples_done_n``, optionally a
:class:`~rlfast.replays.frames.FrameStore` for the observations and a periodic store of the
agent's recurrent state. It knows nothing of how indexes are chosen (that is the sampling
scheme) nor of what a batch looks like (that is the buffer class).
"""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Any, Callable, NamedTuple

import numpy as np

from rlfast.replays.cells import cell_array, cell_property
from rlfast.replays.frames import FrameStore
from rlfast.replays.ring import ring_rows, ring_slices
from rlfast.utils.buffer import buffer_from_example, np_mp_array, numpify_buffer
from rlfast.utils.checks import check_fraction, check_int

__all__ = ["ReplayStorage", "REQUIRED_FIELDS", "RingShape", "ring_shape"]

REQUIRED_FIELDS = ("observation", "action", "reward", "done")
_NOT_STORED = ("priorities", "prev_rnn_state")  # handled separately


def _assign(dest: Any, dest_idx: Any, src: Any, src_idx: Any, name: str) -> None:
    """``dest[dest_idx] = src[src_idx]`` leaf by leaf (fields matched by name)."""
    if hasattr(dest, "_fields"):
        for field in dest._fields:
            if not hasattr(src, field):
                raise ValueError(f"samples field {name!r} lacks sub-field {field!r}")
            _assign(getattr(dest, field), dest_idx, getattr(src, field), src_idx,
                    f"{name}.{field}")
    elif dest is not None:
        dest[dest_idx] = np.asarray(src)[src_idx]


def _nbytes(buf: Any) -> int:
    if buf is None:
        return 0
    if hasattr(buf, "_fields"):
        return sum(_nbytes(v) for v in buf)
    return int(buf.nbytes)


# ---------------------------------------------------------------- shared with the device twin
# What follows is the arithmetic and the checks that ReplayStorage and its device twin
# (rlfast.replays.device_storage) share: they differ only in where their arrays live.

def check_example(example: Any) -> None:
    """Reject an ``example`` that is not a namedtuple with the :data:`REQUIRED_FIELDS`."""
    if not hasattr(example, "_fields"):
        raise TypeError(f"example must be a namedtuple/namedarraytuple of one sample with "
                        f"fields {REQUIRED_FIELDS}; got {type(example).__name__}")
    missing = [f for f in REQUIRED_FIELDS if f not in example._fields]
    if missing:
        raise ValueError(f"example lacks fields {missing}; it needs {REQUIRED_FIELDS} "
                         f"(has {tuple(example._fields)})")


class RingShape(NamedTuple):
    """The checked arguments of a replay storage and its ring length ``T``."""
    T: int
    B: int
    n_step_return: int
    discount: float
    rnn_state_interval: int


def ring_shape(size: int, B: int, discount: float, n_step_return: int,
               rnn_state_interval: int) -> RingShape:
    """Check a storage's arguments; ``T = ceil(size / B)``, rounded up to a multiple of
    ``rnn_state_interval`` when states are stored."""
    size = check_int(size, "size", minimum=1)
    B = check_int(B, "B", minimum=1)
    n_step_return = check_int(n_step_return, "n_step_return", minimum=1)
    discount = check_fraction(discount, "discount")
    rnn_state_interval = check_int(rnn_state_interval, "rnn_state_interval", minimum=0)
    T = math.ceil(size / B)
    if rnn_state_interval > 0:
        T = math.ceil(T / rnn_state_interval) * rnn_state_interval
    return RingShape(T, B, n_step_return, discount, rnn_state_interval)


def stored_example(example: Any, frame_based: bool) -> Any:
    """The example's stored fields: all but ``priorities`` and ``prev_rnn_state``, and but the
    observation when a frame store keeps it."""
    stored = [f for f in example._fields if f not in _NOT_STORED
              and not (frame_based and f == "observation")]
    return namedtuple("ReplaySamples", stored)(*(getattr(example, f) for f in stored))


def check_rnn_example(example: Any, rnn_state_interval: int) -> None:
    """With ``rnn_state_interval > 0`` the example must carry a ``prev_rnn_state``."""
    if "prev_rnn_state" not in example._fields or example.prev_rnn_state is None:
        raise ValueError(f"rnn_state_interval={rnn_state_interval} > 0 needs a "
                         f"'prev_rnn_state' field in the example; fields: "
                         f"{tuple(example._fields)} (use rnn_state_interval=0 to store "
                         f"no state)")


def off_forward(frames: Any) -> int:
    """Rows whose previous step (and frame history, with a frame store) is overwritten next."""
    return max(1, frames.n_frames - 1) if frames is not None else 1


def storage_nbytes(storage: Any) -> int:
    """Bytes of every array a storage holds (returns aliased to rewards counted once)."""
    total = _nbytes(storage.samples) + _nbytes(storage.rnn_states)
    if storage.frames is not None:
        total += storage.frames.nbytes
    if storage.n_step_return > 1:
        total += storage.samples_return_.nbytes + storage.samples_done_n.nbytes
    return total


def appended_length(samples: Any, B: int, T: int) -> int:
    """``T_in`` of ``[T_in, B]`` samples (numpy or torch), after checking their fields and
    shape against a ring of ``T`` rows and ``B`` columns."""
    for f in REQUIRED_FIELDS:
        if not hasattr(samples, f):
            raise ValueError(f"samples lack field {f!r}; they need {REQUIRED_FIELDS}")
    reward = samples.reward
    shape = tuple(reward.shape) if hasattr(reward, "shape") else np.shape(reward)
    if len(shape) < 2 or shape[1] != B:
        raise ValueError(f"samples must have leading dims [T_in, B] with B={B}; got "
                         f"reward of shape {shape}")
    T_in = int(shape[0])
    if T_in > T:
        raise ValueError(f"can append at most T={T} time steps at once; got T_in={T_in}")
    return T_in


def advance_cursor(storage: Any, start: int, T_in: int) -> None:
    """Move a storage's cursor over ``T_in`` rows appended at ``start``."""
    storage.n_appended += T_in
    storage.full = storage.full or start + T_in >= storage.T
    storage.t = (start + T_in) % storage.T


def add_n_step_returns(ret: Any, alive: Any, reward: Any, done: Any, rows: Any, T: int,
                       discount: float, n: int, as_float: Callable[[Any], Any] = None) -> None:
    """In place, for numpy arrays or torch tensors alike: ``ret += sum_k discount**k *
    reward[rows + k]`` up to and including the first done, and ``alive`` false where a done
    lies within ``rows .. rows + n - 1``. ``as_float`` (default: none) converts integer
    rewards as numpy's promotion would."""
    for k in range(n):
        rk = (rows + k) % T
        r = reward[rk] if as_float is None else as_float(reward[rk])
        ret += (discount ** k) * r * alive
        alive &= done[rk] == 0


class ReplayStorage:
    """The ``[T, B]`` arrays of a replay buffer, with ``T = ceil(size / B)`` (rounded up to a
    multiple of ``rnn_state_interval`` when states are stored).

    Every example field is stored except ``priorities`` and ``prev_rnn_state`` (the latter is
    kept only at steps that are multiples of ``rnn_state_interval``, when that is > 0); with
    ``frame_based`` the observation goes to a frame store. Optional ``prev_action`` /
    ``prev_reward`` fields are replayed as given (see :meth:`prev_inputs`). After each
    append, the n-step return ``return_[t] = sum_k discount**k * reward[t+k]`` (summing up to
    and including the first done) and ``done_n[t]`` (a done within ``t .. t+n-1``) are
    written for the steps whose n-step window just completed. With ``n_step_return == 1``
    they alias reward / done.

    With ``share_memory`` every array and the cursor, ``full`` and ``n_appended`` live on OS
    shared memory, so a forked child appending here moves the data and cursor its parent
    samples from (the caller serializes access, e.g. with a reader-writer lock).
    """

    t = cell_property("_cells", 0, int, "Cursor: the next row to be written.")
    full = cell_property("_cells", 1, bool, "Whether the cursor has wrapped at least once.")
    n_appended = cell_property("_cells", 2, int, "Total time steps ever appended.")

    def __init__(self, example: Any, size: int, B: int, discount: float = 1.0,
                 n_step_return: int = 1, frame_based: bool = False, rnn_state_interval: int = 0,
                 share_memory: bool = False):
        check_example(example)
        self.T, self.B, self.n_step_return, self.discount, self.rnn_state_interval = \
            ring_shape(size, B, discount, n_step_return, rnn_state_interval)
        T = self.T
        self.size = T * self.B
        self.share_memory = bool(share_memory)
        self._cells = cell_array(3, np.int64, self.share_memory)  # t, full, n_appended

        self.samples = buffer_from_example(stored_example(example, frame_based), (T, self.B),
                                           share_memory=self.share_memory)
        self.frames = (FrameStore(example.observation, T, self.B, share_memory=self.share_memory)
                       if frame_based else None)
        if self.n_step_return > 1:
            reward = self.samples.reward
            dtype = reward.dtype if np.issubdtype(reward.dtype, np.floating) else np.float32
            self.samples_return_ = self._zeros(reward.shape, dtype)
            self.samples_done_n = self._zeros(self.samples.done.shape, self.samples.done.dtype)
        else:
            self.samples_return_ = self.samples.reward
            self.samples_done_n = self.samples.done
        self.rnn_states = None
        if self.rnn_state_interval > 0:
            check_rnn_example(example, self.rnn_state_interval)
            self.rnn_states = buffer_from_example(
                example.prev_rnn_state, (T // self.rnn_state_interval, self.B),
                share_memory=self.share_memory)
        self.off_forward = off_forward(self.frames)
        self.t = 0  # next row to write
        self.full = False
        self.n_appended = 0  # total time steps ever appended

    def _zeros(self, shape: tuple, dtype: Any) -> np.ndarray:
        """A zeroed array, on shared memory when this storage is shared."""
        if self.share_memory:
            return np_mp_array(shape, dtype)
        return np.zeros(shape, dtype=dtype)

    @property
    def nbytes(self) -> int:
        """Bytes of every array held (returns aliased to rewards are not counted twice)."""
        return storage_nbytes(self)

    # ---------------------------------------------------------------- writing
    def append(self, samples: Any) -> tuple[int, np.ndarray]:
        """Write ``[T_in, B]`` samples at the cursor (wrapping), compute the n-step returns that
        became complete, advance the cursor; returns ``(T_in, rows written)``."""
        samples = numpify_buffer(samples)
        T_in = appended_length(samples, self.B, self.T)
        if T_in == 0:
            return 0, np.zeros(0, dtype=np.int64)
        start = self.t
        for rows, src in ring_slices(start, T_in, self.T):
            for f in self.samples._fields:
                _assign(getattr(self.samples, f), rows, getattr(samples, f), src, f)
        if self.frames is not None:
            self.frames.write(start, np.asarray(samples.observation))
        rows = ring_rows(start, T_in, self.T)
        if self.rnn_states is not None:
            if not hasattr(samples, "prev_rnn_state"):
                raise ValueError("samples lack the 'prev_rnn_state' field this buffer stores")
            keep = np.flatnonzero(rows % self.rnn_state_interval == 0)
            if keep.size:
                _assign(self.rnn_states, rows[keep] // self.rnn_state_interval,
                        samples.prev_rnn_state, keep, "prev_rnn_state")
        advance_cursor(self, start, T_in)
        self._compute_returns(start, T_in)
        return T_in, rows

    def _compute_returns(self, start: int, T_in: int) -> None:
        """n-step returns for the ``T_in`` steps whose window ends in the rows just written.

        Steps whose window reaches rows not yet written (only before the first wrap) get
        values that are rewritten when their window completes, and are never replayed before.
        """
        n = self.n_step_return
        if n == 1:
            return
        reward, done = self.samples.reward, self.samples.done
        rows = ring_rows(start - n + 1, T_in, self.T)
        ret = np.zeros((T_in,) + reward.shape[1:], dtype=self.samples_return_.dtype)
        alive = np.ones(ret.shape, dtype=bool)
        add_n_step_returns(ret, alive, reward, done, rows, self.T, self.discount, n)
        self.samples_return_[rows] = ret
        self.samples_done_n[rows] = ~alive

    # ---------------------------------------------------------------- reading
    def observation(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Observations at ``(T_idxs[i], B_idxs[i])``: ``[n, ...]``."""
        if self.frames is not None:
            return self.frames.stacks(T_idxs, B_idxs)
        return self.samples.observation[T_idxs, B_idxs]

    def prev_inputs(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> tuple[Any, np.ndarray]:
        """``(prev_action, prev_reward)`` seen by the agent at these steps.

        Stored ``prev_action`` / ``prev_reward`` fields (when the example has them) are
        returned as given; otherwise they are the previous step's action and reward, or zeros
        (the null action) right after a ``done``, which is what the samplers feed the agent
        when environments reset on ``done``.
        """
        s = self.samples
        stored_action = "prev_action" in s._fields
        stored_reward = "prev_reward" in s._fields
        if stored_action and stored_reward:
            return s.prev_action[T_idxs, B_idxs], s.prev_reward[T_idxs, B_idxs]
        prev = (np.asarray(T_idxs) - 1) % self.T
        reset = s.done[prev, B_idxs] != 0
        action = s.prev_action[T_idxs, B_idxs] if stored_action else s.action[prev, B_idxs]
        reward = s.prev_reward[T_idxs, B_idxs] if stored_reward else s.reward[prev, B_idxs]
        if reset.any():
            if not stored_action:
                action[reset] = 0
            if not stored_reward:
                reward[reset] = 0
        return action, reward

    def rnn_state(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """Stored recurrent state at steps ``T_idxs`` (multiples of the interval): ``[n, ...]``."""
        if self.rnn_states is None:
            return None
        T_idxs = np.asarray(T_idxs)
        if np.any(T_idxs % self.rnn_state_interval):
            raise ValueError(f"RNN state is stored only at steps that are multiples of "
                             f"rnn_state_interval={self.rnn_state_interval}; got T_idxs "
                             f"{T_idxs[T_idxs % self.rnn_state_interval != 0][:5].tolist()}")
        return self.rnn_states[T_idxs // self.rnn_state_interval, B_idxs]
