"""Running mean and variance of a stream of tensors, kept as module buffers."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.utils import distributed

__all__ = ["RunningMeanStdModel"]


class RunningMeanStdModel(torch.nn.Module):
    """Tracks the mean and (population) variance of all data passed to ``update()``.

    The statistics are registered buffers (``mean``, ``var``, ``count``), so they
    move with ``model.to(device)``, appear in the state dict (and therefore
    travel to sampler models), and are updated in place so shared-memory copies
    see them.  Batches are merged with the parallel combination formula of
    Chan et al.; before any update, mean is 0 and var is 1. In a distributed run (a process
    group of several ranks), each update pools the batches of every rank.
    """

    def __init__(self, shape: int | Sequence[int]):
        super().__init__()
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        self.shape = shape
        self.register_buffer("mean", torch.zeros(shape))
        self.register_buffer("var", torch.ones(shape))
        # float64 so the count stays exact far beyond float32's 2**24 integers.
        self.register_buffer("count", torch.zeros((), dtype=torch.float64))

    @torch.no_grad()
    def update(self, x: torch.Tensor) -> None:
        """Merge the batch ``x`` (shape ``[..., *shape]``) into the statistics.

        With n, m, v the old count/mean/var and k, m_b, v_b the batch's:
        ``delta = m_b - m``, ``m' = m + delta*k/(n+k)``,
        ``v' = (v*n + v_b*k + delta^2 * n*k/(n+k)) / (n+k)``.
        """
        n_shape = len(self.shape)
        if x.dim() < n_shape or tuple(x.shape[x.dim() - n_shape:]) != self.shape:
            raise ValueError(
                f"RunningMeanStdModel.update: data of shape {tuple(x.shape)} must end with "
                f"{self.shape}."
            )
        x = x.reshape((-1,) + self.shape).to(device=self.mean.device, dtype=torch.float64)
        if distributed.is_distributed():
            # Every rank merges the batch of all ranks, so all normalize alike.
            batch_count = float(distributed.all_reduce_sum(
                torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device)))
            if batch_count == 0:
                return
            batch_mean = distributed.all_reduce_sum(x.sum(dim=0)) / batch_count
            batch_var = distributed.all_reduce_sum(((x - batch_mean) ** 2).sum(dim=0)) / batch_count
        else:
            batch_count = x.shape[0]
            if batch_count == 0:
                return
            batch_mean = x.mean(dim=0)
            batch_var = x.var(dim=0, unbiased=False)
        count = self.count.to(torch.float64)
        mean = self.mean.to(torch.float64)
        var = self.var.to(torch.float64)
        total = count + batch_count
        delta = batch_mean - mean
        new_mean = mean + delta * (batch_count / total)
        m2 = var * count + batch_var * batch_count + delta ** 2 * (count * batch_count / total)
        self.mean.copy_(new_mean)
        self.var.copy_(m2 / total)
        self.count.copy_(total)

    def normalize(self, x: torch.Tensor, clip: float = 10.0,
                  var_clip: float = 1e-6) -> torch.Tensor:
        """``clamp((x - mean) / sqrt(var + var_clip), -clip, clip)``."""
        normalized = (x - self.mean) / torch.sqrt(self.var + var_clip)
        if clip is not None:
            normalized = torch.clamp(normalized, -clip, clip)
        return normalized
