"""Categorical distribution over a discrete action set.

The model outputs probabilities ``DistInfo(prob=[..., dim])``; this class
samples actions and computes log-likelihoods, ratios, KL and entropy from them
while keeping any leading ``[T, B]`` dims.  A small epsilon inside every log and
denominator keeps zero probabilities from producing infinities or NaN gradients.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.distributions.base import Distribution
from rlfast.distributions.discrete import DiscreteMixin
from rlfast.utils.collections import namedarraytuple
from rlfast.utils.tensor import select_at_indexes

__all__ = ["Categorical", "DistInfo", "EPS", "draw_categorical", "exponential_race"]

EPS = 1e-8


def checked_prob(dist_info: Any, dim: int, owner: str, dim_text: str) -> torch.Tensor:
    """``dist_info.prob``, refused (``ValueError`` naming ``owner``) unless its trailing dim
    is ``dim`` (described as ``dim_text`` in the message)."""
    prob = dist_info.prob
    if prob.shape[-1] != dim:
        raise ValueError(f"{owner} got prob of shape {tuple(prob.shape)}; "
                         f"its trailing dim must be {dim_text}.")
    return prob


def probs_kl(p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
    """sum over the last dim of p (log p - log q): the KL of categoricals given by their
    probabilities (of several independent ones when their vectors are concatenated)."""
    return torch.sum(p * (torch.log(p + EPS) - torch.log(q + EPS)), dim=-1)


def probs_entropy(p: torch.Tensor) -> torch.Tensor:
    """-sum over the last dim of p log p: the entropy of categoricals given by their
    probabilities (summed over independent ones when their vectors are concatenated)."""
    return -torch.sum(p * torch.log(p + EPS), dim=-1)

DistInfo = namedarraytuple("DistInfo", ["prob"])


def exponential_race(prob: torch.Tensor) -> torch.Tensor:
    """One index per row of ``prob`` ``[N, K]`` (non-negative, not necessarily normalized),
    ``[N, 1]`` long: ``argmax_k prob_k / E_k`` with ``E_k ~ Exp(1)`` i.i.d. Index ``k`` wins
    with probability ``prob_k / sum(prob)`` (``E_k / prob_k ~ Exp(prob_k)``, and the smallest of
    independent exponentials is the one of rate ``prob_k`` with that probability; this is the
    Gumbel-max trick with ``-log E`` as the Gumbel noise). It is what ``torch.multinomial``
    computes for one draw, less its validity checks, which read values back to the host: two
    synchronisations per call on a GPU, and impossible inside a CUDA graph. ``exponential_``
    draws from the device's default generator, whose offsets a CUDA graph replays safely."""
    race = torch.empty_like(prob).exponential_()
    return torch.argmax(prob / race, dim=-1, keepdim=True)


def draw_categorical(prob: torch.Tensor) -> torch.Tensor:
    """One index per row of ``prob`` ``[N, K]``, ``[N, 1]`` long: ``torch.multinomial`` off
    CUDA (the CPU numbers are exactly those of every earlier release), the synchronisation-free
    :func:`exponential_race` on CUDA."""
    if prob.device.type == "cuda":
        return exponential_race(prob)
    return torch.multinomial(prob, num_samples=1)


class Categorical(DiscreteMixin, Distribution):
    """Multinomial distribution over ``dim`` outcomes, parameterized by ``prob``.

    ``dtype`` is the dtype of sampled indexes, ``onehot_dtype`` that of one-hot
    conversions.  All formulas reduce over the trailing (outcome) dim only.
    """

    def __init__(self, dim: int, dtype: torch.dtype = torch.long,
                 onehot_dtype: torch.dtype = torch.float):
        super().__init__(dim=dim, dtype=dtype, onehot_dtype=onehot_dtype)

    def _prob(self, dist_info: Any) -> torch.Tensor:
        return checked_prob(dist_info, self._dim, f"Categorical(dim={self._dim})",
                            str(self._dim))

    def sample(self, dist_info: Any) -> torch.Tensor:
        """Draw one index per leading position (``torch.multinomial``; on CUDA the same law
        without host synchronisation, see :func:`draw_categorical`)."""
        prob = self._prob(dist_info)
        flat = prob.reshape(-1, self._dim)
        sample = draw_categorical(flat)
        return sample.reshape(prob.shape[:-1]).type(self.dtype)

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        """log p(x), with ``x`` integer indexes shaped like the leading dims."""
        selected = select_at_indexes(x.long(), self._prob(dist_info))
        return torch.log(selected + EPS)

    def likelihood_ratio(self, x: torch.Tensor, old_dist_info: Any,
                         new_dist_info: Any) -> torch.Tensor:
        """p_new(x) / p_old(x), computed directly from the selected probabilities."""
        x = x.long()
        new = select_at_indexes(x, self._prob(new_dist_info))
        old = select_at_indexes(x, self._prob(old_dist_info))
        return (new + EPS) / (old + EPS)

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        """KL(old || new) = sum_k p_k (log p_k - log q_k)."""
        return probs_kl(self._prob(old_dist_info), self._prob(new_dist_info))

    def entropy(self, dist_info: Any) -> torch.Tensor:
        """H(p) = -sum_k p_k log p_k."""
        return probs_entropy(self._prob(dist_info))
