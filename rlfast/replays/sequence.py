"""Replay of fixed-length sequences with stored recurrent state (R2D1).

A batch is a ``SequenceSamplesFromReplay`` whose time fields have leading dims
``[batch_T + n_step_return, batch_B]``: ``batch_T`` steps to train on (including any warmup
the algorithm wants) plus ``n_step_return`` more, so the algorithm can slice the bootstrap
targets ``agent_inputs[n:]`` from the same tensors. Every row, the last ones included, holds
complete n-step returns. ``init_rnn_state`` (leading dim ``[batch_B]``, as stored) is the
agent's recurrent state before the first step. With ``rnn_state_interval > 0`` the state is
stored only every that many steps and sequences start only there; with 0 no state is stored,
sequences start anywhere and ``init_rnn_state`` is None.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.collections import AgentInputs, SequenceSamplesFromReplay
from rlfast.replays.sampling import PrioritizedSampling, UniformSampling
from rlfast.replays.storage import ReplayStorage
from rlfast.utils.buffer import buffer_func
from rlfast.utils.checks import check_int
from rlfast.utils.misc import extract_sequences

__all__ = ["UniformSequenceReplayBuffer", "UniformSequenceReplayFrameBuffer",
           "PrioritizedSequenceReplayBuffer", "PrioritizedSequenceReplayFrameBuffer",
           "extract_sequence_batch", "sequences_at", "sequence_setup"]


def sequences_at(storage: Any, T_idxs: Any, B_idxs: Any, steps: Any, envs: Any, length: int,
                 gather: Callable[[Any], Any]) -> SequenceSamplesFromReplay:
    """``SequenceSamplesFromReplay`` of ``length`` steps from each start of a storage (numpy,
    or its device twin): ``steps`` / ``envs`` are the ``[length * n]`` flattened grid (time
    major) for the agent inputs, ``gather`` takes the ``[length, n]`` sequences of a stored
    ``[T, B]`` field (leaf by leaf)."""
    n = T_idxs.shape[0]

    def unflatten(x: Any) -> Any:
        return x.reshape((length, n) + tuple(x.shape[1:]))

    observation = buffer_func(storage.observation(steps, envs), unflatten)
    prev_action, prev_reward = buffer_func(storage.prev_inputs(steps, envs), unflatten)
    s = storage.samples
    return SequenceSamplesFromReplay(
        agent_inputs=AgentInputs(observation, prev_action, prev_reward),
        action=gather(s.action),
        return_=gather(storage.samples_return_),
        done=gather(s.done),
        done_n=gather(storage.samples_done_n),
        init_rnn_state=storage.rnn_state(T_idxs, B_idxs),
    )


def sequence_setup(buffer: Any, storage_cls: type, example: Any, size: int, B: int,
                   rnn_state_interval: int, batch_T: int, discount: float, n_step_return: int,
                   **storage_kwargs: Any) -> tuple[Any, int, int]:
    """A sequence buffer's storage (``storage_cls``: numpy or the device twin, built with
    ``storage_kwargs``), plus the backward window (steps) and stride shared by both schemes;
    sets the buffer's ``batch_T`` and ``rnn_state_interval``."""
    cls_name = type(buffer).__name__
    batch_T = check_int(batch_T, "batch_T", minimum=1, owner=cls_name)
    n_step_return = check_int(n_step_return, "n_step_return", minimum=1, owner=cls_name)
    storage = storage_cls(example, size, B, discount, n_step_return,
                          frame_based=buffer.frame_based, rnn_state_interval=rnn_state_interval,
                          **storage_kwargs)
    buffer.batch_T = int(batch_T)
    buffer.rnn_state_interval = storage.rnn_state_interval
    # The last of the batch_T + n rows must have its own n-step window written.
    off_backward = batch_T + 2 * n_step_return - 2
    return storage, off_backward, max(1, storage.rnn_state_interval)


def extract_sequence_batch(storage: ReplayStorage, T_idxs: np.ndarray, B_idxs: np.ndarray,
                           length: int) -> SequenceSamplesFromReplay:
    """Numpy ``SequenceSamplesFromReplay`` of ``length`` steps from each start."""
    T_idxs = np.asarray(T_idxs)
    B_idxs = np.asarray(B_idxs)
    n = len(T_idxs)
    steps = ((T_idxs[None, :] + np.arange(length)[:, None]) % storage.T).ravel()
    envs = np.broadcast_to(B_idxs[None, :], (length, n)).ravel()
    return sequences_at(storage, T_idxs, B_idxs, steps, envs, length,
                        lambda x: extract_sequences(x, T_idxs, B_idxs, length))


def _extract_batch(self: Any, T_idxs: np.ndarray, B_idxs: np.ndarray
                   ) -> SequenceSamplesFromReplay:
    """The numpy sequences of ``batch_T + n_step_return`` steps from these starts."""
    return extract_sequence_batch(self.storage, T_idxs, B_idxs,
                                  self.batch_T + self.n_step_return)


class UniformSequenceReplayBuffer(ReplayBufferBase):
    """Sequences of ``batch_T + n_step_return`` steps, starts drawn uniformly among valid
    stored-state steps. ``example`` needs ``observation, action, reward, done`` and, when
    ``rnn_state_interval > 0``, ``prev_rnn_state`` (the agent's state before that step).
    With ``share_memory`` all its state lives on OS shared memory (see
    :mod:`rlfast.replays.async_`)."""

    def __init__(self, example: Any, size: int, B: int, rnn_state_interval: int, batch_T: int,
                 discount: float = 1, n_step_return: int = 1, share_memory: bool = False):
        storage, off_backward, stride = sequence_setup(
            self, ReplayStorage, example, size, B, rnn_state_interval, batch_T, discount,
            n_step_return, share_memory=share_memory)
        super().__init__(storage, UniformSampling(storage, off_backward, stride,
                                                  share_memory=share_memory))

    extract_batch = _extract_batch


class UniformSequenceReplayFrameBuffer(UniformSequenceReplayBuffer):
    """:class:`UniformSequenceReplayBuffer` with frame-wise observation storage."""

    frame_based = True


class PrioritizedSequenceReplayBuffer(ReplayBufferBase):
    """Sequences drawn in proportion to priority; one sum-tree leaf per possible start
    (``[T // rnn_state_interval, B]``), so a longer interval makes a smaller, faster tree.

    Input priorities (one per new start: scalar, ``[B]`` or ``[n_new_starts, B]``) are
    assigned ``input_priority_shift`` starts back, e.g. R2D1 with 40-step sampler batches,
    ``rnn_state_interval=40`` and 120-step sequences uses a shift of 2 so the priority
    computed from the newest batch lands on the sequence starting two batches earlier.
    With ``share_memory`` all its state, sum tree included, lives on OS shared memory (see
    :mod:`rlfast.replays.async_`).
    """

    def __init__(self, example: Any, size: int, B: int, rnn_state_interval: int, batch_T: int,
                 discount: float = 1, n_step_return: int = 1, alpha: float = 0.6,
                 beta: float = 0.4, default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 share_memory: bool = False):
        storage, off_backward, stride = sequence_setup(
            self, ReplayStorage, example, size, B, rnn_state_interval, batch_T, discount,
            n_step_return, share_memory=share_memory)
        scheme = PrioritizedSampling(
            storage, off_backward=off_backward, stride=stride, alpha=alpha, beta=beta,
            default_priority=default_priority, unique=unique,
            input_priorities=input_priorities, input_priority_shift=input_priority_shift,
            share_memory=share_memory)
        super().__init__(storage, scheme)

    extract_batch = _extract_batch


class PrioritizedSequenceReplayFrameBuffer(PrioritizedSequenceReplayBuffer):
    """:class:`PrioritizedSequenceReplayBuffer` with frame-wise observation storage."""

    frame_based = True
