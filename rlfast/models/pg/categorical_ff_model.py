"""Feedforward policy-gradient model for discrete actions and vector observations."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Type

import torch
import torch.nn.functional as F

from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import ObservationNormalizer, init_mlp_
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["CategoricalPgFfModel"]


class CategoricalPgFfModel(torch.nn.Module):
    """Separate policy and value MLPs on a (flattened) vector observation.

    ``forward(observation, prev_action, prev_reward) -> (pi, value)`` with
    ``pi`` softmax probabilities ``[..., action_size]`` and ``value`` ``[...]``,
    for observation leading dims ``[]``, ``[B]`` or ``[T, B]``.  Orthogonal
    init (hidden gain sqrt(2), policy output 0.01, value output 1.0) starts the
    policy near uniform.  ``normalize_observation=True`` adds running
    observation normalization, updated through ``update_obs_rms()``.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Optional[Sequence[int]] = None,
        hidden_nonlinearity: Type[torch.nn.Module] = torch.nn.Tanh,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__()
        if int(action_size) != action_size or action_size < 1:
            raise ValueError(f"CategoricalPgFfModel: action_size must be a positive int, got {action_size!r}.")
        self.observation_shape = tuple(observation_shape)
        self.action_size = int(action_size)
        self.normalize_observation = normalize_observation
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        input_size = int(math.prod(self.observation_shape))
        self.pi = MlpModel(input_size, hidden_sizes, output_size=self.action_size, nonlinearity=hidden_nonlinearity)
        self.value = MlpModel(input_size, hidden_sizes, output_size=1, nonlinearity=hidden_nonlinearity)
        init_mlp_(self.pi, output_gain=0.01)
        init_mlp_(self.value, output_gain=1.0)
        self.obs_norm = ObservationNormalizer(self.observation_shape, normalize_observation, norm_obs_clip, norm_obs_var_clip)

    def forward(
        self, observation: torch.Tensor, prev_action: torch.Tensor = None, prev_reward: torch.Tensor = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and state value; ``prev_action``/``prev_reward`` are unused."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        obs = self.obs_norm(observation.to(self.pi.model[-1].weight.dtype))
        obs_flat = obs.reshape(T * B, -1)
        pi = F.softmax(self.pi(obs_flat), dim=-1)
        value = self.value(obs_flat).squeeze(-1)
        return restore_leading_dims((pi, value), lead_dim, T, B)

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.obs_norm.update(observation)
