"""Environments that make their own sampler worker fail a set number of times in a run, for
the worker-restart tests (test_worker_restart.py, tests/learning/test_worker_restart_ppo.py).

Each fault claims the next marker file ``<marker_dir>/fault-<k>`` (``O_EXCL``: exactly one
environment of the run claims it), so a run sees exactly ``n_faults`` faults whatever
restarts: a replacement worker's environments count their steps from zero again and fault
at the same step until the markers are used up. Only the training environment whose seed is
``fault_seed`` faults, or one that replaces it (seeded ``fault_seed`` plus a multiple of
``RESTART_SEED_STRIDE``); evaluation environments are seeded at ``EVAL_ENV_SEED_OFFSET`` and up.
"""
from __future__ import annotations

import faulthandler
import os
import signal
import time

import gymnasium as gym
import numpy as np

from rlfast.envs.gym import GymEnvWrapper
from rlfast.samplers.parallel.base import RESTART_SEED_STRIDE
from tests.integration._tiny_env import claim_marker

FAULTS = ("sigkill", "raise", "hang", "abort")


def next_fault(marker_dir: str, n_faults: int) -> bool:
    """Claim the first unclaimed of the run's ``n_faults`` markers; False when all are."""
    for k in range(n_faults):
        if claim_marker(os.path.join(marker_dir, f"fault-{k}"), f"{os.getpid()}"):
            return True
    return False


def is_faulting(seed: int, fault_seed: int) -> bool:
    """Whether an environment seeded ``seed`` is the faulting one or a replacement of it."""
    return seed >= fault_seed and (seed - fault_seed) % RESTART_SEED_STRIDE == 0


def inject(fault: str) -> None:
    """Make this process fail as ``fault`` says."""
    if fault == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if fault == "abort":
        faulthandler.disable()  # pytest's handler would print this worker's stack
        os.abort()  # SIGABRT, as a crashing simulator dies
    if fault == "hang":
        while True:
            time.sleep(1)
    raise RuntimeError("injected fault: env.step raised")


class PidEnv(gym.Env):
    """Observations say who stepped: ``[pid, step of this env, episode step, 0]`` (float64,
    exact for pids below 2**53); 2 actions, reward 1, episodes of 10 steps. Faults at its
    ``fault_step``-th step when its seed is ``fault_seed`` and a marker is left
    (``fault_step=0``: at its first, seeded reset, while its worker starts)."""

    def __init__(self, marker_dir: str = "", n_faults: int = 0, fault_step: int = 5,
                 fault_seed: int = 1, fault: str = "sigkill"):
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(4,), dtype=np.float64)
        self.action_space = gym.spaces.Discrete(2)
        self.marker_dir, self.n_faults, self.fault = marker_dir, n_faults, fault
        self.fault_step, self.fault_seed = fault_step, fault_seed
        self.faulting = False
        self.steps = 0
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.faulting = is_faulting(seed, self.fault_seed)
            if (self.faulting and self.fault_step == 0
                    and next_fault(self.marker_dir, self.n_faults)):
                inject(self.fault)
        self.t = 0
        return self._obs(), {}

    def _obs(self) -> np.ndarray:
        return np.array([os.getpid(), self.steps, self.t, 0.0])

    def step(self, action):
        self.steps += 1
        self.t += 1
        if (self.faulting and self.steps == self.fault_step
                and next_fault(self.marker_dir, self.n_faults)):
            inject(self.fault)
        return self._obs(), 1.0, False, self.t >= 10, {}


def make_pid_env(**kwargs) -> GymEnvWrapper:
    """A :class:`PidEnv` as an rlfast environment (the samplers' ``EnvCls``)."""
    return GymEnvWrapper(PidEnv(**kwargs))


class FaultyCartPole(gym.Wrapper):
    """CartPole-v1 whose training environment seeded ``fault_seed`` SIGKILLs its process at
    its ``fault_steps`` (counted over the environment's life), while markers are left."""

    def __init__(self, marker_dir: str, n_faults: int, fault_steps: tuple, fault_seed: int):
        super().__init__(gym.make("CartPole-v1"))
        self.marker_dir, self.n_faults = marker_dir, n_faults
        self.fault_steps, self.fault_seed = set(fault_steps), fault_seed
        self.faulting = False
        self.steps = 0

    def reset(self, *, seed=None, options=None):
        if seed is not None:
            self.faulting = is_faulting(seed, self.fault_seed)
        return self.env.reset(seed=seed, options=options)

    def step(self, action):
        self.steps += 1
        if (self.faulting and self.steps in self.fault_steps
                and next_fault(self.marker_dir, self.n_faults)):
            inject("sigkill")
        return self.env.step(action)


def make_faulty_cartpole(**kwargs) -> GymEnvWrapper:
    """:class:`FaultyCartPole` as an rlfast environment."""
    return GymEnvWrapper(FaultyCartPole(**kwargs))
