"""Action-distribution strategies for the policy-gradient agents.

A ``PgAgent`` delegates everything that depends on the kind of action to one of these small,
stateless objects: the model's environment-dependent keyword arguments, the distribution,
how the model's distribution outputs become that distribution's ``dist_info``, the greedy
action for evaluation, and what a recurrent model sees as the previous action.
"""
from __future__ import annotations

import numpy as np
import torch

from rlfast.distributions import Categorical, DistInfo, DistInfoStd, Gaussian

__all__ = ["CategoricalPolicy", "GaussianPolicy", "PgPolicy"]


class CategoricalPolicy:
    """Categorical distribution over ``env_spaces.action.n`` actions; the model outputs probs.

    ``image_model``: name the model's keyword arguments as the Atari models do
    (``image_shape``, ``output_size``) instead of ``observation_shape``, ``action_size``.
    """

    def __init__(self, image_model: bool = False):
        self.image_model = bool(image_model)

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """Observation shape and number of actions, under the model's keyword names."""
        action_space = env_spaces.action
        if getattr(action_space, "n", None) is None or tuple(action_space.shape) != ():
            raise TypeError("Categorical agents need a scalar discrete action space; got "
                            f"{action_space!r}. Use a Gaussian agent for continuous actions.")
        observation_shape = tuple(env_spaces.observation.shape)
        if self.image_model:
            return dict(image_shape=observation_shape, output_size=int(action_space.n))
        return dict(observation_shape=observation_shape, action_size=int(action_space.n))

    def make_distribution(self, env_spaces) -> Categorical:
        """``Categorical`` over the action space's ``n`` actions."""
        return Categorical(dim=int(env_spaces.action.n))

    def dist_info(self, pi: torch.Tensor) -> DistInfo:
        """The model's action probabilities as ``DistInfo(prob)``."""
        return DistInfo(prob=pi)

    def greedy_action(self, dist_info: DistInfo, distribution: Categorical) -> torch.Tensor:
        """The most likely action."""
        return dist_info.prob.argmax(dim=-1)

    def model_prev_action(self, prev_action: torch.Tensor, distribution: Categorical) -> torch.Tensor:
        """Recurrent models read the previous action one-hot."""
        return distribution.to_onehot(prev_action)


class GaussianPolicy:
    """Diagonal Gaussian over a flat action vector; the model outputs ``(mu, log_std)``.

    Sampled actions are clipped to the action space's bound when it is symmetric and finite
    (``Gaussian(clip=...)``), so environments with bounded actions always get valid ones.
    """

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(observation_shape, action_size)``; the action space must be flat."""
        shape = tuple(env_spaces.action.shape)
        if len(shape) != 1:
            raise TypeError(f"Gaussian agents need a flat continuous action space; got shape {shape}")
        return dict(observation_shape=tuple(env_spaces.observation.shape), action_size=shape[0])

    def make_distribution(self, env_spaces) -> Gaussian:
        """``Gaussian`` over the action vector, clipped to a symmetric finite bound."""
        return Gaussian(dim=tuple(env_spaces.action.shape)[0], clip=_symmetric_bound(env_spaces.action))

    def dist_info(self, mu: torch.Tensor, log_std: torch.Tensor) -> DistInfoStd:
        """The model's mean and log-std as ``DistInfoStd``."""
        return DistInfoStd(mean=mu, log_std=log_std)

    def greedy_action(self, dist_info: DistInfoStd, distribution: Gaussian) -> torch.Tensor:
        """The mean, clipped like samples are."""
        mean = dist_info.mean
        clip = distribution.clip
        return mean if clip is None else mean.clamp(-clip, clip)

    def model_prev_action(self, prev_action: torch.Tensor, distribution: Gaussian) -> torch.Tensor:
        """Recurrent models read the previous continuous action as it is."""
        return prev_action


PgPolicy = CategoricalPolicy | GaussianPolicy


def _symmetric_bound(space) -> float | None:
    """``high`` when ``low == -high`` is finite and the same in every dimension, else None."""
    high, low = getattr(space, "high", None), getattr(space, "low", None)
    if high is None or low is None:
        return None
    high, low = np.asarray(high, dtype=np.float64), np.asarray(low, dtype=np.float64)
    if not (np.all(np.isfinite(high)) and np.allclose(high, -low) and np.allclose(high, high.flat[0])):
        return None
    return float(high.flat[0])
