"""Feedforward Gaussian-policy model for continuous control with vector observations."""
from __future__ import annotations

import math
from typing import Optional, Sequence, Tuple, Type

import torch

from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import ObservationNormalizer, init_mlp_
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["MujocoFfModel"]


class MujocoFfModel(torch.nn.Module):
    """MLP for the action mean, a learned state-independent ``log_std``, and a value MLP.

    ``forward(observation, prev_action, prev_reward) -> (mu, log_std, value)``
    with ``mu`` and ``log_std`` ``[..., action_size]`` and ``value`` ``[...]``,
    for observation leading dims ``[]``, ``[B]`` or ``[T, B]``.
    ``mu_nonlinearity`` (e.g. Tanh, or None for a linear mean) follows the mean
    MLP.  Orthogonal init: hidden gain sqrt(2), mean output 0.01, value output 1.0.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Optional[Sequence[int]] = None,
        hidden_nonlinearity: Type[torch.nn.Module] = torch.nn.Tanh,
        mu_nonlinearity: Optional[Type[torch.nn.Module]] = torch.nn.Tanh,
        init_log_std: float = 0.0,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__()
        if int(action_size) != action_size or action_size < 1:
            raise ValueError(f"MujocoFfModel: action_size must be a positive int, got {action_size!r}.")
        self.observation_shape = tuple(observation_shape)
        self.action_size = int(action_size)
        self.normalize_observation = normalize_observation
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        input_size = int(math.prod(self.observation_shape))
        mu_mlp = MlpModel(input_size, hidden_sizes, output_size=self.action_size, nonlinearity=hidden_nonlinearity)
        init_mlp_(mu_mlp, output_gain=0.01)
        self.mu = mu_mlp if mu_nonlinearity is None else torch.nn.Sequential(mu_mlp, mu_nonlinearity())
        self.value = MlpModel(input_size, hidden_sizes, output_size=1, nonlinearity=hidden_nonlinearity)
        init_mlp_(self.value, output_gain=1.0)
        self.log_std = torch.nn.Parameter(torch.full((self.action_size,), float(init_log_std)))
        self.obs_norm = ObservationNormalizer(self.observation_shape, normalize_observation, norm_obs_clip, norm_obs_var_clip)

    def forward(
        self, observation: torch.Tensor, prev_action: torch.Tensor = None, prev_reward: torch.Tensor = None
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean, log-std and value; ``prev_action``/``prev_reward`` are unused."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        obs = self.obs_norm(observation.to(self.log_std.dtype))
        obs_flat = obs.reshape(T * B, -1)
        mu = self.mu(obs_flat)
        value = self.value(obs_flat).squeeze(-1)
        log_std = self.log_std.expand(T * B, self.action_size)
        return restore_leading_dims((mu, log_std, value), lead_dim, T, B)

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.obs_norm.update(observation)
