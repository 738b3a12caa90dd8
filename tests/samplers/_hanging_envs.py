"""Environments that hang on purpose inside sampler workers, for test_worker_timeout.py.

Module level, so worker processes find them by reference. Each is a small deterministic
rlfast Env: observation ``[steps, seed tag]``, two actions, reward 1 per step, episodes of
``episode_len`` steps.
"""
import os
import time

import numpy as np

from rlfast.envs import Env, EnvStep
from rlfast.spaces import FloatBox, IntBox

# The process that imported this module first: the test (master) process. Forked workers
# inherit the value, so an env can tell whether it runs in a worker.
MASTER_PID = os.getpid()
FOREVER_S = 1e6


class TickEnv(Env):
    """Counts its steps; ``delay`` seconds of sleep per step (0: none)."""

    def __init__(self, delay: float = 0.0, episode_len: int = 1000):
        self._observation_space = FloatBox(-1e6, 1e6, shape=(2,))
        self._action_space = IntBox(0, 2, dtype="int64")
        self.delay = float(delay)
        self.episode_len = int(episode_len)
        self.t = 0
        self.total_steps = 0
        self.tag = -1.0

    def seed(self, seed):
        self.tag = float(seed)

    def _obs(self):
        return np.array([self.t, self.tag], dtype=np.float32)

    def reset(self):
        self.t = 0
        return self._obs()

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        self.t += 1
        self.total_steps += 1
        return EnvStep(self._obs(), 1.0, self.t >= self.episode_len, None)


class HangingStepEnv(TickEnv):
    """``step`` never returns (sleeps ``FOREVER_S``) on this instance's ``hang_after``-th step,
    but only in the instance seeded ``hang_seed``."""

    def __init__(self, hang_after: int = 6, hang_seed: int = 1, episode_len: int = 1000):
        super().__init__(0.0, episode_len)
        self.hang_after = int(hang_after)
        self.hang_seed = float(hang_seed)

    def step(self, action):
        if self.total_steps + 1 >= self.hang_after and self.tag == self.hang_seed:
            time.sleep(FOREVER_S)
        return super().step(action)


class HangingInWorkerEnv(TickEnv):
    """Built normally in the master; its constructor never returns in a worker."""

    def __init__(self):
        if os.getpid() != MASTER_PID:
            time.sleep(FOREVER_S)
        super().__init__()
