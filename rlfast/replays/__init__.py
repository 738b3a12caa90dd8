"""Replay buffers for off-policy algorithms (DQN family, DDPG/TD3/SAC): uniform or prioritized,
single transitions or sequences, with plain or frame-wise observation storage.

Every buffer pre-allocates ``[T, B]`` arrays (``T = ceil(size / B)``), appends ``[T_in, B]``
samples at a wrapping cursor, computes n-step returns as data arrives, and never replays a step
whose inputs or targets are not (or no longer) in the buffer. :func:`make_replay_buffer` picks
the class from what the algorithm needs; the ``Async*`` variants (:mod:`rlfast.replays.async_`)
share one buffer between processes on shared memory behind a reader-writer lock; the ``Device*``
twins (:mod:`rlfast.replays.device_buffers` and beside it) keep their whole state in torch tensors
on one device and sample batches there with no host read. Layer: imports rlfast.utils only.
"""
from rlfast.replays.async_ import (AsyncPrioritizedReplayBuffer, AsyncPrioritizedReplayFrameBuffer,
                                   AsyncPrioritizedSequenceReplayBuffer,
                                   AsyncPrioritizedSequenceReplayFrameBuffer, AsyncReplayBuffer,
                                   AsyncTlPrioritizedReplayBuffer, AsyncTlUniformReplayBuffer,
                                   AsyncUniformReplayBuffer, AsyncUniformReplayFrameBuffer,
                                   AsyncUniformSequenceReplayBuffer,
                                   AsyncUniformSequenceReplayFrameBuffer)
from rlfast.replays.collections import (AgentInputs, PrioritiesSamplesToBuffer,
                                        SamplesFromReplay, SamplesFromReplayPri,
                                        SamplesFromReplayTL, SamplesFromReplayTLPri,
                                        SequenceSamplesFromReplay, SequenceSamplesFromReplayPri)
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
from rlfast.replays.draw_alarm import ZeroPriorityError
from rlfast.replays.factory import make_replay_buffer, replay_buffer_class
from rlfast.replays.non_sequence import (PrioritizedReplayBuffer, PrioritizedReplayFrameBuffer,
                                         UniformReplayBuffer, UniformReplayFrameBuffer)
from rlfast.replays.prefetch import PrefetchingReplay
from rlfast.replays.sequence import (PrioritizedSequenceReplayBuffer,
                                     PrioritizedSequenceReplayFrameBuffer,
                                     UniformSequenceReplayBuffer,
                                     UniformSequenceReplayFrameBuffer)
from rlfast.replays.sum_tree import AsyncSumTree, SumTree
from rlfast.replays.time_limit import TlPrioritizedReplayBuffer, TlUniformReplayBuffer

__all__ = [
    "SumTree", "UniformReplayBuffer", "PrioritizedReplayBuffer", "UniformReplayFrameBuffer",
    "PrioritizedReplayFrameBuffer", "UniformSequenceReplayBuffer",
    "PrioritizedSequenceReplayBuffer", "UniformSequenceReplayFrameBuffer",
    "PrioritizedSequenceReplayFrameBuffer", "TlUniformReplayBuffer", "TlPrioritizedReplayBuffer",
    "make_replay_buffer", "replay_buffer_class", "AgentInputs", "SamplesFromReplay",
    "SamplesFromReplayPri", "SequenceSamplesFromReplay", "SequenceSamplesFromReplayPri",
    "PrioritiesSamplesToBuffer", "SamplesFromReplayTL", "SamplesFromReplayTLPri",
    "AsyncSumTree", "AsyncReplayBuffer", "AsyncUniformReplayBuffer",
    "AsyncPrioritizedReplayBuffer", "AsyncUniformReplayFrameBuffer",
    "AsyncPrioritizedReplayFrameBuffer", "AsyncUniformSequenceReplayBuffer",
    "AsyncPrioritizedSequenceReplayBuffer", "AsyncUniformSequenceReplayFrameBuffer",
    "AsyncPrioritizedSequenceReplayFrameBuffer", "AsyncTlUniformReplayBuffer",
    "AsyncTlPrioritizedReplayBuffer", "DeviceUniformReplayBuffer", "DevicePrioritizedReplayBuffer",
    "DeviceUniformReplayFrameBuffer", "DevicePrioritizedReplayFrameBuffer",
    "DeviceUniformSequenceReplayBuffer", "DevicePrioritizedSequenceReplayBuffer",
    "DeviceUniformSequenceReplayFrameBuffer", "DevicePrioritizedSequenceReplayFrameBuffer",
    "DeviceTlUniformReplayBuffer", "DeviceTlPrioritizedReplayBuffer", "PrefetchingReplay",
    "ZeroPriorityError",
]
