"""The forward pass shared by the feedforward DQN models: trunk, Q head, optional softmax.

A model is a trunk (Atari convolutions, or an MLP for vector observations) that turns one
observation into a feature vector, and a head from ``make_q_head``.  This module owns the
leading-dims bookkeeping and, for distributional models, the softmax over atoms, so the
Atari and MLP models differ only in how they build their trunk.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlfast.models.atari_conv import scale_image
from rlfast.models.dqn.noisy import NoisyModelMixin
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["FeedForwardQModel", "Flatten", "observation_shape_tuple", "checked_leading_dims"]


def checked_leading_dims(observation: torch.Tensor, observation_shape: tuple,
                         model_name: str) -> tuple:
    """``infer_leading_dims(observation, ...)`` after checking that the observation ends in
    ``observation_shape``; raises naming the model and both shapes otherwise."""
    lead_dim, T, B, shape = infer_leading_dims(observation, len(observation_shape))
    if tuple(shape) != tuple(observation_shape):
        raise ValueError(
            f"{model_name}: observation of shape {tuple(observation.shape)} must end in "
            f"{tuple(observation_shape)} after leading dims [], [B] or [T, B]."
        )
    return lead_dim, T, B, shape


class Flatten(torch.nn.Module):
    """``[N, ...] -> [N, prod(...)]`` (also for scalar observations ``[N]``)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """``input`` flattened after its first dim."""
        return input.reshape(input.shape[0], -1)


class FeedForwardQModel(NoisyModelMixin, torch.nn.Module):
    """Trunk then Q head, for observations with leading dims ``[]``, ``[B]`` or ``[T, B]``.

    Subclasses set ``observation_shape``, ``scale_uint8`` (images: pixels to [0, 1]), ``trunk``
    (``[N, *observation_shape]`` float to ``[N, features]``), ``head`` and ``n_atoms`` (None
    for plain Q-values).  ``forward(observation, prev_action=None, prev_reward=None,
    log_probs=False)`` returns Q-values ``[..., A]``, or for distributional models atom
    probabilities ``[..., A, n_atoms]`` (log-probabilities with ``log_probs=True``, computed
    with ``log_softmax`` for numerical stability).
    """

    observation_shape: tuple = ()
    scale_uint8: bool = False
    n_atoms: int | None = None

    def _param_dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def _prepare(self, observation: torch.Tensor) -> torch.Tensor:
        if self.scale_uint8:
            return scale_image(observation, self._param_dtype())
        return observation.to(self._param_dtype())

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor | None = None,
        prev_reward: torch.Tensor | None = None,
        log_probs: bool = False,
    ) -> torch.Tensor:
        """Q-values (or atom probabilities); ``prev_action`` and ``prev_reward`` are unused."""
        lead_dim, T, B, shape = checked_leading_dims(observation, self.observation_shape,
                                                     type(self).__name__)
        x = self._prepare(observation).reshape(T * B, *shape)
        out = self.head(self.trunk(x))
        if self.n_atoms is not None:
            out = F.log_softmax(out, dim=-1) if log_probs else F.softmax(out, dim=-1)
        elif log_probs:
            raise ValueError(f"{type(self).__name__}: log_probs=True is only for distributional "
                             "models (n_atoms set); this model outputs Q-values.")
        return restore_leading_dims(out, lead_dim, T, B)


def observation_shape_tuple(observation_shape: Sequence[int], model_name: str) -> tuple:
    """``observation_shape`` as a tuple of positive ints (``()`` for scalar observations)."""
    shape = (tuple(observation_shape) if not isinstance(observation_shape, int)
             else (observation_shape,))
    if any(int(d) != d or d < 1 for d in shape):
        raise ValueError(f"{model_name}: observation_shape must hold positive ints, got {shape!r}.")
    return tuple(int(d) for d in shape)
