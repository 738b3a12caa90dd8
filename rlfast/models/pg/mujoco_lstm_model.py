"""Recurrent Gaussian-policy model for continuous control with vector observations."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Type

import torch

from rlfast.models.pg.lstm_common import LstmBody, RnnState
from rlfast.models.pg.model_parts import orthogonal_init_
from rlfast.utils.tensor import restore_leading_dims

__all__ = ["MujocoLstmModel"]


class MujocoLstmModel(torch.nn.Module):
    """Observation MLP into an LSTM, with linear heads for mean, log-std and value.

    ``forward(observation, prev_action, prev_reward, init_rnn_state) ->
    (mu, log_std, value, next_rnn_state)``: ``mu`` and ``log_std``
    ``[..., action_size]``, ``value`` ``[...]``, with the observation's leading
    dims ``[]``, ``[B]`` or ``[T, B]``; ``next_rnn_state`` is an ``RnnState``
    of ``[1, B, lstm_size]`` tensors.  ``prev_action`` is the previous
    continuous action ``[..., action_size]``.  Default MLP: one layer of 256.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Optional[Sequence[int]] = None,
        lstm_size: int = 256,
        nonlinearity: Type[torch.nn.Module] = torch.nn.ReLU,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__()
        if int(action_size) != action_size or action_size < 1:
            raise ValueError(f"MujocoLstmModel: action_size must be a positive int, got {action_size!r}.")
        self.action_size = int(action_size)
        self.normalize_observation = normalize_observation
        hidden_sizes = [256] if hidden_sizes is None else list(hidden_sizes)
        self.body = LstmBody(
            observation_shape, self.action_size, hidden_sizes, lstm_size, nonlinearity,
            normalize_observation, norm_obs_clip, norm_obs_var_clip,
        )
        self.mu = orthogonal_init_(torch.nn.Linear(lstm_size, self.action_size), gain=0.01)
        # log_std head starts at exactly 0 output (std 1) and learns state dependence.
        self.log_std = torch.nn.Linear(lstm_size, self.action_size)
        torch.nn.init.zeros_(self.log_std.weight)
        torch.nn.init.zeros_(self.log_std.bias)
        self.value = orthogonal_init_(torch.nn.Linear(lstm_size, 1), gain=1.0)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Optional[RnnState] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, RnnState]:
        """Mean, log-std, value, and the LSTM state after the last step."""
        lstm_out, next_rnn_state, lead_dim, T, B = self.body(observation, prev_action, prev_reward, init_rnn_state)
        flat = lstm_out.reshape(T * B, -1)
        mu = self.mu(flat)
        log_std = self.log_std(flat)
        value = self.value(flat).squeeze(-1)
        mu, log_std, value = restore_leading_dims((mu, log_std, value), lead_dim, T, B)
        return mu, log_std, value, next_rnn_state

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.body.obs_norm.update(observation)
