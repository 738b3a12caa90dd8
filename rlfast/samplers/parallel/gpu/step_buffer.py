"""The step buffer the GPU samplers' workers and action server share, one block per group.

Each worker group (all workers for ``GpuSampler``, each half for the alternating samplers, all
evaluation environments for evaluation) has its rows of the step buffer in ONE page-aligned
block of OS shared memory, laid out so that what crosses to the device and back is contiguous:

    observation | reward | reset_snapshot | action | agent_info | reset

The workers write ``observation``, ``reward`` and ``reset`` (their agent-reset requests) and
read ``action`` and ``agent_info``; the master copies its snapshot of the reset requests into
``reset_snapshot``. One host-to-device copy of ``observation .. action`` (the ``to_device``
span) carries the agent inputs (uint8 frames as they are, the previous reward and action) and
the reset mask; one device-to-host copy of ``action .. agent_info`` (the ``from_device`` span)
hands back everything the workers read. With the agent on CUDA the block is page-locked (see
``rlfast.utils.pinned``), so both copies are asynchronous DMA.
"""
from __future__ import annotations

import numpy as np

from rlfast.utils.buffer import packed_buffers, torchify_buffer
from rlfast.utils.collections import namedarraytuple

__all__ = ["StepBuffer", "GroupStepBuffer"]

StepBuffer = namedarraytuple("StepBuffer", ["observation", "action", "reward", "reset",
                                            "agent_info"])


class GroupStepBuffer:
    """One worker group's rows of the step buffer, in one shared block (layout above).

    ``np`` / ``pyt``: the :data:`StepBuffer` of the group's ``n`` rows (numpy / torch views);
    ``reset_snapshot``: the master's copy of the reset requests it is applying (bool ``[n]``);
    ``block``: the uint8 array every field is a view of; ``to_device`` / ``from_device``: the
    ``(start, stop)`` byte ranges of ``block`` that cross to the device and back.
    """

    def __init__(self, example: StepBuffer, n: int, share_memory: bool = True):
        if n < 1:
            raise ValueError(f"GroupStepBuffer needs at least one row; got n={n}")
        fields = [example.observation, example.reward, np.zeros((), dtype=bool),
                  example.action, example.agent_info, example.reset]
        (observation, reward, snapshot, action, agent_info, reset), block, spans = \
            packed_buffers(fields, n, share_memory=share_memory)
        self.n = int(n)
        self.np = StepBuffer(observation, action, reward, reset, agent_info)
        self.pyt = torchify_buffer(self.np)
        self.reset_snapshot = snapshot
        self.reset_snapshot_pyt = torchify_buffer(snapshot)
        self.block = block
        self.to_device = (spans[0][0], spans[3][1])
        self.from_device = (spans[3][0], spans[4][1])

    def rows(self, start: int, stop: int) -> StepBuffer:
        """The numpy :data:`StepBuffer` of rows ``start:stop`` (a worker's share)."""
        return self.np[start:stop]
