"""Evaluation collector for the serial sampler (runs in the master process)."""
from __future__ import annotations

from rlfast.samplers.collectors import AgentActions, BaseEvalCollector


class SerialEvalCollector(BaseEvalCollector):
    """Evaluates the in-process agent and returns the completed trajectory infos directly."""

    ActionsCls = AgentActions

    def __init__(self, envs: list, agent, TrajInfoCls, max_T: int,
                 max_trajectories: int | None = None):
        super().__init__(rank=0, envs=envs, TrajInfoCls=TrajInfoCls, max_T=max_T, agent=agent,
                         max_trajectories=max_trajectories)
