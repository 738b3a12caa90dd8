"""Sampler data layouts: batch spec, samples buffer fields and per-trajectory statistics."""
from __future__ import annotations

from collections import namedtuple

import numpy as np

from rlfast.utils.collections import AttrDict, namedarraytuple

Samples = namedarraytuple("Samples", ["agent", "env"])
AgentSamples = namedarraytuple("AgentSamples", ["action", "prev_action", "agent_info"])
AgentSamplesBsv = namedarraytuple("AgentSamplesBsv",
                                  ["action", "prev_action", "agent_info", "bootstrap_value"])
EnvSamples = namedarraytuple("EnvSamples",
                             ["observation", "reward", "prev_reward", "done", "env_info"])


class BatchSpec(namedtuple("BatchSpec", ["T", "B"])):
    """Sampling batch dimensions: ``T`` time steps by ``B`` parallel environments."""

    __slots__ = ()

    @property
    def size(self) -> int:
        return self.T * self.B


class TrajInfo(AttrDict):
    """Running statistics of one trajectory; the sampler calls ``step`` every env step.

    Fields starting with an underscore are bookkeeping and are not logged. Subclass to track
    more (see AtariTrajInfo); the class attribute ``discount`` can be set by the runner.
    """

    _discount = 1.0

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.Length = 0
        self.Return = 0.0
        self.NonzeroRewards = 0
        self.DiscountedReturn = 0.0
        self._cur_discount = 1.0

    def step(self, observation, action, reward, done, agent_info, env_info) -> None:
        reward = float(reward)
        self.Length += 1
        self.Return += reward
        self.NonzeroRewards += reward != 0
        self.DiscountedReturn += self._cur_discount * reward
        self._cur_discount *= self._discount

    def terminate(self, observation) -> "TrajInfo":
        return self


def traj_info_public(info: TrajInfo) -> dict:
    """The loggable fields of a trajectory info (no leading underscore)."""
    return {k: v for k, v in info.items() if not k.startswith("_")}


def stack_traj_infos(traj_infos: list, key: str) -> np.ndarray:
    return np.asarray([info[key] for info in traj_infos], dtype=np.float64)
