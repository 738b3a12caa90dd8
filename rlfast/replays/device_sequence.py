"""Sequence replay with stored recurrent state on a device (R2D1 on a GPU): the twins of
:mod:`rlfast.replays.sequence`.

A batch is a ``SequenceSamplesFromReplay`` of device tensors with time fields
``[batch_T + n_step_return, batch_B]`` and ``init_rnn_state`` ``[batch_B, ...]``, gathered
from a :class:`~rlfast.replays.device_storage.DeviceReplayStorage` with one index grid of
``[length, batch_B]`` steps; starts are drawn on the device every ``rnn_state_interval``
steps (uniformly, or by priority with one sum-tree leaf per start). No host read.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.collections import SequenceSamplesFromReplay
from rlfast.replays.device_buffers import DeviceUniformSampling, device_scheme
from rlfast.replays.device_storage import DeviceReplayStorage
from rlfast.replays.device_tree import DevicePrioritizedSampling
from rlfast.replays.sequence import sequence_setup, sequences_at
from rlfast.utils.buffer import buffer_func

__all__ = ["DeviceUniformSequenceReplayBuffer", "DeviceUniformSequenceReplayFrameBuffer",
           "DevicePrioritizedSequenceReplayBuffer", "DevicePrioritizedSequenceReplayFrameBuffer",
           "extract_device_sequences"]


def extract_device_sequences(storage: DeviceReplayStorage, T_idxs: torch.Tensor,
                             B_idxs: torch.Tensor, length: int) -> SequenceSamplesFromReplay:
    """``SequenceSamplesFromReplay`` of device tensors: ``length`` steps from each start
    ``(T_idxs[i], B_idxs[i])`` (wrapping at ``T``), as
    :func:`~rlfast.replays.sequence.extract_sequence_batch` gathers them from numpy."""
    n = T_idxs.shape[0]
    offsets = torch.arange(length, device=T_idxs.device)
    steps_grid = (T_idxs[None, :] + offsets[:, None]) % storage.T  # [length, n]
    envs_grid = B_idxs[None, :].expand(length, n)

    def gather(x: torch.Tensor) -> torch.Tensor:
        return x[steps_grid, envs_grid]

    return sequences_at(storage, T_idxs, B_idxs, steps_grid.reshape(-1), envs_grid.reshape(-1),
                        length, lambda x: buffer_func(x, gather))


def _extract_batch(self: Any, T_idxs: torch.Tensor,
                   B_idxs: torch.Tensor) -> SequenceSamplesFromReplay:
    """The sequences of ``batch_T + n_step_return`` steps from these starts, as device
    tensors (see :func:`extract_device_sequences`)."""
    return extract_device_sequences(self.storage, T_idxs, B_idxs,
                                    self.batch_T + self.n_step_return)


class DeviceUniformSequenceReplayBuffer(ReplayBufferBase):
    """:class:`~rlfast.replays.UniformSequenceReplayBuffer` with its whole state on
    ``device``: same arguments (no ``share_memory``) plus ``device``; ``sample_batch``
    returns ``SequenceSamplesFromReplay`` of device tensors with no host read."""

    def __init__(self, example: Any, size: int, B: int, rnn_state_interval: int, batch_T: int,
                 discount: float = 1, n_step_return: int = 1,
                 device: str | torch.device = "cpu"):
        storage, off_backward, stride = sequence_setup(
            self, DeviceReplayStorage, example, size, B, rnn_state_interval, batch_T, discount,
            n_step_return, device=device)
        super().__init__(storage, DeviceUniformSampling(storage, off_backward, stride))

    device = property(lambda self: self.storage.device, doc="Where every tensor lives.")

    extract_batch = _extract_batch


class DeviceUniformSequenceReplayFrameBuffer(DeviceUniformSequenceReplayBuffer):
    """:class:`DeviceUniformSequenceReplayBuffer` with frame-wise observation storage."""

    frame_based = True


class DevicePrioritizedSequenceReplayBuffer(ReplayBufferBase):
    """:class:`~rlfast.replays.PrioritizedSequenceReplayBuffer` with its whole state, sum
    tree included, on ``device``: same arguments (no ``share_memory``) plus ``device``;
    batches are ``SequenceSamplesFromReplayPri`` of device tensors and
    ``update_batch_priorities`` takes a device tensor, with no host read."""

    def __init__(self, example: Any, size: int, B: int, rnn_state_interval: int, batch_T: int,
                 discount: float = 1, n_step_return: int = 1, alpha: float = 0.6,
                 beta: float = 0.4, default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 device: str | torch.device = "cpu"):
        storage, off_backward, stride = sequence_setup(
            self, DeviceReplayStorage, example, size, B, rnn_state_interval, batch_T, discount,
            n_step_return, device=device)
        scheme = DevicePrioritizedSampling(
            storage, off_backward=off_backward, stride=stride, alpha=alpha, beta=beta,
            default_priority=default_priority, unique=unique,
            input_priorities=input_priorities, input_priority_shift=input_priority_shift,
            device=storage.device)
        super().__init__(storage, scheme)

    device = property(lambda self: self.storage.device, doc="Where every tensor lives.")
    _prioritized = device_scheme

    extract_batch = _extract_batch


class DevicePrioritizedSequenceReplayFrameBuffer(DevicePrioritizedSequenceReplayBuffer):
    """:class:`DevicePrioritizedSequenceReplayBuffer` with frame-wise observation storage."""

    frame_based = True
