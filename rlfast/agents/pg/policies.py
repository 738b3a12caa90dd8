"""Action-distribution strategies for the policy-gradient agents.

A ``PgAgent`` delegates everything that depends on the kind of action to one of these small,
stateless objects: the model's environment-dependent keyword arguments, the distribution,
how the model's distribution outputs become that distribution's ``dist_info``, the greedy
action for evaluation, and what a recurrent model sees as the previous action.
``CategoricalPolicy`` serves scalar discrete actions, ``MultiCategoricalPolicy`` vectors of
discrete actions (MultiDiscrete, MultiBinary) and ``GaussianPolicy`` continuous ones.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlfast.agents.base import array_observation_shape
from rlfast.distributions import Categorical, DistInfo, DistInfoStd, Gaussian, MultiCategorical

__all__ = ["CategoricalPolicy", "MultiCategoricalPolicy", "GaussianPolicy", "PgPolicy"]

_AGENTS_BY_SPACE = ("CategoricalPgAgent for a scalar discrete action (Discrete), "
                    "MultiCategoricalPgAgent for a vector of discrete actions (MultiDiscrete, "
                    "MultiBinary), GaussianPgAgent / MujocoFfAgent for continuous actions (Box)")


def _is_integer_space(space) -> bool:
    dtype = getattr(space, "dtype", None)
    return dtype is not None and np.dtype(dtype).kind in "biu"


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
                            f"{action_space!r}. Use {_AGENTS_BY_SPACE}.")
        observation_shape = array_observation_shape(env_spaces.observation, "CategoricalPolicy")
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

    def model_prev_action(self, prev_action: torch.Tensor,
                          distribution: Categorical) -> torch.Tensor:
        """Recurrent models read the previous action one-hot."""
        return distribution.to_onehot(prev_action)


class MultiCategoricalPolicy:
    """Independent categoricals, one per action dimension, for a 1-D integer action space
    (MultiDiscrete, MultiBinary: an ``IntBox`` of shape ``[D]`` with per-dimension bounds).

    The model gets ``action_size = sum(nvec)`` and ``action_nvec = nvec`` and outputs one
    probability vector per dimension, concatenated (``CategoricalPgFfModel`` and
    ``CategoricalPgLstmModel`` do so when given ``action_nvec``); the distribution is
    ``MultiCategorical(nvec, start=low)``, so actions are in the space's own units.
    """

    def make_env_to_model_kwargs(self, env_spaces: Any) -> dict:
        """Observation shape, ``action_size = sum(nvec)`` and ``action_nvec``."""
        nvec, _ = self._nvec_and_low(env_spaces.action)
        return dict(observation_shape=array_observation_shape(env_spaces.observation,
                                                              "MultiCategoricalPolicy"),
                    action_size=int(sum(nvec)), action_nvec=tuple(nvec))

    @staticmethod
    def _nvec_and_low(space: Any) -> tuple[list, list]:
        """Per-dimension value counts and lowest values of a 1-D integer box, else raise."""
        shape = tuple(getattr(space, "shape", None) or ())
        low, high = getattr(space, "low", None), getattr(space, "high", None)
        if len(shape) != 1 or low is None or high is None or not _is_integer_space(space):
            raise TypeError(f"MultiCategorical agents need a 1-D integer action space (IntBox of "
                            f"shape [D], from MultiDiscrete or MultiBinary); got {space!r}. Use "
                            f"{_AGENTS_BY_SPACE}.")
        low = np.broadcast_to(np.asarray(low, dtype=np.int64), shape)
        high = np.broadcast_to(np.asarray(high, dtype=np.int64), shape)
        return (high - low).tolist(), low.tolist()

    def make_distribution(self, env_spaces: Any) -> MultiCategorical:
        """``MultiCategorical`` over the space's per-dimension values ``[low, high)``."""
        nvec, low = self._nvec_and_low(env_spaces.action)
        return MultiCategorical(nvec, start=low)

    def dist_info(self, pi: torch.Tensor) -> DistInfo:
        """The model's concatenated per-dimension probabilities as ``DistInfo(prob)``."""
        return DistInfo(prob=pi)

    def greedy_action(self, dist_info: DistInfo, distribution: MultiCategorical) -> torch.Tensor:
        """The most likely value of every dimension."""
        return distribution.argmax(dist_info)

    def model_prev_action(self, prev_action: torch.Tensor,
                          distribution: MultiCategorical) -> torch.Tensor:
        """Recurrent models read the previous action as concatenated one-hots."""
        return distribution.to_onehot(prev_action)


class PolicyGaussian(Gaussian):
    """The Gaussian of a ``GaussianPolicy``: unclipped samples, and ``mean_bound``, the
    symmetric action bound (or None) that the greedy action is clamped to."""

    def __init__(self, dim: int, mean_bound: float | None = None) -> None:
        super().__init__(dim=dim)
        self.mean_bound = mean_bound


class GaussianPolicy:
    """Diagonal Gaussian over a flat action vector; the model outputs ``(mu, log_std)``.

    Samples are not clipped: the batch keeps each action as drawn, so the likelihood ratio of
    PPO and the log-likelihood of A2C are those of the action the policy took. Clamping the
    sample to the action bound before storing it biases the gradient wherever good actions
    sit at the bound (Fujita and Maeda 2018, "Clipped Action Policy Gradient"). The
    environment gets the action clipped to its bounds (``GymEnvWrapper(clip_action=True)``,
    as gymnasium's ``ClipAction`` and SB3 do). The greedy action, the mean, is clamped to a
    symmetric finite bound of the action space, so an exported policy's action is valid.
    """

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(observation_shape, action_size)``; the action space must be flat."""
        space = env_spaces.action
        shape = tuple(space.shape)
        if len(shape) != 1 or _is_integer_space(space):
            raise TypeError(f"Gaussian agents need a flat continuous action space (FloatBox of "
                            f"shape [A]); got {space!r}. Use {_AGENTS_BY_SPACE}.")
        return dict(observation_shape=array_observation_shape(env_spaces.observation,
                                                              "GaussianPolicy"),
                    action_size=shape[0])

    def make_distribution(self, env_spaces) -> Gaussian:
        """``Gaussian`` over the action vector, with unclipped samples; ``mean_bound`` is the
        action space's symmetric finite bound (or None), which the greedy action keeps to."""
        return PolicyGaussian(dim=tuple(env_spaces.action.shape)[0],
                              mean_bound=_symmetric_bound(env_spaces.action))

    def dist_info(self, mu: torch.Tensor, log_std: torch.Tensor) -> DistInfoStd:
        """The model's mean and log-std as ``DistInfoStd``."""
        return DistInfoStd(mean=mu, log_std=log_std)

    def greedy_action(self, dist_info: DistInfoStd, distribution: PolicyGaussian) -> torch.Tensor:
        """The mean, clamped to the action space's symmetric bound when it has one."""
        mean = dist_info.mean
        bound = distribution.mean_bound
        return mean if bound is None else mean.clamp(-bound, bound)

    def model_prev_action(self, prev_action: torch.Tensor, distribution: Gaussian) -> torch.Tensor:
        """Recurrent models read the previous continuous action as it is."""
        return prev_action


PgPolicy = CategoricalPolicy | MultiCategoricalPolicy | GaussianPolicy


def _symmetric_bound(space) -> float | None:
    """``high`` when ``low == -high`` is finite and the same in every dimension, else None."""
    high, low = getattr(space, "high", None), getattr(space, "low", None)
    if high is None or low is None:
        return None
    high, low = np.asarray(high, dtype=np.float64), np.asarray(low, dtype=np.float64)
    if not (np.all(np.isfinite(high)) and np.allclose(high, -low)
            and np.allclose(high, high.flat[0])):
        return None
    return float(high.flat[0])
