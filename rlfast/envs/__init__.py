"""Environments under the rlfast interface: the ``Env`` base class, its step/space records, and
the wrappers that run gymnasium environments."""
from rlfast.envs.atari import AtariEnv, AtariTrajInfo
from rlfast.envs.base import Env, EnvSpaces, EnvStep
from rlfast.envs.gym import EnvInfoWrapper, GymEnvWrapper, make

__all__ = ["Env", "EnvStep", "EnvSpaces", "GymEnvWrapper", "EnvInfoWrapper", "make",
           "AtariEnv", "AtariTrajInfo"]
