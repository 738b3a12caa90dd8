"""Feedforward Gaussian-policy model for continuous control with vector observations."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import MlpPgModel, ObservationNormalizer, init_mlp_
from rlfast.models.utils import nonlinearity_class

__all__ = ["MujocoFfModel"]


class MujocoFfModel(MlpPgModel):
    """MLP for the action mean, a learned state-independent ``log_std``, and a value MLP.

    ``forward(observation, prev_action, prev_reward) -> (mu, log_std, value)``
    with ``mu`` and ``log_std`` ``[..., action_size]`` and ``value`` ``[...]``,
    for observation leading dims ``[]``, ``[B]`` or ``[T, B]``.
    ``mu_nonlinearity`` (e.g. Tanh, or None for a linear mean) follows the mean
    MLP. Both nonlinearities may be given by name (``"relu"``, ``"tanh"``, ``"none"``; see
    ``rlfast.models.utils.NONLINEARITIES``), as a config or ``--set`` does. Orthogonal init: hidden
    gain sqrt(2), mean output 0.01, value output 1.0.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        hidden_nonlinearity: type[torch.nn.Module] | str = torch.nn.Tanh,
        mu_nonlinearity: type[torch.nn.Module] | str | None = torch.nn.Tanh,
        init_log_std: float = 0.0,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__(observation_shape, action_size, normalize_observation, "MujocoFfModel")
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        hidden_nonlinearity = nonlinearity_class(hidden_nonlinearity,
                                                 "MujocoFfModel: hidden_nonlinearity")
        mu_nonlinearity = nonlinearity_class(mu_nonlinearity, "MujocoFfModel: mu_nonlinearity",
                                             allow_none=True)
        mu_mlp = MlpModel(self.input_size, hidden_sizes, output_size=self.action_size,
                          nonlinearity=hidden_nonlinearity)
        init_mlp_(mu_mlp, output_gain=0.01)
        self.mu = (mu_mlp if mu_nonlinearity is None
                   else torch.nn.Sequential(mu_mlp, mu_nonlinearity()))
        self.value = MlpModel(self.input_size, hidden_sizes, output_size=1,
                              nonlinearity=hidden_nonlinearity)
        init_mlp_(self.value, output_gain=1.0)
        self.log_std = torch.nn.Parameter(torch.full((self.action_size,), float(init_log_std)))
        self.obs_norm = ObservationNormalizer(self.observation_shape, normalize_observation,
                                              norm_obs_clip, norm_obs_var_clip)

    def heads(self, observation: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean, log-std (the same for every observation) and state value."""
        mu = self.mu(observation)
        value = self.value(observation).squeeze(-1)
        log_std = self.log_std.expand(observation.shape[0], self.action_size)
        return mu, log_std, value
