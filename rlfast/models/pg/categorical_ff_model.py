"""Feedforward policy-gradient model for discrete actions and vector observations."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import (MlpPgModel, ObservationNormalizer, categorical_outputs,
                                          check_action_nvec, init_mlp_)

__all__ = ["CategoricalPgFfModel"]


class CategoricalPgFfModel(MlpPgModel):
    """Separate policy and value MLPs on a (flattened) vector observation.

    ``forward(observation, prev_action, prev_reward) -> (pi, value)`` with
    ``pi`` softmax probabilities ``[..., action_size]`` and ``value`` ``[...]``,
    for observation leading dims ``[]``, ``[B]`` or ``[T, B]``.  Orthogonal
    init (hidden gain sqrt(2), policy output 0.01, value output 1.0) starts the
    policy near uniform.  ``normalize_observation=True`` adds running
    observation normalization, updated through ``update_obs_rms()``.

    ``action_nvec`` (for MultiDiscrete actions) splits the ``action_size = sum(action_nvec)``
    policy outputs into one softmax per action dimension, so ``pi`` holds the per-dimension
    probability vectors concatenated.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        hidden_nonlinearity: type[torch.nn.Module] | str = torch.nn.Tanh,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
        action_nvec: Sequence[int] | None = None,
    ):
        super().__init__(observation_shape, action_size, normalize_observation,
                         "CategoricalPgFfModel")
        self.action_nvec = check_action_nvec(action_nvec, self.action_size,
                                             "CategoricalPgFfModel")
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        self.pi = MlpModel(self.input_size, hidden_sizes, output_size=self.action_size,
                           nonlinearity=hidden_nonlinearity)
        self.value = MlpModel(self.input_size, hidden_sizes, output_size=1,
                              nonlinearity=hidden_nonlinearity)
        init_mlp_(self.pi, output_gain=0.01)
        init_mlp_(self.value, output_gain=1.0)
        self.obs_norm = ObservationNormalizer(self.observation_shape, normalize_observation,
                                              norm_obs_clip, norm_obs_var_clip)

    def heads(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and state value."""
        return categorical_outputs(self.pi, self.value, observation, self.action_nvec)
