"""Environments under the rlfast interface: the ``Env`` base class, its step/space records, the
wrappers that run gymnasium environments, and the Atari environment.

``AtariEnv`` and ``AtariTrajInfo`` load on first use, so gymnasium-only runs do not pay for
importing ale-py and OpenCV.
"""
from rlfast.envs.base import Env, EnvSpaces, EnvStep
from rlfast.envs.gym import EnvInfoWrapper, GymEnvWrapper, make

__all__ = ["Env", "EnvStep", "EnvSpaces", "GymEnvWrapper", "EnvInfoWrapper", "make",
           "AtariEnv", "AtariTrajInfo"]


def __getattr__(name: str):
    if name in ("AtariEnv", "AtariTrajInfo"):
        from rlfast.envs import atari
        return getattr(atari, name)
    raise AttributeError(f"module 'rlfast.envs' has no attribute {name!r}")
