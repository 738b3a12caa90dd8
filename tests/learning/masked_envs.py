"""Partially observed CartPole for the recurrent learning test.

``MaskVelocityWrapper`` keeps only the cart position ``x`` and pole angle ``theta`` (indices 0
and 2) of CartPole's ``[x, x_dot, theta, theta_dot]`` observation, so the velocities must be
inferred from the history: a feedforward policy cannot see them, a recurrent one can.
"""
from __future__ import annotations

from typing import Optional, Sequence

import gymnasium
import numpy as np

from rlfast.envs import GymEnvWrapper

CARTPOLE_POSITION_INDICES = (0, 2)


class MaskVelocityWrapper(gymnasium.ObservationWrapper):
    """Keeps the observation entries at ``keep`` (default: CartPole's x and theta)."""

    def __init__(self, env: gymnasium.Env,
                 keep: Sequence[int] = CARTPOLE_POSITION_INDICES) -> None:
        super().__init__(env)
        space = env.observation_space
        if not isinstance(space, gymnasium.spaces.Box) or len(space.shape) != 1:
            raise TypeError(f"MaskVelocityWrapper needs a flat Box observation space, "
                            f"got {space!r}")
        keep = np.asarray(list(keep), dtype=np.int64)
        if keep.size == 0 or keep.min() < 0 or keep.max() >= space.shape[0]:
            raise ValueError(f"keep indices {keep.tolist()} must lie in [0, {space.shape[0]})")
        self.keep = keep
        self.observation_space = gymnasium.spaces.Box(
            low=space.low[keep], high=space.high[keep], dtype=space.dtype)

    def observation(self, observation: np.ndarray) -> np.ndarray:
        return np.asarray(observation)[self.keep]


def make_masked_cartpole(seed: Optional[int] = None, **kwargs) -> GymEnvWrapper:
    """CartPole-v1 with the velocities masked out, as an rlfast env (the sampler's ``EnvCls``).
    ``seed`` is applied at the first reset; other kwargs go to ``gymnasium.make``."""
    env = GymEnvWrapper(MaskVelocityWrapper(gymnasium.make("CartPole-v1", **kwargs)))
    if seed is not None:
        env.seed(seed)
    return env
