"""Replay of single transitions with n-step returns (DQN and its variants).

A batch is a ``SamplesFromReplay`` with leading dim ``[batch_B]``: the agent inputs at step
``t``, the action taken, the n-step return and ``done_n`` from ``t``, and the agent inputs at
``t + n_step_return`` for the bootstrap target. A step is replayed only once its n-step future
is written and while its previous step (and, for frame buffers, its frame history) is not yet
overwritten.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.collections import AgentInputs, SamplesFromReplay
from rlfast.replays.sampling import PrioritizedSampling, UniformSampling
from rlfast.replays.storage import ReplayStorage

__all__ = ["UniformReplayBuffer", "UniformReplayFrameBuffer", "PrioritizedReplayBuffer",
           "PrioritizedReplayFrameBuffer", "extract_transitions", "transitions_at"]


def transitions_at(storage: Any, T_idxs: Any, B_idxs: Any,
                   concatenate: Callable[[list], Any]) -> SamplesFromReplay:
    """``SamplesFromReplay`` of the transitions at ``(T_idxs[i], B_idxs[i])`` of a storage
    (numpy, or its device twin): index arrays and ``np.concatenate``, or index tensors and
    ``torch.cat``."""
    k = T_idxs.shape[0]
    # Inputs at t and at t + n in one gather each.
    T_all = concatenate([T_idxs, (T_idxs + storage.n_step_return) % storage.T])
    B_all = concatenate([B_idxs, B_idxs])
    observation = storage.observation(T_all, B_all)
    prev_action, prev_reward = storage.prev_inputs(T_all, B_all)
    s = storage.samples
    return SamplesFromReplay(
        agent_inputs=AgentInputs(observation[:k], prev_action[:k], prev_reward[:k]),
        action=s.action[T_idxs, B_idxs],
        return_=storage.samples_return_[T_idxs, B_idxs],
        done=s.done[T_idxs, B_idxs],
        done_n=storage.samples_done_n[T_idxs, B_idxs],
        target_inputs=AgentInputs(observation[k:], prev_action[k:], prev_reward[k:]),
    )


def extract_transitions(storage: ReplayStorage, T_idxs: np.ndarray,
                        B_idxs: np.ndarray) -> SamplesFromReplay:
    """Numpy ``SamplesFromReplay`` of the transitions at ``(T_idxs[i], B_idxs[i])``."""
    return transitions_at(storage, np.asarray(T_idxs), np.asarray(B_idxs), np.concatenate)


class UniformReplayBuffer(ReplayBufferBase):
    """Transitions drawn uniformly from a ``[T, B]`` ring (``T = ceil(size / B)``).

    ``example`` is one sample without leading dims, with at least the fields ``observation``,
    ``action``, ``reward``, ``done``; ``append_samples`` takes the same fields with leading
    ``[T_in, B]``. ``sample_batch(batch_B)`` returns ``SamplesFromReplay`` of torch tensors.
    The agent inputs' ``prev_action`` / ``prev_reward`` are the previous step's, zeroed after
    a ``done``, unless the example carries ``prev_action`` / ``prev_reward`` fields (then
    those are replayed as given, e.g. for collectors that reset without a ``done``).
    With ``share_memory`` all its state lives on OS shared memory (see
    :mod:`rlfast.replays.async_`).
    """

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, share_memory: bool = False):
        storage = ReplayStorage(example, size, B, discount, n_step_return,
                                frame_based=self.frame_based, share_memory=share_memory)
        super().__init__(storage, UniformSampling(storage, off_backward=n_step_return,
                                                  share_memory=share_memory))

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> SamplesFromReplay:
        """The numpy transitions at these steps (see :func:`extract_transitions`)."""
        return extract_transitions(self.storage, T_idxs, B_idxs)


class UniformReplayFrameBuffer(UniformReplayBuffer):
    """:class:`UniformReplayBuffer` storing one frame per step of stacked image observations
    ``[C, H, W]`` (oldest frame first) and rebuilding the stacks on replay."""

    frame_based = True


class PrioritizedReplayBuffer(ReplayBufferBase):
    """Transitions drawn in proportion to ``priority ** alpha`` (sum tree), with importance
    weights ``(N * P) ** -beta / max`` in ``SamplesFromReplayPri.is_weights``.

    New transitions get ``default_priority``, or, with ``input_priorities``, the priorities
    appended with them (a ``priorities`` field, scalar / ``[B]`` / ``[T_in, B]``, assigned
    ``input_priority_shift`` steps back). After training on a batch, call
    ``update_batch_priorities`` with one new priority per sample. ``unique`` samples without
    replacement within a batch. With ``share_memory`` all its state, sum tree included, lives
    on OS shared memory (see :mod:`rlfast.replays.async_`).
    """

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 share_memory: bool = False):
        storage = ReplayStorage(example, size, B, discount, n_step_return,
                                frame_based=self.frame_based, share_memory=share_memory)
        scheme = PrioritizedSampling(
            storage, off_backward=n_step_return, stride=1, alpha=alpha, beta=beta,
            default_priority=default_priority, unique=unique,
            input_priorities=input_priorities, input_priority_shift=input_priority_shift,
            share_memory=share_memory)
        super().__init__(storage, scheme)

    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> SamplesFromReplay:
        """The numpy transitions at these steps (see :func:`extract_transitions`)."""
        return extract_transitions(self.storage, T_idxs, B_idxs)


class PrioritizedReplayFrameBuffer(PrioritizedReplayBuffer):
    """:class:`PrioritizedReplayBuffer` with frame-wise observation storage."""

    frame_based = True
