"""Sampler data layouts: batch spec, samples buffer fields and per-trajectory statistics."""
from __future__ import annotations

from collections import namedtuple

from rlfast.envs.traj_info import TrajInfo  # noqa: F401  (re-exported)
from rlfast.utils.collections import namedarraytuple

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
