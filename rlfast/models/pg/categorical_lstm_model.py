"""Recurrent policy-gradient model for discrete actions and vector observations."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Type

import torch
import torch.nn.functional as F

from rlfast.models.pg.lstm_common import LstmBody, RnnState
from rlfast.models.pg.model_parts import orthogonal_init_
from rlfast.utils.tensor import restore_leading_dims

__all__ = ["CategoricalPgLstmModel"]


class CategoricalPgLstmModel(torch.nn.Module):
    """Observation MLP into an LSTM, with linear heads for action probabilities and value.

    ``forward(observation, prev_action, prev_reward, init_rnn_state) ->
    (pi, value, next_rnn_state)``: ``pi`` ``[..., action_size]`` softmax
    probabilities, ``value`` ``[...]``, with the observation's leading dims
    ``[]``, ``[B]`` or ``[T, B]``; ``next_rnn_state`` is an ``RnnState`` of
    ``[1, B, lstm_size]`` tensors.  ``prev_action`` is one-hot (float)
    ``[..., action_size]``; the agent converts integer actions.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Optional[Sequence[int]] = None,
        lstm_size: int = 64,
        nonlinearity: Type[torch.nn.Module] = torch.nn.Tanh,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
    ):
        super().__init__()
        if int(action_size) != action_size or action_size < 1:
            raise ValueError(f"CategoricalPgLstmModel: action_size must be a positive int, got {action_size!r}.")
        self.action_size = int(action_size)
        self.normalize_observation = normalize_observation
        hidden_sizes = [64] if hidden_sizes is None else list(hidden_sizes)
        self.body = LstmBody(
            observation_shape, self.action_size, hidden_sizes, lstm_size, nonlinearity,
            normalize_observation, norm_obs_clip, norm_obs_var_clip,
        )
        self.pi = orthogonal_init_(torch.nn.Linear(lstm_size, self.action_size), gain=0.01)
        self.value = orthogonal_init_(torch.nn.Linear(lstm_size, 1), gain=1.0)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Optional[RnnState] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, RnnState]:
        """Action probabilities, value, and the LSTM state after the last step."""
        lstm_out, next_rnn_state, lead_dim, T, B = self.body(observation, prev_action, prev_reward, init_rnn_state)
        flat = lstm_out.reshape(T * B, -1)
        pi = F.softmax(self.pi(flat), dim=-1)
        value = self.value(flat).squeeze(-1)
        pi, value = restore_leading_dims((pi, value), lead_dim, T, B)
        return pi, value, next_rnn_state

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.body.obs_norm.update(observation)
