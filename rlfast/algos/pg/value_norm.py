"""Value-target normalization for policy-gradient critics, as the MAPPO paper's code does it
(Yu et al. 2022, "The Surprising Effectiveness of PPO in Cooperative Multi-Agent Games").

The critic predicts the return in normalized units, ``(G - mean) / std``, where ``mean`` and
``std`` follow the returns seen so far; its outputs are mapped back (``V * std + mean``)
before they enter GAE, and the returns are normalized before the value loss regresses on
them, so the loss stays of order one whatever the task's return scale. ``mean`` and the mean
of squares are exponential moving averages with a weight ``beta`` close to one, each divided
by the same average of ones (the Adam-style bias correction), so the very first update
already gives the batch's own mean and variance; the variance is floored at ``min_var``.

Everything stays a device tensor (statistics in float64): an update or a (de)normalization
reads nothing on the host. Updates take the valid steps of a whole batch, pooled over every
rank of a distributed run. The statistics are saved with the algorithm's ``state_dict``.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from rlfast.utils.distributed import all_reduce_sum

__all__ = ["ValueNormalizer"]


class ValueNormalizer:
    """Running, bias-corrected moving averages of the return's mean and mean of squares
    (see the module docstring). ``beta``: the averages' decay per update (MAPPO: 0.99999);
    ``epsilon``: the smallest bias-correction denominator; ``min_var``: the variance floor."""

    def __init__(self, beta: float = 0.99999, epsilon: float = 1e-5, min_var: float = 1e-2):
        if not 0.0 < beta < 1.0:
            raise ValueError(f"ValueNormalizer: beta must be in (0, 1); got {beta!r}")
        self.beta = float(beta)
        self.epsilon = float(epsilon)
        self.min_var = float(min_var)
        self.mean = torch.zeros((), dtype=torch.float64)
        self.mean_sq = torch.zeros((), dtype=torch.float64)
        self.debias = torch.zeros((), dtype=torch.float64)  # the average of ones

    @property
    def device(self) -> torch.device:
        """Where the statistics live (the learner's device, after :meth:`to`)."""
        return self.mean.device

    def to(self, device: torch.device | str) -> ValueNormalizer:
        """Move the statistics to ``device`` (float32 on MPS, which has no float64)."""
        device = torch.device(device)
        dtype = torch.float32 if device.type == "mps" else torch.float64
        self.mean, self.mean_sq, self.debias = (x.to(device, dtype) for x in
                                                (self.mean, self.mean_sq, self.debias))
        return self

    def mean_std(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The bias-corrected mean and standard deviation (0-d device tensors)."""
        denominator = self.debias.clamp(min=self.epsilon)
        mean = self.mean / denominator
        var = (self.mean_sq / denominator - mean ** 2).clamp(min=self.min_var)
        return mean, var.sqrt()

    def update(self, x: torch.Tensor, valid: torch.Tensor | None = None) -> None:
        """Fold the entries of ``x`` where ``valid`` is nonzero (all without a mask) into the
        averages, pooled over every rank, with the weight ``1 - beta``; a batch without a
        valid entry leaves them as they were."""
        x = x.detach().to(self.device, self.mean.dtype)
        mask = torch.ones_like(x) if valid is None else valid.detach().to(x.device, x.dtype)
        sums = all_reduce_sum(torch.stack([mask.sum(), (x * mask).sum(), (x * x * mask).sum()]))
        n = sums[0].clamp(min=1.0)
        weight = torch.where(sums[0] > 0, torch.full_like(n, self.beta), torch.ones_like(n))
        self.mean.mul_(weight).add_((1 - weight) * sums[1] / n)
        self.mean_sq.mul_(weight).add_((1 - weight) * sums[2] / n)
        self.debias.mul_(weight).add_(1 - weight)

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        """``(x - mean) / std``, in ``x``'s dtype (``x`` on the statistics' device)."""
        mean, std = self.mean_std()
        return ((x - mean) / std).to(x.dtype)

    def denormalize(self, x: torch.Tensor) -> torch.Tensor:
        """``x * std + mean``: a normalized prediction in the return's units, in ``x``'s dtype."""
        mean, std = self.mean_std()
        return (x * std + mean).to(x.dtype)

    def state_dict(self) -> dict:
        """The three averages, for snapshots."""
        return dict(mean=self.mean.clone(), mean_sq=self.mean_sq.clone(),
                    debias=self.debias.clone())

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`'s output (onto the statistics' current device)."""
        for name in ("mean", "mean_sq", "debias"):
            getattr(self, name).copy_(torch.as_tensor(state[name]))
