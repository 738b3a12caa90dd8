"""What the fault-injecting test environments share: a tiny gymnasium environment (4 float
observations, 2 actions) that knows whether it is a training environment (rlfast seeds
evaluation environments at ``EVAL_ENV_SEED_OFFSET`` and above), and the atomic marker file
that lets exactly one environment of a run inject its fault."""
import os

import gymnasium as gym
import numpy as np

from rlfast.samplers.base import EVAL_ENV_SEED_OFFSET


def claim_marker(path: str, line: str) -> bool:
    """Create ``path`` holding ``line`` (``O_EXCL``: atomically); False if another
    environment already did."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        return False
    os.write(fd, f"{line}\n".encode())
    os.close(fd)
    return True


class TinyEnv(gym.Env):
    """4 float observations in [-10, 10], 2 actions; ``steps`` counts every step, ``t`` the
    steps of the current episode (subclasses end episodes and inject faults)."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-10.0, 10.0, shape=(4,), dtype=np.float32)
        self.action_space = gym.spaces.Discrete(2)
        self.training_env = False
        self.steps = 0
        self.t = 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        if seed is not None:
            self.training_env = seed < EVAL_ENV_SEED_OFFSET
        self.t = 0
        return np.full(4, 0.1, dtype=np.float32), {}
