"""One place that maps what an algorithm needs from replay to the buffer class that does it.

Algorithms say *what* they replay (prioritized or uniform; stacked frames stored once;
sequences with recurrent state; time-limit aware transitions) and get the matching buffer,
instead of each assembling class names on its own. ``async_=True`` gives the variant shared
between processes (:mod:`rlfast.replays.async_`) of the same combination; ``device`` gives its
device twin, whose whole state lives in torch tensors on that device
(:mod:`rlfast.replays.device_buffers`).
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.replays.async_ import (AsyncPrioritizedReplayBuffer,
                                   AsyncPrioritizedReplayFrameBuffer,
                                   AsyncPrioritizedSequenceReplayBuffer,
                                   AsyncPrioritizedSequenceReplayFrameBuffer, AsyncReplayBuffer,
                                   AsyncTlPrioritizedReplayBuffer, AsyncTlUniformReplayBuffer,
                                   AsyncUniformReplayBuffer, AsyncUniformReplayFrameBuffer,
                                   AsyncUniformSequenceReplayBuffer,
                                   AsyncUniformSequenceReplayFrameBuffer)
from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.device_buffers import (DevicePrioritizedReplayBuffer,
                                           DevicePrioritizedReplayFrameBuffer,
                                           DeviceUniformReplayBuffer,
                                           DeviceUniformReplayFrameBuffer)
from rlfast.replays.device_sequence import (DevicePrioritizedSequenceReplayBuffer,
                                            DevicePrioritizedSequenceReplayFrameBuffer,
                                            DeviceUniformSequenceReplayBuffer,
                                            DeviceUniformSequenceReplayFrameBuffer)
from rlfast.replays.device_time_limit import (DeviceTlPrioritizedReplayBuffer,
                                              DeviceTlUniformReplayBuffer)
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
# The device twin of each class (its whole state in torch tensors on one device).
_DEVICE: dict[type[ReplayBufferBase], type[ReplayBufferBase]] = {
    UniformReplayBuffer: DeviceUniformReplayBuffer,
    PrioritizedReplayBuffer: DevicePrioritizedReplayBuffer,
    UniformReplayFrameBuffer: DeviceUniformReplayFrameBuffer,
    PrioritizedReplayFrameBuffer: DevicePrioritizedReplayFrameBuffer,
    UniformSequenceReplayBuffer: DeviceUniformSequenceReplayBuffer,
    PrioritizedSequenceReplayBuffer: DevicePrioritizedSequenceReplayBuffer,
    UniformSequenceReplayFrameBuffer: DeviceUniformSequenceReplayFrameBuffer,
    PrioritizedSequenceReplayFrameBuffer: DevicePrioritizedSequenceReplayFrameBuffer,
    TlUniformReplayBuffer: DeviceTlUniformReplayBuffer,
    TlPrioritizedReplayBuffer: DeviceTlPrioritizedReplayBuffer,
}
_OPTIONS = ("frames", "sequence", "time_limit")


def _describe(frames: bool, sequence: bool, time_limit: bool) -> str:
    named = [name for name, on in zip(_OPTIONS, (frames, sequence, time_limit)) if on]
    return "+".join(named) if named else "plain"


def replay_buffer_class(prioritized: bool = False, frames: bool = False, sequence: bool = False,
                        time_limit: bool = False, async_: bool = False,
                        device: str | torch.device | None = None,
                        ) -> type[ReplayBufferBase] | type[AsyncReplayBuffer]:
    """The replay buffer class with these properties (see :func:`make_replay_buffer`);
    ``device`` (not None) picks the device twin of the combination."""
    if device is not None and async_:
        raise ValueError(f"async_=True cannot go with device={device!r}: a device replay lives "
                         f"in one process (the optimizer's) and cannot be shared between "
                         f"processes; use device=None for an async buffer, or async_=False")
    key = (bool(prioritized), bool(frames), bool(sequence), bool(time_limit))
    cls = _CLASSES.get(key)
    if cls is None:
        valid = sorted({_describe(*k[1:]) for k in _CLASSES})
        raise ValueError(f"no replay buffer combines {_describe(*key[1:])} (frames={key[1]}, "
                         f"sequence={key[2]}, time_limit={key[3]}); valid combinations, each "
                         f"uniform or prioritized: {valid}")
    if device is not None:
        return _DEVICE[cls]
    return _ASYNC[cls] if async_ else cls


def make_replay_buffer(prioritized: bool = False, frames: bool = False, sequence: bool = False,
                       time_limit: bool = False, async_: bool = False,
                       device: str | torch.device | None = None,
                       **kwargs: Any) -> ReplayBufferBase | AsyncReplayBuffer:
    """Build the replay buffer an algorithm asks for; ``kwargs`` go to its constructor.

    ``prioritized`` samples in proportion to priority (else uniformly); ``frames`` stores
    one frame per step of stacked image observations; ``sequence`` replays fixed-length
    sequences with stored recurrent state (R2D1); ``time_limit`` replays transitions that
    bootstrap through time-limit ends (DDPG / TD3 / SAC). ``frames`` and ``sequence`` combine;
    ``time_limit`` goes with neither. ``async_`` builds the same buffer on shared memory behind
    a reader-writer lock, for a sampler and an optimizer in different processes (an
    :class:`~rlfast.replays.async_.AsyncReplayBuffer`; ``kwargs`` may then include ``ctx``,
    the multiprocessing context of the lock). ``device`` (e.g. ``"cuda"``; default None: numpy
    arrays on the host) builds the device twin of the same buffer, whose storage, sampling and
    batch extraction run on that device with no host read while sampling (``async_`` with a
    device raises ValueError: a device replay lives in one process). Invalid combinations
    raise ValueError listing the valid ones, with or without ``async_`` or ``device``.
    """
    cls = replay_buffer_class(prioritized=prioritized, frames=frames, sequence=sequence,
                              time_limit=time_limit, async_=async_, device=device)
    if device is not None:
        if "share_memory" in kwargs:
            raise ValueError(f"share_memory={kwargs['share_memory']!r} cannot go with "
                             f"device={device!r}: a device replay keeps its state on the device, "
                             f"in one process; leave share_memory out")
        return cls(device=device, **kwargs)
    return cls(**kwargs)
