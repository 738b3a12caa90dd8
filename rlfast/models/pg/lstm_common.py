"""The recurrent body and forward pass shared by every LSTM model (policy-gradient and R2D1).

An MLP embeds the observation; the LSTM then reads ``[features, prev_action,
prev_reward]`` per step.  The body handles the leading-dims bookkeeping
(``[]``, ``[B]`` or ``[T, B]`` in, ``[T, B, lstm_size]`` out), and ``LstmModel``
wraps it as ``encode -> body -> heads``, so each model only adds its encoder and heads.
"""
from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence

import torch

from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import HIDDEN_GAIN, ObservationNormalizer, init_mlp_
from rlfast.utils.checks import check_positive
from rlfast.utils.collections import namedarraytuple
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["RnnState", "LstmBody", "LstmModel", "LstmPgModel"]

# Each field is [num_layers=1, B, lstm_size], the layout torch.nn.LSTM uses.
RnnState = namedarraytuple("RnnState", ["h", "c"])


class LstmBody(torch.nn.Module):
    """Observation MLP -> LSTM over ``[features, prev_action, prev_reward]``.

    ``prev_action`` must be a float vector of size ``action_input_size`` per
    step (one-hot for discrete actions, the action itself for continuous);
    ``prev_reward`` is one scalar per step.  ``init_rnn_state`` is an
    ``RnnState`` (or ``(h, c)`` pair) of ``[1, B, lstm_size]`` tensors, or None
    for zeros.
    """

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_input_size: int,
        hidden_sizes: Sequence[int],
        lstm_size: int,
        nonlinearity: type[torch.nn.Module],
        normalize_observation: bool,
        norm_obs_clip: float,
        norm_obs_var_clip: float,
    ):
        super().__init__()
        self.observation_shape = tuple(observation_shape)
        self.action_input_size = int(action_input_size)
        self.lstm_size = int(lstm_size)
        input_size = int(math.prod(self.observation_shape))
        self.mlp = MlpModel(input_size, list(hidden_sizes), output_size=None, nonlinearity=nonlinearity)
        init_mlp_(self.mlp, output_gain=HIDDEN_GAIN)
        self.lstm = torch.nn.LSTM(self.mlp.output_size + self.action_input_size + 1, self.lstm_size)
        self.obs_norm = ObservationNormalizer(self.observation_shape, normalize_observation, norm_obs_clip, norm_obs_var_clip)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: tuple[torch.Tensor, torch.Tensor] | None,
    ) -> tuple[torch.Tensor, RnnState, int, int, int]:
        """Return ``(lstm_out [T, B, lstm_size], next RnnState, lead_dim, T, B)``."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        dtype = self.lstm.weight_ih_l0.dtype
        if prev_action.shape[-1:] != (self.action_input_size,) or prev_action.numel() != T * B * self.action_input_size:
            raise ValueError(
                f"LSTM model: prev_action of shape {tuple(prev_action.shape)} must have leading dims "
                f"matching the observation's and trailing size {self.action_input_size} "
                "(one-hot for discrete actions)."
            )
        if prev_reward.numel() != T * B:
            raise ValueError(
                f"LSTM model: prev_reward of shape {tuple(prev_reward.shape)} must hold one scalar per "
                f"step ({T * B} entries for T={T}, B={B})."
            )
        obs = self.obs_norm(observation.to(dtype))
        features = self.mlp(obs.reshape(T * B, -1))
        lstm_input = torch.cat(
            [
                features.reshape(T, B, -1),
                prev_action.to(dtype).reshape(T, B, self.action_input_size),
                prev_reward.to(dtype).reshape(T, B, 1),
            ],
            dim=2,
        )
        if init_rnn_state is None:
            hc = None
        else:
            h, c = init_rnn_state
            hc = (h.to(dtype), c.to(dtype))
        lstm_out, (hn, cn) = self.lstm(lstm_input, hc)
        return lstm_out, RnnState(h=hn, c=cn), lead_dim, T, B


class LstmModel(torch.nn.Module, metaclass=ABCMeta):
    """``encode`` the observation, run the ``LstmBody`` (``self.body``), apply the ``heads``.

    ``forward(observation, prev_action, prev_reward, init_rnn_state=None)`` returns the heads'
    outputs with the observation's leading dims ``[]``, ``[B]`` or ``[T, B]``, then the
    ``RnnState`` after the last step (``[1, B, lstm_size]`` tensors; ``None`` starts from zeros).
    """

    def encode(self, observation: torch.Tensor) -> torch.Tensor:
        """The body's observation input, with the observation's leading dims (as it is here)."""
        return observation

    def encode_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        """The body's previous-action input (as it is here: one-hot or continuous)."""
        return prev_action

    @abstractmethod
    def heads(self, lstm_out: torch.Tensor) -> tuple:
        """The model's outputs from the flat LSTM output ``[T*B, lstm_size]``."""

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: RnnState | None = None,
    ) -> tuple:
        """The heads' outputs, and the LSTM state after the last step."""
        lstm_out, next_rnn_state, lead_dim, T, B = self.body(
            self.encode(observation), self.encode_prev_action(prev_action), prev_reward, init_rnn_state)
        outputs = restore_leading_dims(self.heads(lstm_out.reshape(T * B, -1)), lead_dim, T, B)
        return (*outputs, next_rnn_state)


class LstmPgModel(LstmModel):
    """What the vector-observation recurrent policy-gradient models share: the argument checks,
    an ``LstmBody`` over the (optionally normalized) observation with the previous action (of
    ``action_size``) and reward, and ``update_obs_rms``.  Subclasses add the heads."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        action_size: int,
        hidden_sizes: Sequence[int],
        lstm_size: int,
        nonlinearity: type[torch.nn.Module],
        normalize_observation: bool,
        norm_obs_clip: float,
        norm_obs_var_clip: float,
        model_name: str,
    ):
        super().__init__()
        self.action_size = check_positive(action_size, "action_size", integer=True, owner=model_name)
        self.normalize_observation = normalize_observation
        self.body = LstmBody(
            observation_shape, self.action_size, hidden_sizes, lstm_size, nonlinearity,
            normalize_observation, norm_obs_clip, norm_obs_var_clip,
        )

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.body.obs_norm.update(observation)
