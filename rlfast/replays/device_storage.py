"""The device twin of :class:`~rlfast.replays.storage.ReplayStorage`: the whole ring on a device.

A learner on a GPU that samples from host arrays copies every batch to the device and reads
the sampled indexes on the host. :class:`DeviceReplayStorage` keeps every array of the ring
(samples, n-step returns, frames, recurrent states) in torch tensors on one device, so the
buffers built on it (:mod:`rlfast.replays.device_buffers`) draw indexes and gather batches
with device ops only. Data crosses to the device once, at append time: each field of the
``[T_in, B]`` samples is written with one copy into the ring (two where the write wraps).
On CUDA, host data goes through a page-locked staging tensor per field (allocated once, grown
only when a longer chunk arrives) with a ``non_blocking`` copy; before the staging is refilled
the host waits on the CUDA event recorded after the previous copy out of it. The cursor
``t``, ``full`` and ``n_appended`` are host integers (the host knows what it appended), kept
in a small numpy array as the numpy twin keeps them, so snapshots treat both alike.
"""
from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import torch

from rlfast.replays.cells import cell_array, cell_property
from rlfast.replays.device_frames import DeviceFrameStore, as_device, torch_dtype
from rlfast.replays.ring import ring_rows, ring_slices
from rlfast.replays.storage import (add_n_step_returns, advance_cursor, appended_length,
                                    check_example, check_rnn_example, off_forward, ring_shape,
                                    storage_nbytes, stored_example)
from rlfast.utils.buffer import buffer_from_example, buffer_func

__all__ = ["DeviceReplayStorage"]


def _leaf_pairs(dest: Any, src: Any, name: str) -> Iterator[tuple[torch.Tensor, Any, str]]:
    """``(dest leaf, src leaf, dotted name)`` of every stored leaf, fields matched by name."""
    if hasattr(dest, "_fields"):
        for field in dest._fields:
            if not hasattr(src, field):
                raise ValueError(f"samples field {name!r} lacks sub-field {field!r}; it needs "
                                 f"{tuple(dest._fields)}")
            yield from _leaf_pairs(getattr(dest, field), getattr(src, field), f"{name}.{field}")
    elif dest is not None:
        yield dest, src, name


class _Staging:
    """Host tensor that one field's host data passes through on its way to a device: pinned
    with an event when the device is CUDA; plain (and waiting on nothing) when a CPU storage
    is told to stage, which is how tests run the staging logic without a GPU."""

    def __init__(self, dtype: torch.dtype, tail: tuple, device: torch.device | None = None):
        self.dtype, self.tail = dtype, tuple(tail)
        self.device = device if device is not None and device.type == "cuda" else None
        self.cuda = self.device is not None
        self.host: torch.Tensor | None = None
        self.event = torch.cuda.Event() if self.cuda else None
        self._in_flight = False

    def fill(self, src: Any, name: str) -> torch.Tensor:
        """Wait until the last copy out of the staging has finished, then copy ``src``
        (``[n, ...]``, numpy or a host tensor) into its first ``n`` rows and return them."""
        n = int(src.shape[0])
        if self._in_flight:
            self.event.synchronize()
            self._in_flight = False
        if self.host is None or self.host.shape[0] < n:
            self.host = torch.empty((n,) + self.tail, dtype=self.dtype, pin_memory=self.cuda)
        view = self.host[:n]
        try:
            if isinstance(src, torch.Tensor):
                view.copy_(src)
            else:
                np.copyto(view.numpy(), np.asarray(src), casting="unsafe")
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"samples field {name!r} of shape {tuple(src.shape)} does not fit "
                             f"the stored [T_in, ...] = [{n}, *{self.tail}]: {e}") from None
        return view

    def copied(self) -> None:
        """Mark the copies queued out of the staging (the next fill waits for them)."""
        if self.event is not None:
            # On the stream the copies to the device were queued on (the device's current).
            self.event.record(torch.cuda.current_stream(self.device) if self.cuda else None)
            self._in_flight = True


class DeviceReplayStorage:
    """The ``[T, B]`` ring of a replay buffer as torch tensors on ``device`` (the twin of
    :class:`~rlfast.replays.storage.ReplayStorage`, with the same sizes, fields, dtypes,
    n-step returns, frame store and recurrent-state store).

    ``append`` takes ``[T_in, B]`` samples as numpy arrays or torch tensors on any device;
    the reading methods (:meth:`observation`, :meth:`prev_inputs`, :meth:`rnn_state`) take
    int64 index tensors on ``device`` and return tensors there, with no host read.
    ``staging`` (default: when the device is CUDA) sends host data through the page-locked
    staging tensors described in the module docstring; ``True`` on a CPU device runs the same
    path unpinned, for tests.
    """

    t = cell_property("_cells", 0, int, "Cursor: the next row to be written.")
    full = cell_property("_cells", 1, bool, "Whether the cursor has wrapped at least once.")
    n_appended = cell_property("_cells", 2, int, "Total time steps ever appended.")

    def __init__(self, example: Any, size: int, B: int, discount: float = 1.0,
                 n_step_return: int = 1, frame_based: bool = False, rnn_state_interval: int = 0,
                 device: str | torch.device = "cpu", staging: bool | None = None):
        check_example(example)
        self.device = check_device(device)
        self.T, self.B, self.n_step_return, self.discount, self.rnn_state_interval = \
            ring_shape(size, B, discount, n_step_return, rnn_state_interval)
        T = self.T
        self.size = T * self.B
        self._cells = cell_array(3, np.int64)  # t, full, n_appended: host integers
        self._stage = self.device.type == "cuda" if staging is None else bool(staging)
        # Transient (dicts are never part of a snapshot): host staging per field, and device
        # scratch for the frame store's whole observations.
        self._staging: dict[str, _Staging] = {}
        self._scratch: dict[str, torch.Tensor] = {}

        self.samples = self._zeros_like(stored_example(example, frame_based), T)
        self.frames = (DeviceFrameStore(example.observation, T, self.B, self.device)
                       if frame_based else None)
        if self.n_step_return > 1:
            reward = self.samples.reward
            dtype = reward.dtype if reward.dtype.is_floating_point else torch.float32
            self.samples_return_ = torch.zeros(reward.shape, dtype=dtype, device=self.device)
            self.samples_done_n = torch.zeros_like(self.samples.done)
        else:
            self.samples_return_ = self.samples.reward
            self.samples_done_n = self.samples.done
        self.rnn_states = None
        if self.rnn_state_interval > 0:
            check_rnn_example(example, self.rnn_state_interval)
            self.rnn_states = self._zeros_like(example.prev_rnn_state,
                                               T // self.rnn_state_interval)
        self.off_forward = off_forward(self.frames)
        self.t = 0
        self.full = False
        self.n_appended = 0

    def _zeros_like(self, example: Any, T: int) -> Any:
        """Zeroed device tensors ``[T, B, ...]`` in the structure and dtypes that
        ``buffer_from_example`` gives the numpy twin (built from an empty numpy buffer)."""
        empty = buffer_from_example(example, (0, self.B))
        return buffer_func(empty, lambda a: torch.zeros((T,) + a.shape[1:],
                                                        dtype=torch_dtype(a.dtype),
                                                        device=self.device))

    @property
    def nbytes(self) -> int:
        """Bytes of every device tensor held (returns aliased to rewards counted once)."""
        return storage_nbytes(self)

    # ---------------------------------------------------------------- writing
    def append(self, samples: Any) -> tuple[int, np.ndarray]:
        """Write ``[T_in, B]`` samples at the cursor (wrapping), compute the n-step returns that
        became complete, advance the cursor; returns ``(T_in, rows written)`` (host rows)."""
        T_in = appended_length(samples, self.B, self.T)
        if T_in == 0:
            return 0, np.zeros(0, dtype=np.int64)
        start = self.t
        for dest, src, name in _leaf_pairs(self.samples, samples, "samples"):
            self._write_ring(dest, start, src, name)
        if self.frames is not None:
            observation = samples.observation
            if hasattr(observation, "_fields"):
                raise TypeError("a frame buffer needs the observation as one array "
                                "[T_in, B, C, ...]; got a namedtuple of fields "
                                f"{tuple(observation._fields)}")
            self.frames.write(start, self._on_device(observation, self.frames.frames.dtype,
                                                     "observation"))
        rows = ring_rows(start, T_in, self.T)
        if self.rnn_states is not None:
            if not hasattr(samples, "prev_rnn_state"):
                raise ValueError("samples lack the 'prev_rnn_state' field this buffer stores")
            interval = self.rnn_state_interval
            first = (-start) % interval  # first appended step at a multiple of the interval
            if first < T_in:  # kept steps: first, first + interval, ... (one ring run)
                for dest, src, name in _leaf_pairs(self.rnn_states, samples.prev_rnn_state,
                                                   "prev_rnn_state"):
                    self._write_ring(dest, int(rows[first]) // interval, src[first::interval],
                                     name)
        advance_cursor(self, start, T_in)
        self._compute_returns(start, T_in)
        return T_in, rows

    def _write_ring(self, dest: torch.Tensor, start: int, src: Any, name: str) -> None:
        """``dest[start, start + 1, ...] = src`` along dim 0, wrapping: one copy per piece."""
        if not isinstance(src, torch.Tensor):
            src = np.asarray(src)
        pieces = ring_slices(start, int(src.shape[0]), dest.shape[0])
        if self._stage and not (isinstance(src, torch.Tensor) and src.device == dest.device):
            staging = self._staging_for(name, dest)
            staged = staging.fill(src, name)
            for rows, part in pieces:
                dest[rows].copy_(staged[part], non_blocking=True)
            staging.copied()
            return
        try:  # already on the device, or a CPU ring: straight from the source
            for rows, part in pieces:
                if isinstance(src, torch.Tensor):
                    dest[rows].copy_(src[part], non_blocking=True)
                else:
                    np.copyto(dest[rows].numpy(), src[part], casting="unsafe")
        except (RuntimeError, ValueError) as e:
            raise ValueError(f"samples field {name!r} of shape {tuple(src.shape)} does not fit "
                             f"the stored [T_in, ...] = [T_in, *{tuple(dest.shape[1:])}]: "
                             f"{e}") from None

    def _staging_for(self, name: str, dest: torch.Tensor) -> _Staging:
        if name not in self._staging:
            self._staging[name] = _Staging(dest.dtype, tuple(dest.shape[1:]), self.device)
        return self._staging[name]

    def _on_device(self, src: Any, dtype: torch.dtype, name: str) -> torch.Tensor:
        """``src`` as a ``dtype`` tensor on the device: itself when already there, else one
        copy (through the staging, into a device scratch reused by the next append)."""
        if isinstance(src, torch.Tensor) and src.device == self.device:
            return src.to(dtype)
        if not self._stage:
            return as_device(src, self.device, dtype)
        if not isinstance(src, torch.Tensor):
            src = np.asarray(src)
        staging = self._staging_for(name, torch.empty((0,) + tuple(src.shape[1:]), dtype=dtype))
        staged = staging.fill(src, name)
        scratch = self._scratch.get(name)
        if scratch is None or scratch.shape[0] < staged.shape[0] \
                or scratch.shape[1:] != staged.shape[1:]:
            scratch = torch.empty(staged.shape, dtype=dtype, device=self.device)
            self._scratch[name] = scratch
        out = scratch[:staged.shape[0]]
        out.copy_(staged, non_blocking=True)
        staging.copied()
        return out

    def _compute_returns(self, start: int, T_in: int) -> None:
        """As :meth:`ReplayStorage._compute_returns
        <rlfast.replays.storage.ReplayStorage._compute_returns>`, on the device, with the numpy
        twin's arithmetic (same dtypes, same order)."""
        n = self.n_step_return
        if n == 1:
            return
        reward, done = self.samples.reward, self.samples.done
        # numpy computes a Python float times integer rewards in float64.
        as_float = None if reward.dtype.is_floating_point else (lambda r: r.to(torch.float64))
        rows = (torch.arange(T_in, device=self.device) + (start - n + 1)) % self.T
        ret = torch.zeros((T_in,) + tuple(reward.shape[1:]), dtype=self.samples_return_.dtype,
                          device=self.device)
        alive = torch.ones(ret.shape, dtype=torch.bool, device=self.device)
        add_n_step_returns(ret, alive, reward, done, rows, self.T, self.discount, n, as_float)
        self.samples_return_[rows] = ret
        self.samples_done_n[rows] = (~alive).to(self.samples_done_n.dtype)

    # ---------------------------------------------------------------- reading
    def observation(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> Any:
        """Observations at ``(T_idxs[i], B_idxs[i])``: ``[n, ...]`` on the device."""
        if self.frames is not None:
            return self.frames.stacks(T_idxs, B_idxs)
        return self.samples.observation[T_idxs, B_idxs]

    def prev_inputs(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> tuple[Any, Any]:
        """``(prev_action, prev_reward)`` seen by the agent at these steps (as
        :meth:`ReplayStorage.prev_inputs <rlfast.replays.storage.ReplayStorage.prev_inputs>`:
        stored fields as given, else the previous step's, zeroed right after a ``done``)."""
        s = self.samples
        stored_action = "prev_action" in s._fields
        stored_reward = "prev_reward" in s._fields
        if stored_action and stored_reward:
            return s.prev_action[T_idxs, B_idxs], s.prev_reward[T_idxs, B_idxs]
        prev = (T_idxs - 1) % self.T
        reset = s.done[prev, B_idxs] != 0

        def zero_reset(x: torch.Tensor) -> torch.Tensor:
            return x.masked_fill_(reset.view(reset.shape + (1,) * (x.dim() - 1)), 0)

        if stored_action:
            action = s.prev_action[T_idxs, B_idxs]
        else:
            action = buffer_func(s.action[prev, B_idxs], zero_reset)
        if stored_reward:
            reward = s.prev_reward[T_idxs, B_idxs]
        else:
            reward = buffer_func(s.reward[prev, B_idxs], zero_reset)
        return action, reward

    def rnn_state(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> Any:
        """Stored recurrent state at steps ``T_idxs``: ``[n, ...]`` (None when no state is
        stored). ``T_idxs`` must be multiples of ``rnn_state_interval`` (the sampling schemes
        draw only those); unlike the numpy twin this is not checked, as that would read the
        indexes on the host."""
        if self.rnn_states is None:
            return None
        return self.rnn_states[T_idxs // self.rnn_state_interval, B_idxs]


def check_device(device: Any) -> torch.device:
    """``device`` as a ``torch.device`` (``"cuda"`` gets the current device's index, so it
    compares equal to its tensors' device), refusing names torch does not know and CUDA
    devices on a machine without CUDA, with a message naming the valid choices."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device must be a torch device such as 'cpu', 'cuda' or 'cuda:0'; "
                         f"got {device!r}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asks for CUDA, which this machine lacks; use "
                         f"device='cpu'")
    if dev.type == "cuda" and dev.index is None:  # as tensors report it: cuda:<index>
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev
