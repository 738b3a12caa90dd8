"""Base class for action distributions.

A distribution object holds no parameters of its own: it is a set of formulas
applied to ``dist_info`` namedarraytuples (e.g. probabilities, or mean and
log-std) that a model produced, so the same object serves the sampler (draw
actions) and the algorithm (likelihoods, KL, entropy) for any leading dims.
Subclasses implement the formulas that make sense for them; the means,
perplexities and likelihood ratio below are derived from those.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.utils.tensor import valid_mean

__all__ = ["Distribution"]


class Distribution:
    """Base distribution; not every subclass implements every method.

    Required in every subclass: ``sample``.  Optional (documented as such):
    ``log_likelihood``, ``kl``, ``entropy``; calling one a subclass lacks raises
    ``NotImplementedError`` naming the class.  Derived methods (``mean_kl``,
    ``likelihood_ratio``, ``perplexity``, ``mean_entropy``,
    ``mean_perplexity``) work whenever their ingredients exist.
    """

    @property
    def dim(self) -> int:
        """Size of the event (trailing) dimension of the distribution."""
        return self._dim

    def settings_key(self) -> tuple:
        """The distribution's plain settings (numbers, flags, dtypes, shapes of its tensors),
        sorted by name: what ``sample`` branches on in Python. A CUDA graph that captured a
        sampling step stays valid while this is unchanged (tensor settings must then be
        updated in place, which the distributions here do)."""
        items = []
        for name, value in sorted(vars(self).items()):
            if isinstance(value, torch.Tensor):
                items.append((name, "tensor", tuple(value.shape), value.dtype))
            elif value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
                items.append((name, value))
        return tuple(items)

    def sample(self, dist_info: Any) -> torch.Tensor:
        """Draw random sample(s), one per leading index of ``dist_info``."""
        raise NotImplementedError(f"{type(self).__name__} does not implement sample().")

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        """Log-likelihood of samples ``x`` under ``dist_info``; keeps leading dims."""
        raise NotImplementedError(f"{type(self).__name__} does not implement log_likelihood().")

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        """KL(old || new) at each datum; keeps leading dims (e.g. [T,B])."""
        raise NotImplementedError(f"{type(self).__name__} does not implement kl().")

    def entropy(self, dist_info: Any) -> torch.Tensor:
        """Entropy of each distribution in ``dist_info``; keeps leading dims."""
        raise NotImplementedError(f"{type(self).__name__} does not implement entropy().")

    def likelihood_ratio(self, x: torch.Tensor, old_dist_info: Any,
                         new_dist_info: Any) -> torch.Tensor:
        """p_new(x) / p_old(x), computed as exp of the log-likelihood difference."""
        return torch.exp(self.log_likelihood(x, new_dist_info)
                         - self.log_likelihood(x, old_dist_info))

    def mean_kl(self, old_dist_info: Any, new_dist_info: Any,
                valid: torch.Tensor | None = None) -> torch.Tensor:
        """Mean KL over a batch, ignoring entries where ``valid`` is 0."""
        return valid_mean(self.kl(old_dist_info, new_dist_info), valid)

    def perplexity(self, dist_info: Any) -> torch.Tensor:
        """exp(entropy): the effective number of equally likely outcomes."""
        return torch.exp(self.entropy(dist_info))

    def mean_entropy(self, dist_info: Any, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Mean entropy over a batch, ignoring entries where ``valid`` is 0."""
        return valid_mean(self.entropy(dist_info), valid)

    def mean_perplexity(self, dist_info: Any, valid: torch.Tensor | None = None) -> torch.Tensor:
        """Mean perplexity over a batch, ignoring entries where ``valid`` is 0."""
        return valid_mean(self.perplexity(dist_info), valid)
