"""A tiny deterministic rlfast Env for the sampler and collector tests.

Its observation is ``[steps since reset, number of resets, seed tag]``, so a test can read off
exactly when an environment was reset and which environment instance wrote a buffer column.
An episode ("trajectory") has ``lives`` lives of ``life_len`` steps: every life ends with
``done=True``, but only the last one also sets ``env_info.traj_done`` (like Atari's episodic
lives), and the environment only needs a reset after ``traj_done``. The reward is
``1 + action``, so rewards reveal the actions that produced them. Defined in a module so that
worker processes find it by reference.
"""
from collections import namedtuple

import numpy as np

from rlfast.envs import Env, EnvStep
from rlfast.spaces import FloatBox, IntBox

CountingInfo = namedtuple("CountingInfo", ["traj_done", "timeout"])


class CountingEnv(Env):
    """Deterministic counter environment; see the module docstring."""

    def __init__(self, life_len: int = 3, lives: int = 1):
        self._observation_space = FloatBox(-1e6, 1e6, shape=(3,))
        self._action_space = IntBox(0, 2, dtype="int64")
        self.life_len, self.lives = int(life_len), int(lives)
        self.t = 0
        self.n_resets = 0
        self.tag = -1.0
        self.closed = False

    def seed(self, seed):
        self.tag = float(seed)

    def _obs(self):
        return np.array([self.t, self.n_resets, self.tag], dtype=np.float32)

    def reset(self):
        self.n_resets += 1
        self.t = 0
        return self._obs()

    def step(self, action):
        action = int(action)
        if action not in (0, 1):
            raise ValueError(f"CountingEnv got invalid action {action!r}")
        self.t += 1
        done = self.t % self.life_len == 0
        traj_done = self.t >= self.life_len * self.lives
        return EnvStep(self._obs(), 1.0 + action, done,
                       CountingInfo(traj_done=traj_done, timeout=False))

    def close(self):
        self.closed = True
