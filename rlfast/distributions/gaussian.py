"""Diagonal Gaussian distribution for continuous actions, with optional tanh squash.

The std is either fixed on the distribution (``std=...``; then ``dist_info``
needs only ``mean``) or read per datum from ``dist_info.log_std``.  Optional
``min_std`` / ``max_std`` clamp the std and are used consistently in every
formula.  Noise clipping and sample clipping act only in ``sample()`` and are
not accounted for in the formulas.  With ``squash`` set, actions are
``squash * tanh(x)`` and ``log_likelihood(x, ...)`` takes the *pre-squash* ``x``
and adds the change-of-variables correction, which avoids an unstable arctanh.
"""
from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn.functional as F

from rlfast.distributions.base import Distribution
from rlfast.utils.checks import check_positive
from rlfast.utils.collections import namedarraytuple

__all__ = ["Gaussian", "DistInfo", "DistInfoStd"]

DistInfo = namedarraytuple("DistInfo", ["mean"])
DistInfoStd = namedarraytuple("DistInfoStd", ["mean", "log_std"])

_LOG_2PI = math.log(2 * math.pi)
_LOG_2 = math.log(2.0)

StdLike = float | torch.Tensor | None


def _positive_or_none(value: float | None, name: str) -> float | None:
    return None if value is None else check_positive(value, name, owner="Gaussian")


class Gaussian(Distribution):
    """Multivariate Gaussian with independent dims (diagonal covariance).

    Args:
        dim: action dimension (trailing dim of ``mean``).
        std: fixed std, scalar or broadcastable to ``[dim]``; None reads
            ``dist_info.log_std`` instead.
        clip: clamp samples to ``[-clip, clip]`` (after squashing) in ``sample()``.
        noise_clip: clamp the sampled noise ``std * eps`` to ``[-noise_clip, noise_clip]``.
        min_std, max_std: clamp the std; applied in every formula.
        squash: output ``squash * tanh(x)``; corrected for in ``log_likelihood``.
    """

    def __init__(
        self,
        dim: int,
        std: StdLike = None,
        clip: float | None = None,
        noise_clip: float | None = None,
        min_std: float | None = None,
        max_std: float | None = None,
        squash: float | None = None,
    ):
        self._dim = check_positive(dim, "dim", integer=True, owner="Gaussian")
        min_std = _positive_or_none(min_std, "min_std")
        max_std = _positive_or_none(max_std, "max_std")
        if min_std is not None and max_std is not None and min_std > max_std:
            raise ValueError(f"Gaussian: min_std ({min_std}) must not exceed max_std ({max_std}).")
        self.min_std = min_std
        self.max_std = max_std
        self.min_log_std = None if min_std is None else math.log(min_std)
        self.max_log_std = None if max_std is None else math.log(max_std)
        self.set_std(std)
        self.set_clip(clip)
        self.set_noise_clip(noise_clip)
        self.set_squash(squash)

    # ---- settings --------------------------------------------------------
    def set_std(self, std: StdLike) -> None:
        """Fix the std (scalar or broadcastable to ``[dim]``), or None to use
        ``dist_info.log_std``."""
        if std is not None:
            # A scalar, or one std per action dimension.
            if not bool(torch.all(torch.as_tensor(std, dtype=torch.float64) > 0)):
                raise ValueError(f"Gaussian: std must be > 0 (every entry) or None; got {std!r}")
            std_tensor = torch.as_tensor(std, dtype=torch.float32)
            try:
                torch.broadcast_shapes(tuple(std_tensor.shape), (self._dim,))
            except RuntimeError:
                raise ValueError(
                    f"Gaussian: std of shape {tuple(std_tensor.shape)} does not broadcast to "
                    f"action dim ({self._dim},)."
                ) from None
            std = std_tensor
        self.std = std

    def set_clip(self, clip: float | None) -> None:
        """Clamp samples to ``[-clip, clip]``; None turns it off."""
        self.clip = _positive_or_none(clip, "clip")

    def set_noise_clip(self, noise_clip: float | None) -> None:
        """Clamp sampling noise to ``[-noise_clip, noise_clip]``; None turns it off."""
        self.noise_clip = _positive_or_none(noise_clip, "noise_clip")

    def set_squash(self, squash: float | None) -> None:
        """Squash samples to ``squash * tanh(x)`` (usually 1); None turns it off."""
        self.squash = _positive_or_none(squash, "squash")

    # ---- helpers ---------------------------------------------------------
    def _mean(self, dist_info: Any) -> torch.Tensor:
        mean = dist_info.mean
        if mean.shape[-1:] != (self._dim,):
            raise ValueError(
                f"Gaussian(dim={self._dim}) got mean of shape {tuple(mean.shape)}; "
                f"its trailing dim must be {self._dim}."
            )
        return mean

    def _log_std(self, dist_info: Any, mean: torch.Tensor) -> torch.Tensor:
        """Log-std broadcast to ``mean``'s shape, with min/max std clamping."""
        if self.std is None:
            log_std = getattr(dist_info, "log_std", None)
            if log_std is None:
                raise ValueError(
                    "Gaussian has no fixed std (std=None), so dist_info must carry log_std "
                    f"(use DistInfoStd); got {type(dist_info).__name__} without it."
                )
        else:
            log_std = torch.log(self.std.to(device=mean.device, dtype=mean.dtype))
        if self.min_log_std is not None or self.max_log_std is not None:
            log_std = torch.clamp(log_std, min=self.min_log_std, max=self.max_log_std)
        return log_std.expand_as(mean)

    def _squash_log_det(self, x: torch.Tensor) -> torch.Tensor:
        """sum_i log(squash * (1 - tanh(x_i)^2)), computed stably.

        Uses log(1 - tanh(x)^2) = 2 * (log 2 - x - softplus(-2x)), exact for all
        x, where the naive form underflows to log(0) once |x| exceeds ~9.
        """
        log_det = 2.0 * (_LOG_2 - x - F.softplus(-2.0 * x))
        return torch.sum(log_det + math.log(self.squash), dim=-1)

    # ---- formulas --------------------------------------------------------
    def sample(self, dist_info: Any) -> torch.Tensor:
        """mean + std * N(0, 1) (noise-clipped), squashed and clipped if set; differentiable."""
        x = self._sample_presquash(dist_info)
        if self.squash is not None:
            x = self.squash * torch.tanh(x)
        if self.clip is not None:
            x = torch.clamp(x, -self.clip, self.clip)
        return x

    def _sample_presquash(self, dist_info: Any) -> torch.Tensor:
        mean = self._mean(dist_info)
        std = torch.exp(self._log_std(dist_info, mean))
        noise = std * torch.randn_like(mean)
        if self.noise_clip is not None:
            noise = torch.clamp(noise, -self.noise_clip, self.noise_clip)
        return mean + noise

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        """Sum over dims of log N(x; mean, std); minus the squash log-det if squashing.

        With squashing, ``x`` is the pre-squash sample: log p(y) for
        y = squash * tanh(x) is log N(x) - sum log(squash * (1 - tanh(x)^2)).
        """
        mean = self._mean(dist_info)
        log_std = self._log_std(dist_info, mean)
        z = (x - mean) * torch.exp(-log_std)
        log_prob = -torch.sum(log_std + 0.5 * z ** 2, dim=-1) - 0.5 * self._dim * _LOG_2PI
        if self.squash is not None:
            log_prob = log_prob - self._squash_log_det(x)
        return log_prob

    def likelihood_ratio(self, x: torch.Tensor, old_dist_info: Any,
                         new_dist_info: Any) -> torch.Tensor:
        """p_new(x) / p_old(x) (the squash correction cancels)."""
        return torch.exp(self.log_likelihood(x, new_dist_info)
                         - self.log_likelihood(x, old_dist_info))

    def sample_loglikelihood(self, dist_info: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """Draw a differentiable sample and its log-likelihood (e.g. for SAC).

        The log-likelihood is computed on the pre-squash sample (with the squash
        correction when squashing), then the sample is squashed for output.
        Sample clipping is not applied here; noise clipping is.
        """
        x = self._sample_presquash(dist_info)
        log_prob = self.log_likelihood(x, dist_info)
        if self.squash is not None:
            x = self.squash * torch.tanh(x)
        return x, log_prob

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        """KL(old || new) = sum log(s_new/s_old)
        + (s_old^2 + (m_old - m_new)^2) / (2 s_new^2) - 1/2."""
        old_mean = self._mean(old_dist_info)
        new_mean = self._mean(new_dist_info)
        old_log_std = self._log_std(old_dist_info, old_mean)
        new_log_std = self._log_std(new_dist_info, new_mean)
        numerator = ((old_mean - new_mean) ** 2 + torch.exp(2 * old_log_std)
                     - torch.exp(2 * new_log_std))
        denominator = 2 * torch.exp(2 * new_log_std)
        return torch.sum(numerator / denominator + new_log_std - old_log_std, dim=-1)

    def entropy(self, dist_info: Any) -> torch.Tensor:
        """Sum over dims of log std + 0.5 log(2 pi e); undefined in closed form when squashing."""
        if self.squash is not None:
            raise ValueError(
                f"Gaussian.entropy() has no closed form with squash={self.squash}; "
                "call set_squash(None) first or estimate it from sample_loglikelihood()."
            )
        mean = self._mean(dist_info)
        log_std = self._log_std(dist_info, mean)
        return torch.sum(log_std, dim=-1) + 0.5 * self._dim * (_LOG_2PI + 1.0)
