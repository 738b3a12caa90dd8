"""Time-limit aware transition replay on a device: the twins of :mod:`rlfast.replays.time_limit`.

The per-step window facts (``timeout_n``: the first done of the n-step window is a time-limit
end; ``steps_n``: steps from the window's start to its end) are device tensors updated on
the device after each append, and a batch's ``bootstrap_discount`` and the substitution of
the stored ``final_observation`` as the bootstrap state of windows cut by a time limit are
computed with ``torch.where`` over whole batch tensors: no boolean indexing, no host read.
See :mod:`rlfast.replays.time_limit` for what the fields mean.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.collections import AgentInputs, SamplesFromReplayTL
from rlfast.replays.device_buffers import (DeviceUniformSampling, device_scheme,
                                           extract_device_transitions)
from rlfast.replays.device_storage import DeviceReplayStorage
from rlfast.replays.device_tree import DevicePrioritizedSampling
from rlfast.replays.time_limit import (_TimeLimitAppend, _TimeLimitWindows, check_timeout_field,
                                       discount_powers, find_window_ends)

__all__ = ["DeviceTlUniformReplayBuffer", "DeviceTlPrioritizedReplayBuffer"]


class _DeviceTimeLimitWindows:
    """``timeout_n`` (bool) and ``steps_n`` (int16) per step, ``[T, B]`` device tensors kept
    up to date as samples arrive (the twin of ``time_limit._TimeLimitWindows``)."""

    def __init__(self, storage: DeviceReplayStorage):
        check_timeout_field(storage)
        self.storage = storage
        shape = tuple(storage.samples.done.shape)
        self.timeout_n = torch.zeros(shape, dtype=torch.bool, device=storage.device)
        self.steps_n = torch.full(shape, storage.n_step_return, dtype=torch.int16,
                                  device=storage.device)

    nbytes = _TimeLimitWindows.nbytes

    def update(self, start: int, T_in: int) -> None:
        """Recompute the windows that end in (or reach into) the rows just written."""
        s = self.storage
        n = s.n_step_return
        done, timeout = s.samples.done, s.samples.timeout
        device = s.device
        if n == 1:  # one-step windows: cut by a time limit iff the step itself timed out
            rows = (torch.arange(T_in, device=device) + start) % s.T
            self.timeout_n[rows] = (done[rows] != 0) & (timeout[rows] != 0)
            return
        # Windows starting up to n - 1 rows before the new ones reach into them. (Before the
        # first wrap some of these rows are unwritten; they are recomputed once written.)
        rows = (torch.arange(T_in + n - 1, device=device) + (start - n + 1)) % s.T
        shape = (rows.shape[0],) + tuple(done.shape[1:])
        timeout_n = torch.zeros(shape, dtype=torch.bool, device=device)
        steps = torch.full(shape, n, dtype=torch.int16, device=device)
        open_ = torch.ones(shape, dtype=torch.bool, device=device)  # no done seen yet
        find_window_ends(done, timeout, rows, s.T, n, timeout_n, steps, open_,
                         torch.Tensor.masked_fill_)
        self.timeout_n[rows] = timeout_n
        self.steps_n[rows] = steps


def _select_rows(cut: torch.Tensor, new: Any, old: Any) -> Any:
    """``new[i]`` where ``cut[i]`` else ``old[i]``, leaf by leaf (``torch.where``)."""
    if hasattr(old, "_fields"):
        return type(old)(*(_select_rows(cut, a, b) for a, b in zip(new, old)))
    return torch.where(cut.view(cut.shape + (1,) * (old.dim() - 1)), new.to(old.dtype), old)


class _DeviceTimeLimitExtraction(_TimeLimitAppend):
    """``extract_batch`` shared by the uniform and prioritized device time-limit buffers
    (appends update the window facts on the device)."""

    def _setup_time_limit(self) -> None:
        s = self.storage
        self._set_windows(_DeviceTimeLimitWindows(s))
        self._powers = torch.from_numpy(discount_powers(s.discount, s.n_step_return)).to(s.device)

    def extract_batch(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> SamplesFromReplayTL:
        """The transitions at these steps as device tensors, with ``timeout``, ``timeout_n``
        and the ``bootstrap_discount`` of each target; windows cut by a time limit bootstrap
        from the stored final observation when there is one (selected with ``torch.where``)."""
        s = self.storage
        batch = extract_device_transitions(s, T_idxs, B_idxs)
        timeout_n = self.windows.timeout_n[T_idxs, B_idxs]
        steps = self.windows.steps_n[T_idxs, B_idxs].to(torch.int64)
        bootstrap = batch.done_n == 0
        if self.has_final_observation:
            bootstrap = bootstrap | timeout_n
            last = (T_idxs + steps - 1) % s.T  # the time-limit step of a cut window
            final = s.samples.final_observation[last, B_idxs]
            target = batch.target_inputs
            observation = _select_rows(timeout_n, final, target.observation)
            batch = batch._replace(target_inputs=AgentInputs(observation, target.prev_action,
                                                             target.prev_reward))
        discount = torch.where(bootstrap, self._powers[steps], 0.0)
        return SamplesFromReplayTL(*batch, timeout=s.samples.timeout[T_idxs, B_idxs],
                                   timeout_n=timeout_n,
                                   bootstrap_discount=discount.to(torch.float32))


class DeviceTlUniformReplayBuffer(_DeviceTimeLimitExtraction, ReplayBufferBase):
    """:class:`~rlfast.replays.TlUniformReplayBuffer` with its whole state on ``device``:
    same arguments (no ``share_memory``) plus ``device``; ``sample_batch`` returns
    ``SamplesFromReplayTL`` of device tensors with no host read."""

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, device: str | torch.device = "cpu"):
        storage = DeviceReplayStorage(example, size, B, discount, n_step_return, device=device)
        super().__init__(storage, DeviceUniformSampling(storage, off_backward=n_step_return))
        self._setup_time_limit()

    device = property(lambda self: self.storage.device, doc="Where every tensor lives.")


class DeviceTlPrioritizedReplayBuffer(_DeviceTimeLimitExtraction, ReplayBufferBase):
    """:class:`~rlfast.replays.TlPrioritizedReplayBuffer` with its whole state, sum tree
    included, on ``device``: same arguments (no ``share_memory``) plus ``device``; batches
    are ``SamplesFromReplayTLPri`` of device tensors, and ``update_batch_priorities`` takes a
    device tensor, with no host read."""

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 device: str | torch.device = "cpu"):
        storage = DeviceReplayStorage(example, size, B, discount, n_step_return, device=device)
        scheme = DevicePrioritizedSampling(
            storage, off_backward=n_step_return, stride=1, alpha=alpha, beta=beta,
            default_priority=default_priority, unique=unique,
            input_priorities=input_priorities, input_priority_shift=input_priority_shift,
            device=storage.device)
        super().__init__(storage, scheme)
        self._setup_time_limit()

    device = property(lambda self: self.storage.device, doc="Where every tensor lives.")
    _prioritized = device_scheme
