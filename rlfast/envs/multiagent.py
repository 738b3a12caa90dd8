"""Environments with several agents: each agent is one column of the samplers' batch.

A :class:`MultiAgentEnv` steps ``n_agents`` agents together. Its spaces are one agent's, and
every array it exchanges has a leading agent dimension: ``reset()`` returns observations
``[n_agents, ...]``, ``step(action)`` takes actions ``[n_agents, ...]`` and returns rewards
and done flags ``[n_agents]`` and an env_info whose fields are ``[n_agents]`` too. The
samplers give every agent its own column, so a sampler of ``batch_B`` such environments
fills ``[T, batch_B * n_agents]`` buffers, agent ``k`` of environment ``e`` in column
``e * n_agents + k``, and agents, models and algorithms see ordinary single-agent columns.

Agents may leave before the episode ends (PettingZoo removes an agent that terminates). A
departed agent's column is *invalid* until the episode ends: ``env_info.valid`` is False,
its done flag stays True (nothing is bootstrapped through it), its reward is 0 and its
observation zeros (with its agent id, when the observation carries one); the action the
agent computes for it is never given to the environment. The episode ends when every
agent is done; the sampler then resets the environment.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any, Sequence

import numpy as np

from rlfast.envs.base import Env
from rlfast.envs.traj_info import TrajInfo
from rlfast.spaces.float_box import FloatBox

__all__ = ["MultiAgentEnv", "MultiAgentInfo", "MultiAgentTrajInfo", "agent_observation_box",
           "agents_per_env"]

MultiAgentInfo = namedtuple("MultiAgentInfo", ["valid", "timeout"])
MultiAgentInfo.__doc__ = (
    "Per-agent step information, each field ``[n_agents]`` bool: ``valid``, the agent acted "
    "at this step (it had not left the episode); ``timeout``, its episode was cut by a time "
    "limit (truncated, not terminated), so the algorithm may bootstrap its value.")


def agent_observation_box(local_size: int, id_size: int, state_size: int) -> FloatBox:
    """One agent's observation vector, laid out as ``[local | agent id | global state]``: a
    :class:`FloatBox` whose ``layout`` attribute is ``(local_size, id_size, state_size)``.

    ``local_size`` entries of the agent's own observation, then ``id_size`` entries of a
    one-hot agent index (``n_agents``, or 0 without ids), then ``state_size`` entries of the
    global state a centralised critic reads (0 without one). Multi-agent models read the
    layout from here; to every other consumer it is a plain :class:`FloatBox`."""
    layout = (int(local_size), int(id_size), int(state_size))
    box = FloatBox(-np.inf, np.inf, shape=(sum(layout),))
    box.layout = layout
    return box


class MultiAgentEnv(Env):
    """Base class of environments whose batch columns are agents (see the module docstring).

    Subclasses set ``n_agents`` and ``agent_names`` (one name per column, in column order)
    and the per-agent spaces; ``step`` returns a :class:`MultiAgentInfo` env_info."""

    n_agents: int = 1
    agent_names: Sequence[str] = ()


def agents_per_env(EnvCls: Any, env_kwargs: dict) -> int:
    """How many batch columns one environment built as ``EnvCls(**env_kwargs)`` fills: its
    ``agents_per_env(**env_kwargs)`` class method when it has one (multi-agent environments),
    else 1."""
    count = getattr(EnvCls, "agents_per_env", None)
    if count is None:
        return 1
    n = int(count(**env_kwargs))
    if n < 1:
        raise ValueError(f"{getattr(EnvCls, '__name__', EnvCls)} has no agents ({n})")
    return n


class MultiAgentTrajInfo(TrajInfo):
    """Episode statistics of a multi-agent environment, from per-agent rewards.

    ``Return`` is the mean over agents of each agent's return (the per-agent return MAPPO
    and BenchMARL report; it is also what evaluation and ``stop_return`` read);
    ``TeamReturn`` is the sum over agents; ``Return/<agent>`` is each agent's own return
    (agents named by ``_agents``, bound by the environment family; ``agent_<k>`` without).
    ``Length`` counts environment steps, ``DiscountedReturn`` is the mean over agents."""

    def __init__(self, _discount: float = 1.0, _agents: Sequence[str] | None = None,
                 **kwargs: Any):
        super().__init__(_discount=_discount, **kwargs)
        self._agents = None if _agents is None else tuple(_agents)
        self.TeamReturn = 0.0
        self._returns = None

    def step(self, observation, action, reward, done, agent_info, env_info) -> None:
        reward = np.atleast_1d(np.asarray(reward, dtype=np.float64))  # one agent: a scalar
        returns = self["_returns"]
        if returns is None:
            returns = self["_returns"] = np.zeros(reward.shape[0])
            names = self["_agents"] or tuple(f"agent_{k}" for k in range(reward.shape[0]))
            if len(names) != reward.shape[0]:
                raise ValueError(f"MultiAgentTrajInfo: {len(names)} agent names for "
                                 f"{reward.shape[0]} agents")
            self["_agents"] = tuple(names)
        returns += reward
        mean = float(reward.mean())
        self["Length"] += 1
        self["NonzeroRewards"] += bool(np.any(reward != 0))
        discount = self["_cur_discount"]
        self["DiscountedReturn"] += discount * mean
        self["_cur_discount"] = discount * self["_discount"]
        self["Return"] = float(returns.mean())
        self["TeamReturn"] = float(returns.sum())
        for name, value in zip(self["_agents"], returns):
            self["Return/" + name] = float(value)
