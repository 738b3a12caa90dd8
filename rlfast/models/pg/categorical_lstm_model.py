"""Recurrent policy-gradient model for discrete actions and vector observations."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.pg.recurrent_body import RecurrentPgModel
from rlfast.models.pg.model_parts import categorical_outputs, check_action_nvec, policy_value_heads

__all__ = ["CategoricalPgLstmModel"]


class CategoricalPgLstmModel(RecurrentPgModel):
    """Observation MLP into a memory core (an LSTM unless ``core`` says otherwise), with linear
    heads for action probabilities and value.

    ``forward(observation, prev_action, prev_reward, init_rnn_state) ->
    (pi, value, next_rnn_state)``: ``pi`` ``[..., action_size]`` softmax
    probabilities, ``value`` ``[...]``, with the observation's leading dims
    ``[]``, ``[B]`` or ``[T, B]``; ``next_rnn_state`` is an ``RnnState`` of
    ``[1, B, lstm_size]`` tensors (the chosen core's state for another ``core``: ``lstm``,
    ``gru``, ``ln_lstm`` or ``attention`` over ``memory_len`` steps, see
    ``rlfast.models.memory``).  ``prev_action`` is one-hot (float)
    ``[..., action_size]``; the agent converts integer actions.  ``action_nvec`` (for
    MultiDiscrete actions) makes ``pi`` one softmax per action dimension, concatenated, and
    ``prev_action`` the concatenated one-hots (``action_size = sum(action_nvec)``).
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int] | None = None,
        lstm_size: int = 64,
        nonlinearity: type[torch.nn.Module] = torch.nn.Tanh,
        normalize_observation: bool = False,
        norm_obs_clip: float = 10,
        norm_obs_var_clip: float = 1e-6,
        action_nvec: Sequence[int] | None = None,
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__(observation_shape, action_size,
                         [64] if hidden_sizes is None else list(hidden_sizes), lstm_size,
                         nonlinearity, normalize_observation, norm_obs_clip, norm_obs_var_clip,
                         "CategoricalPgLstmModel", core=core, memory_len=memory_len)
        self.action_nvec = check_action_nvec(action_nvec, self.action_size,
                                             "CategoricalPgLstmModel")
        self.pi, self.value = policy_value_heads(lstm_size, self.action_size)

    def heads(self, lstm_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and state value."""
        return categorical_outputs(self.pi, self.value, lstm_out, self.action_nvec)
