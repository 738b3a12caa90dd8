"""Recurrent Gaussian-policy model for continuous control with vector observations."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.pg.recurrent_body import RecurrentPgModel
from rlfast.models.pg.model_parts import orthogonal_init_

__all__ = ["MujocoLstmModel"]


class MujocoLstmModel(RecurrentPgModel):
    """Observation MLP into a memory core (an LSTM unless ``core`` says otherwise; see
    ``rlfast.models.memory``), with linear heads for mean, log-std and value.

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
        hidden_sizes: Sequence[int] | None = None,
        lstm_size: int = 256,
        nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__(observation_shape, action_size,
                         [256] if hidden_sizes is None else list(hidden_sizes), lstm_size,
                         nonlinearity, normalize_observation, norm_obs_clip, norm_obs_var_clip,
                         "MujocoLstmModel", core=core, memory_len=memory_len)
        self.mu = orthogonal_init_(torch.nn.Linear(lstm_size, self.action_size), gain=0.01)
        # log_std head starts at exactly 0 output (std 1) and learns state dependence.
        self.log_std = torch.nn.Linear(lstm_size, self.action_size)
        torch.nn.init.zeros_(self.log_std.weight)
        torch.nn.init.zeros_(self.log_std.bias)
        self.value = orthogonal_init_(torch.nn.Linear(lstm_size, 1), gain=1.0)

    def heads(self, lstm_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Mean, log-std and state value."""
        return self.mu(lstm_out), self.log_std(lstm_out), self.value(lstm_out).squeeze(-1)
