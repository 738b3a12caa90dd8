"""Environments that go non-finite at a known step, for the NaN / inf boundary tests.

``NanEnv`` is an rlfast Env whose ``bad_step``-th call to ``step`` (counted over the
instance's lifetime, 1-based) returns ``value`` (NaN by default) in the observation or the
reward; only the instance seeded ``bad_seed`` does, so a test knows the environment index
(samplers seed environment ``i`` with ``seed + i``). Its observation is otherwise
``[steps taken, seed tag, 0]``. ``NanObsGymEnv`` is a gymnasium environment whose
observations turn NaN (and stay NaN) after ``nan_after`` steps of the instance, for
end-to-end runs of the command line under a registered id (:func:`register_nan_env`).
Defined in a module so that worker processes find them by reference.
"""
from __future__ import annotations

from collections import namedtuple

import gymnasium
import numpy as np

from rlfast.envs import Env, EnvStep
from rlfast.spaces import FloatBox, IntBox

NAN_GYM_ID = "RlfastNanObs-v0"
NanInfo = namedtuple("NanInfo", ["timeout"])


class NanEnv(Env):
    """rlfast Env that writes ``value`` into ``field`` at its ``bad_step``-th step; see the
    module docstring. Episodes last ``episode_len`` steps (long by default, so no reset
    lands inside a test's batches)."""

    def __init__(self, bad_step: int = 5, field: str = "observation", value: float = float("nan"),
                 bad_seed: int | None = None, episode_len: int = 10_000):
        if field not in ("observation", "reward"):
            raise ValueError(f"field must be 'observation' or 'reward'; got {field!r}")
        self._observation_space = FloatBox(-1e6, 1e6, shape=(3,))
        self._action_space = IntBox(0, 2, dtype="int64")
        self.bad_step, self.field, self.value = int(bad_step), field, float(value)
        self.bad_seed = bad_seed
        self.episode_len = int(episode_len)
        self.steps = 0
        self.t = 0
        self.tag = -1.0

    def seed(self, seed):
        self.tag = float(seed)

    def _bad_now(self, field: str) -> bool:
        return (self.field == field and self.steps == self.bad_step
                and (self.bad_seed is None or self.tag == self.bad_seed))

    def reset(self):
        self.t = 0
        return np.array([self.steps, self.tag, 0.0], dtype=np.float32)

    def step(self, action):
        self.steps += 1
        self.t += 1
        observation = np.array([self.steps, self.tag, 0.0], dtype=np.float32)
        if self._bad_now("observation"):
            observation[2] = self.value
        reward = self.value if self._bad_now("reward") else 1.0
        return EnvStep(observation, reward, self.t >= self.episode_len, NanInfo(False))


class NanObsGymEnv(gymnasium.Env):
    """Four float observations drawn from the seeded generator, two actions, reward 1; every
    observation from the instance's ``nan_after``-th step on (resets included) is NaN."""

    def __init__(self, nan_after: int = 200):
        self.observation_space = gymnasium.spaces.Box(-np.inf, np.inf, shape=(4,),
                                                      dtype=np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.nan_after = int(nan_after)
        self.steps = 0

    def _obs(self) -> np.ndarray:
        if self.steps >= self.nan_after:
            return np.full(4, np.nan, dtype=np.float32)
        return self.np_random.normal(size=4).astype(np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return self._obs(), {}

    def step(self, action):
        self.steps += 1
        return self._obs(), 1.0, False, False, {}


def register_nan_env() -> str:
    """Register :class:`NanObsGymEnv` as ``RlfastNanObs-v0`` (NaN from each instance's 200th
    step, episodes cut at 50 steps) once per process, and return the id."""
    if NAN_GYM_ID not in gymnasium.registry:
        gymnasium.register(id=NAN_GYM_ID, entry_point=NanObsGymEnv, max_episode_steps=50,
                           kwargs=dict(nan_after=200), disable_env_checker=True)
    return NAN_GYM_ID
