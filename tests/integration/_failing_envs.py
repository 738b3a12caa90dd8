"""Environments that fail on purpose inside sampler workers, for the integration tests.

They live in a module so worker processes find them by reference (forked workers inherit them
anyway). Each is a small deterministic rlfast Env: observation ``[steps, seed tag]``, two
actions, reward 1 per step, an episode of ``episode_len`` steps.
"""
import os
import time

import numpy as np

from rlfast.envs import Env, EnvStep
from rlfast.spaces import FloatBox, IntBox

# The pid of the process that imported this module first: the test (master) process.
# Forked workers inherit the value, so an env can tell whether it runs in a worker.
MASTER_PID = os.getpid()


class _CountEnv(Env):
    def __init__(self, episode_len: int = 1000):
        self._observation_space = FloatBox(-1e6, 1e6, shape=(2,))
        self._action_space = IntBox(0, 2, dtype="int64")
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
        self.t += 1
        self.total_steps += 1
        return EnvStep(self._obs(), 1.0, self.t >= self.episode_len, None)


class BoomEnv(_CountEnv):
    """Raises ``RuntimeError("boom-123")`` on its ``fail_after``-th step (counting every step
    of this instance), but only the instance seeded with ``fail_seed`` (every instance when
    ``fail_seed`` is None), so one worker can fail while the others stay healthy."""

    def __init__(self, fail_after: int = 5, fail_seed=None, episode_len: int = 1000):
        super().__init__(episode_len)
        self.fail_after = int(fail_after)
        self.fail_seed = fail_seed

    def step(self, action):
        if self.total_steps + 1 >= self.fail_after and (
                self.fail_seed is None or self.tag == float(self.fail_seed)):
            raise RuntimeError(f"boom-123 at step {self.total_steps + 1} of env {self.tag}")
        return super().step(action)


class ResetFailsInWorkerEnv(_CountEnv):
    """Works in the master process; ``reset`` raises in any other process (a worker)."""

    def reset(self):
        if os.getpid() != MASTER_PID:
            raise OSError("reset-fails-in-worker-456")
        return super().reset()


class SlowEnv(_CountEnv):
    """Sleeps ``delay`` seconds per step, so that a batch takes long enough to interrupt."""

    def __init__(self, delay: float = 0.05, episode_len: int = 1000):
        super().__init__(episode_len)
        self.delay = float(delay)

    def step(self, action):
        time.sleep(self.delay)
        return super().step(action)
