"""Parts shared by the policy-gradient models: orthogonal init and observation normalization."""
from __future__ import annotations

import math
from typing import Sequence

import torch

from rlfast.models.running_mean_std import RunningMeanStdModel

__all__ = ["orthogonal_init_", "init_mlp_", "ObservationNormalizer", "HIDDEN_GAIN"]

HIDDEN_GAIN = math.sqrt(2.0)


def orthogonal_init_(layer: torch.nn.Linear, gain: float) -> torch.nn.Linear:
    """Orthogonal weights scaled by ``gain``, zero bias; returns the layer."""
    torch.nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:
        torch.nn.init.zeros_(layer.bias)
    return layer


def init_mlp_(mlp: torch.nn.Module, output_gain: float, hidden_gain: float = HIDDEN_GAIN) -> None:
    """Orthogonal init of every Linear in ``mlp``: ``hidden_gain`` except the last, ``output_gain``.

    Small policy-output gains (0.01) start the policy near uniform / zero-mean,
    which is what makes PPO and A2C learn quickly from the start.
    """
    linears = [m for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
    for i, layer in enumerate(linears):
        orthogonal_init_(layer, output_gain if i == len(linears) - 1 else hidden_gain)


class ObservationNormalizer(torch.nn.Module):
    """Optional running normalization of observations, owned by a model.

    When disabled it is the identity and ``update`` does nothing, so models
    call it unconditionally.  When enabled it holds a ``RunningMeanStdModel``
    (buffers travel in the model's state dict) and normalizes as
    ``clamp((obs - mean) / sqrt(var + var_clip), -clip, clip)``.
    """

    def __init__(self, observation_shape: Sequence[int], enabled: bool, clip: float = 10, var_clip: float = 1e-6):
        super().__init__()
        self.enabled = bool(enabled)
        self.clip = clip
        self.var_clip = var_clip
        self.rms = RunningMeanStdModel(tuple(observation_shape)) if self.enabled else None

    def update(self, observation: torch.Tensor) -> None:
        """Fold a batch of observations (any leading dims) into the running statistics."""
        if self.rms is not None:
            self.rms.update(observation)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        if self.rms is None:
            return observation
        return self.rms.normalize(observation, clip=self.clip, var_clip=self.var_clip)
