"""Reward normalization for policy-gradient methods: rewards scaled by the running standard
deviation of the discounted return, as Stable-Baselines3's ``VecNormalize`` and the PPO
paper's MuJoCo setup do.

Each environment keeps its discounted return ``G_t = r_t + discount * G_{t-1}`` (reset after
an episode ends); the running variance of every ``G_t`` seen so far scales the rewards:
``r_t / sqrt(Var[G] + eps)``, clipped to ``[-clip, clip]``. Only the scale changes (no mean
is subtracted), so the sign of every reward and the optimal policy stay the same while the
value function regresses on targets of order one whatever the task's reward scale. The
statistics are updated with a whole ``[T, B]`` batch before that batch is scaled, pooled over
every rank of a distributed run, and saved in snapshots (the algorithm's ``state_dict``).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from rlfast.utils.running_mean_std import RunningMeanStdModel

__all__ = ["RewardNormalizer"]


class RewardNormalizer:
    """Scales ``[T, B]`` reward batches by the running std of the per-environment discounted
    return (see the module docstring). ``returns``: each environment's return so far, carried
    from one batch to the next."""

    def __init__(self, discount: float, clip: float = 10.0, epsilon: float = 1e-8):
        self.discount = float(discount)
        self.clip = float(clip)
        self.epsilon = float(epsilon)
        self.stats = RunningMeanStdModel(())
        self.returns: np.ndarray | None = None

    def __call__(self, reward: torch.Tensor, done: torch.Tensor) -> torch.Tensor:
        """Update the statistics with this batch's discounted returns, then return the
        batch's rewards scaled (a new tensor, same dtype and device)."""
        r = reward.detach().cpu().numpy().astype(np.float64)
        d = done.detach().cpu().numpy().astype(bool)
        T, B = r.shape
        if self.returns is None or self.returns.shape != (B,):
            self.returns = np.zeros(B, dtype=np.float64)
        returns = np.empty((T, B), dtype=np.float64)
        running = self.returns
        for t in range(T):  # G_t = r_t + discount * G_{t-1}; zero after a done
            running = running * self.discount + r[t]
            returns[t] = running
            running = np.where(d[t], 0.0, running)
        self.returns = running
        self.stats.update(torch.from_numpy(returns))
        scale = float(torch.sqrt(self.stats.var + self.epsilon))
        return torch.clamp(reward / scale, -self.clip, self.clip)

    def state_dict(self) -> dict:
        """Statistics and running returns, for snapshots."""
        return dict(mean=self.stats.mean.clone(), var=self.stats.var.clone(),
                    count=self.stats.count.clone(),
                    returns=None if self.returns is None else self.returns.copy())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output."""
        self.stats.mean.copy_(state["mean"])
        self.stats.var.copy_(state["var"])
        self.stats.count.copy_(state["count"])
        returns = state.get("returns")
        self.returns = None if returns is None else np.array(returns, dtype=np.float64)
