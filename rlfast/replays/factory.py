"""One place that maps what an algorithm needs from replay to the buffer class that does it.

Algorithms say *what* they replay (prioritized or uniform; stacked frames stored once;
sequences with recurrent state; time-limit aware transitions) and get the matching buffer,
instead of each assembling class names on its own. ``async_=True`` gives the variant shared
between processes (:mod:`rlfast.replays.async_`) of the same combination.
"""
from __future__ import annotations

from typing import Any

from rlfast.replays.async_ import (AsyncPrioritizedReplayBuffer,
                                   AsyncPrioritizedReplayFrameBuffer,
                                   AsyncPrioritizedSequenceReplayBuffer,
                                   AsyncPrioritizedSequenceReplayFrameBuffer, AsyncReplayBuffer,
                                   AsyncTlPrioritizedReplayBuffer, AsyncTlUniformReplayBuffer,
                                   AsyncUniformReplayBuffer, AsyncUniformReplayFrameBuffer,
                                   AsyncUniformSequenceReplayBuffer,
                                   AsyncUniformSequenceReplayFrameBuffer)
from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.non_sequence import (PrioritizedReplayBuffer, PrioritizedReplayFrameBuffer,
                                         UniformReplayBuffer, UniformReplayFrameBuffer)
from rlfast.replays.sequence import (PrioritizedSequenceReplayBuffer,
                                     PrioritizedSequenceReplayFrameBuffer,
                                     UniformSequenceReplayBuffer,
                                     UniformSequenceReplayFrameBuffer)
from rlfast.replays.time_limit import TlPrioritizedReplayBuffer, TlUniformReplayBuffer

__all__ = ["make_replay_buffer", "replay_buffer_class"]

# (prioritized, frames, sequence, time_limit) -> class
_CLASSES: dict[tuple[bool, bool, bool, bool], type[ReplayBufferBase]] = {
    (False, False, False, False): UniformReplayBuffer,
    (True, False, False, False): PrioritizedReplayBuffer,
    (False, True, False, False): UniformReplayFrameBuffer,
    (True, True, False, False): PrioritizedReplayFrameBuffer,
    (False, False, True, False): UniformSequenceReplayBuffer,
    (True, False, True, False): PrioritizedSequenceReplayBuffer,
    (False, True, True, False): UniformSequenceReplayFrameBuffer,
    (True, True, True, False): PrioritizedSequenceReplayFrameBuffer,
    (False, False, False, True): TlUniformReplayBuffer,
    (True, False, False, True): TlPrioritizedReplayBuffer,
}
# The variant of each class shared between processes.
_ASYNC: dict[type[ReplayBufferBase], type[AsyncReplayBuffer]] = {
    cls.BufferCls: cls for cls in (
        AsyncUniformReplayBuffer, AsyncPrioritizedReplayBuffer, AsyncUniformReplayFrameBuffer,
        AsyncPrioritizedReplayFrameBuffer, AsyncUniformSequenceReplayBuffer,
        AsyncPrioritizedSequenceReplayBuffer, AsyncUniformSequenceReplayFrameBuffer,
        AsyncPrioritizedSequenceReplayFrameBuffer, AsyncTlUniformReplayBuffer,
        AsyncTlPrioritizedReplayBuffer)
}
_OPTIONS = ("frames", "sequence", "time_limit")


def _describe(frames: bool, sequence: bool, time_limit: bool) -> str:
    named = [name for name, on in zip(_OPTIONS, (frames, sequence, time_limit)) if on]
    return "+".join(named) if named else "plain"


def replay_buffer_class(prioritized: bool = False, frames: bool = False, sequence: bool = False,
                        time_limit: bool = False, async_: bool = False,
                        ) -> type[ReplayBufferBase] | type[AsyncReplayBuffer]:
    """The replay buffer class with these properties (see :func:`make_replay_buffer`)."""
    key = (bool(prioritized), bool(frames), bool(sequence), bool(time_limit))
    cls = _CLASSES.get(key)
    if cls is None:
        valid = sorted({_describe(*k[1:]) for k in _CLASSES})
        raise ValueError(f"no replay buffer combines {_describe(*key[1:])} (frames={key[1]}, "
                         f"sequence={key[2]}, time_limit={key[3]}); valid combinations, each "
                         f"uniform or prioritized: {valid}")
    return _ASYNC[cls] if async_ else cls


def make_replay_buffer(prioritized: bool = False, frames: bool = False, sequence: bool = False,
                       time_limit: bool = False, async_: bool = False,
                       **kwargs: Any) -> ReplayBufferBase | AsyncReplayBuffer:
    """Build the replay buffer an algorithm asks for; ``kwargs`` go to its constructor.

    ``prioritized`` samples in proportion to priority (else uniformly); ``frames`` stores
    one frame per step of stacked image observations; ``sequence`` replays fixed-length
    sequences with stored recurrent state (R2D1); ``time_limit`` replays transitions that
    bootstrap through time-limit ends (DDPG / TD3 / SAC). ``frames`` and ``sequence`` combine;
    ``time_limit`` goes with neither. ``async_`` builds the same buffer on shared memory behind
    a reader-writer lock, for a sampler and an optimizer in different processes (an
    :class:`~rlfast.replays.async_.AsyncReplayBuffer`; ``kwargs`` may then include ``ctx``,
    the multiprocessing context of the lock). Invalid combinations raise ValueError listing
    the valid ones, with or without ``async_``.
    """
    cls = replay_buffer_class(prioritized=prioritized, frames=frames, sequence=sequence,
                              time_limit=time_limit, async_=async_)
    return cls(**kwargs)
