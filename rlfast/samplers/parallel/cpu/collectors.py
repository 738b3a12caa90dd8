"""Collectors whose actions come from the agent in the same process (CPU and serial samplers).

Each is the one training (or evaluation) loop of ``rlfast.samplers.collectors`` with the
in-process :class:`~rlfast.samplers.collectors.AgentActions` and a reset policy.
"""
from __future__ import annotations

from rlfast.samplers.collectors import AgentActions, BaseEvalCollector, TrainCollector


class CpuResetCollector(TrainCollector):
    """Resets a finished environment immediately, mid-batch.

    A trajectory ends on ``env_info.traj_done`` when the env provides it (e.g. Atari episodic
    lives: a lost life gives ``done`` but not ``traj_done``), else on ``done``; the agent's
    per-env state is reset on ``done``.
    """

    ActionsCls = AgentActions
    mid_batch_reset = True


class CpuWaitResetCollector(TrainCollector):
    """Leaves a finished environment idle (zeros recorded) until the batch ends, then resets it.

    Recurrent agents need this: a training sequence cannot reset its LSTM state mid-sequence,
    so samples after a ``done`` are masked out instead; slow env resets also overlap training.
    """

    ActionsCls = AgentActions
    mid_batch_reset = False


class CpuEvalCollector(BaseEvalCollector):
    """Evaluation with the worker's own agent copy; the worker returns the completed
    trajectory infos to the master in its reply."""

    ActionsCls = AgentActions
