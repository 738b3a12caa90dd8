"""Environments that hang on purpose inside sampler workers, for test_worker_timeout.py.

Module level, so worker processes find them by reference. Each is a small deterministic
rlfast Env: observation ``[steps, seed tag]``, two actions, reward 1 per step, episodes of
``episode_len`` steps.
"""
import os
import time

from tests.integration._failing_envs import _CountEnv

# The process that imported this module first: the test (master) process. Forked workers
# inherit the value, so an env can tell whether it runs in a worker.
MASTER_PID = os.getpid()
FOREVER_S = 1e6


class TickEnv(_CountEnv):
    """The counting env of the worker-failure tests; ``delay`` seconds of sleep per step
    (0: none)."""

    def __init__(self, delay: float = 0.0, episode_len: int = 1000):
        super().__init__(episode_len)
        self.delay = float(delay)

    def step(self, action):
        if self.delay:
            time.sleep(self.delay)
        return super().step(action)


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
