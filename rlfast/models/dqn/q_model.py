"""The forward pass shared by the feedforward DQN models: trunk, Q head, optional softmax.

A model is a trunk (Atari convolutions, or an MLP for vector observations) that turns one
observation into a feature vector, and a head from ``make_q_head``.  This module owns the
leading-dims bookkeeping and, for distributional models, the softmax over atoms, so the
Atari and MLP models differ only in how they build their trunk.
"""
from __future__ import annotations

from typing import Optional, Sequence

import torch
import torch.nn.functional as F

from rlfast.models.dqn.noisy import NoisyModelMixin
from rlfast.models.pg.atari_ff_model import scale_image
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["FeedForwardQModel", "Flatten", "check_output_size"]


def check_output_size(output_size, model_name: str) -> int:
    """``output_size`` (the number of actions) as a positive int, or raise naming the model."""
    if int(output_size) != output_size or output_size < 1:
        raise ValueError(f"{model_name}: output_size (number of actions) must be a positive int, "
                         f"got {output_size!r}.")
    return int(output_size)


class Flatten(torch.nn.Module):
    """``[N, ...] -> [N, prod(...)]`` (also for scalar observations ``[N]``)."""

    def forward(self, input: torch.Tensor) -> torch.Tensor:
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
    n_atoms: Optional[int] = None

    def _param_dtype(self) -> torch.dtype:
        return next(self.parameters()).dtype

    def _prepare(self, observation: torch.Tensor) -> torch.Tensor:
        if self.scale_uint8:
            return scale_image(observation, self._param_dtype())
        return observation.to(self._param_dtype())

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: Optional[torch.Tensor] = None,
        prev_reward: Optional[torch.Tensor] = None,
        log_probs: bool = False,
    ) -> torch.Tensor:
        """Q-values (or atom probabilities); ``prev_action`` and ``prev_reward`` are unused."""
        lead_dim, T, B, shape = infer_leading_dims(observation, len(self.observation_shape))
        if tuple(shape) != tuple(self.observation_shape):
            raise ValueError(
                f"{type(self).__name__}: observation of shape {tuple(observation.shape)} must end in "
                f"{tuple(self.observation_shape)} after leading dims [], [B] or [T, B]."
            )
        x = self._prepare(observation).reshape(T * B, *shape)
        out = self.head(self.trunk(x))
        if self.n_atoms is not None:
            out = F.log_softmax(out, dim=-1) if log_probs else F.softmax(out, dim=-1)
        elif log_probs:
            raise ValueError(f"{type(self).__name__}: log_probs=True is only for distributional models "
                             "(n_atoms set); this model outputs Q-values.")
        return restore_leading_dims(out, lead_dim, T, B)


def observation_shape_tuple(observation_shape: Sequence[int], model_name: str) -> tuple:
    """``observation_shape`` as a tuple of positive ints (``()`` for scalar observations)."""
    shape = tuple(observation_shape) if not isinstance(observation_shape, int) else (observation_shape,)
    if any(int(d) != d or d < 1 for d in shape):
        raise ValueError(f"{model_name}: observation_shape must hold positive ints, got {shape!r}.")
    return tuple(int(d) for d in shape)
