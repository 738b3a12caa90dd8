"""Epsilon-greedy action selection from Q-values, scalar or categorical (distributional).

DQN-family agents explore by taking the greedy action ``argmax_a Q(s, a)`` with probability
``1 - epsilon`` and a uniformly random action otherwise.  Epsilon may be one number for all
environments or a vector with one entry per environment (the ``B`` dim), which is how
Ape-X-style agents give each environment its own exploration rate.  The categorical variant
first reduces a distribution over return atoms to its expected value,
``Q(s, a) = sum_i p_i(s, a) z_i``, then acts epsilon-greedily on that.
"""
from __future__ import annotations


import numpy as np
import torch

from rlfast.distributions.base import Distribution
from rlfast.distributions.discrete import DiscreteMixin

__all__ = ["EpsilonGreedy", "CategoricalEpsilonGreedy"]

EpsilonLike = float | int | np.ndarray | torch.Tensor | list | tuple


def _as_epsilon(epsilon: EpsilonLike) -> torch.Tensor:
    """Epsilon as a float tensor: 0-dim for a scalar, 1-dim for one value per environment."""
    eps = torch.as_tensor(np.asarray(epsilon) if isinstance(epsilon, (list, tuple)) else epsilon)
    eps = eps.detach().to(dtype=torch.float32)
    if eps.dim() > 1:
        raise ValueError(
            f"EpsilonGreedy: epsilon must be a scalar or a vector (one value per environment), "
            f"got shape {tuple(eps.shape)}."
        )
    if eps.numel() == 0:
        raise ValueError("EpsilonGreedy: epsilon vector is empty; give a scalar or one value per "
                         "environment.")
    if bool(((eps < 0) | (eps > 1) | torch.isnan(eps)).any()):
        raise ValueError(f"EpsilonGreedy: epsilon values must lie in [0, 1], got {eps.tolist()}.")
    return eps


def _refreshed(copies: dict, value: torch.Tensor) -> dict:
    """Per-device copies of ``value``: those of the same shape updated in place (their
    storage, which a captured CUDA graph reads, stays), the others dropped (made again on
    first use)."""
    kept = {}
    for device, copy in copies.items():
        if copy.shape == value.shape and copy.dtype == value.dtype:
            copy.copy_(value)
            kept[device] = copy
    return kept


class EpsilonGreedy(DiscreteMixin, Distribution):
    """Greedy action with probability ``1 - epsilon``, else a uniformly random action.

    ``sample(q)`` takes Q-values ``[..., A]`` (leading dims ``[]``, ``[B]`` or ``[T, B]``) and
    returns integer actions of the leading shape.  A vector epsilon of length ``B`` applies
    across the ``B`` dim (dim -2 of ``q``), the same value for every ``T``.  The random action
    is drawn from all ``A`` actions, so it may coincide with the greedy one.  ``dim`` (the
    number of actions) and the integer/one-hot dtypes are passed through ``**kwargs`` to
    ``DiscreteMixin``.
    """

    def __init__(self, epsilon: EpsilonLike = 1, **kwargs):
        super().__init__(**kwargs)
        self.set_epsilon(epsilon)

    @property
    def epsilon(self) -> torch.Tensor:
        """The current epsilon (0-dim tensor, or 1-dim with one value per environment)."""
        return self._epsilon

    def set_epsilon(self, epsilon: EpsilonLike) -> None:
        """Assign epsilon: a number in [0, 1] or a vector of them (one per environment).

        Copies already made on other devices are updated in place when the shape stays, so a
        CUDA graph that captured a sampling step reads the new value."""
        eps = _as_epsilon(epsilon)
        self._epsilon = eps
        self._epsilon_zero = eps.dim() == 0 and float(eps) == 0.0  # read once, not per step
        self._epsilon_on = _refreshed(getattr(self, "_epsilon_on", {}), eps)

    def _epsilon_for(self, q: torch.Tensor) -> torch.Tensor:
        eps = self._epsilon
        if eps.dim() == 1:
            if q.dim() < 2 or q.shape[-2] != eps.shape[0]:
                raise ValueError(
                    f"EpsilonGreedy: vector epsilon of length {eps.shape[0]} needs Q-values shaped "
                    f"[B, A] or [T, B, A] with B = {eps.shape[0]}, got shape {tuple(q.shape)}."
                )
        if q.device == eps.device:
            return eps
        if q.device not in self._epsilon_on:
            self._epsilon_on[q.device] = eps.to(q.device)
        return self._epsilon_on[q.device]

    def sample(self, q: torch.Tensor) -> torch.Tensor:
        """Epsilon-greedy actions for Q-values ``q`` shaped ``[..., A]``; keeps the leading dims."""
        if q.shape[-1:] != (self._dim,):
            raise ValueError(
                f"EpsilonGreedy(dim={self._dim}) got Q-values of shape {tuple(q.shape)}; "
                f"the trailing dim must be the number of actions, {self._dim}."
            )
        eps = self._epsilon_for(q)
        greedy = torch.argmax(q, dim=-1)
        zero = self.__dict__.get("_epsilon_zero")  # absent in distributions pickled before it
        if zero is None:
            zero = self._epsilon.dim() == 0 and float(self._epsilon) == 0.0
        if zero:
            return greedy.type(self.dtype)
        explore = torch.rand(greedy.shape, device=q.device) < eps
        random_actions = torch.randint(0, self._dim, greedy.shape, device=q.device)
        return torch.where(explore, random_actions, greedy).type(self.dtype)


class CategoricalEpsilonGreedy(EpsilonGreedy):
    """Epsilon-greedy over the expected values of per-action distributions on fixed atoms.

    ``sample(p, z=None)`` takes probabilities ``p`` shaped ``[..., A, P]`` over ``P`` atoms
    whose values are ``z`` (shape ``[P]``; the one given to ``set_z`` when ``z`` is None),
    computes ``q = sum_i p[..., i] * z[i]`` and acts epsilon-greedily on ``q``.  A vector
    epsilon of length ``B`` applies across the ``B`` dim as in ``EpsilonGreedy``.
    """

    def __init__(self, z: torch.Tensor | None = None, **kwargs):
        super().__init__(**kwargs)
        self.z = None
        if z is not None:
            self.set_z(z)

    def set_z(self, z: torch.Tensor | np.ndarray | list) -> None:
        """Assign the atom values (the distributional support), a vector of length ``P``."""
        z = torch.as_tensor(np.asarray(z) if isinstance(z, (list, tuple)) else z,
                            dtype=torch.float32)
        if z.dim() != 1 or z.numel() < 1:
            raise ValueError("CategoricalEpsilonGreedy: z must be a non-empty vector of atom "
                             f"values, got shape {tuple(z.shape)}.")
        self.z = z
        self._z_on = _refreshed(getattr(self, "_z_on", {}), z)

    def _z_for(self, p: torch.Tensor, z: torch.Tensor | None) -> torch.Tensor:
        if z is None:
            if self.z is None:
                raise ValueError("CategoricalEpsilonGreedy: no atom values; call set_z(z) or "
                                 "pass z to sample().")
            if p.device == self.z.device:
                z = self.z
            else:
                if p.device not in self._z_on:
                    self._z_on[p.device] = self.z.to(p.device)
                z = self._z_on[p.device]
        z = torch.as_tensor(z, device=p.device, dtype=p.dtype)
        if p.dim() < 2 or p.shape[-1] != z.shape[-1]:
            raise ValueError(
                f"CategoricalEpsilonGreedy: probabilities of shape {tuple(p.shape)} must be "
                f"[..., A, P] with P = {z.shape[-1]} atoms (the length of z)."
            )
        return z

    def sample(self, p: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
        """Epsilon-greedy actions from atom probabilities ``p`` ``[..., A, P]``."""
        q = torch.tensordot(p, self._z_for(p, z), dims=1)
        return super().sample(q)
