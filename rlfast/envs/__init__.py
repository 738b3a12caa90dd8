"""Environments under the rlfast interface: the ``Env`` base class, its step/space records, the
wrappers that run gymnasium environments, the Atari environment, and multi-agent
environments (``MultiAgentEnv``, one batch column per agent; ``PettingZooEnv``).

``AtariEnv``, ``AtariTrajInfo`` and ``PettingZooEnv`` load on first use, so gymnasium-only
runs do not pay for importing ale-py and OpenCV, and PettingZoo stays optional.
"""
from rlfast.envs.base import Env, EnvSpaces, EnvStep
from rlfast.envs.gym import EnvInfoWrapper, GymEnvWrapper, make
from rlfast.envs.multiagent import MultiAgentEnv, MultiAgentInfo, MultiAgentTrajInfo

__all__ = ["Env", "EnvStep", "EnvSpaces", "GymEnvWrapper", "EnvInfoWrapper", "make",
           "AtariEnv", "AtariTrajInfo", "MultiAgentEnv", "MultiAgentInfo", "MultiAgentTrajInfo",
           "PettingZooEnv"]


def __getattr__(name: str):
    if name in ("AtariEnv", "AtariTrajInfo"):
        from rlfast.envs import atari
        return getattr(atari, name)
    if name == "PettingZooEnv":
        from rlfast.envs.pettingzoo import PettingZooEnv
        return PettingZooEnv
    raise AttributeError(f"module 'rlfast.envs' has no attribute {name!r}")
