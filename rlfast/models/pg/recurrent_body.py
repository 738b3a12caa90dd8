"""The recurrent body and forward pass shared by every recurrent model (policy-gradient, R2D1).

An MLP embeds the observation; a memory core (``rlfast.models.memory``: LSTM, GRU,
layer-normalised LSTM or windowed attention) then reads ``[features, prev_action,
prev_reward]`` per step.  The body handles the leading-dims bookkeeping (``[]``, ``[B]`` or
``[T, B]`` in, ``[T, B, lstm_size]`` out), and ``RecurrentModel`` wraps it as ``encode -> body
-> heads``, so each model only adds its encoder and heads.
"""
from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence
from typing import Any

import torch

from rlfast.models.memory import RnnState, check_core, make_core
from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import HIDDEN_GAIN, ObservationNormalizer, init_mlp_
from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["RnnState", "RecurrentBody", "RecurrentModel", "RecurrentPgModel"]


class RecurrentBody(torch.nn.Module):
    """Observation MLP -> memory core over ``[features, prev_action, prev_reward]``.

    ``prev_action`` must be a float vector of size ``action_input_size`` per step (one-hot
    for discrete actions, the action itself for continuous); ``prev_reward`` is one scalar per
    step.  ``core`` names the memory core (``lstm``, ``gru``, ``ln_lstm``, ``attention``; see
    ``rlfast.models.memory``), ``lstm_size`` its width and ``memory_len`` the attention window.
    ``init_rnn_state`` is the core's state (``[N, B, H]`` tensors, ``RnnState(h, c)`` for the
    LSTMs) or None for zeros; ``reset`` ``[T, B]`` zeroes it before the steps that start an
    episode.
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
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__()
        self.observation_shape = tuple(observation_shape)
        self.action_input_size = int(action_input_size)
        self.lstm_size = int(lstm_size)
        input_size = int(math.prod(self.observation_shape))
        self.mlp = MlpModel(input_size, list(hidden_sizes), output_size=None,
                            nonlinearity=nonlinearity)
        init_mlp_(self.mlp, output_gain=HIDDEN_GAIN)
        self.core = make_core(check_core(core, "recurrent model"),
                              self.mlp.output_size + self.action_input_size + 1, self.lstm_size,
                              memory_len=memory_len)
        self.obs_norm = ObservationNormalizer(self.observation_shape, normalize_observation,
                                              norm_obs_clip, norm_obs_var_clip)

    @property
    def dtype(self) -> torch.dtype:
        """The parameters' dtype (the core's inputs are cast to it)."""
        return next(self.core.parameters()).dtype

    def _load_from_state_dict(self, state_dict, prefix, *args, **kwargs):
        # Snapshots from before the memory cores kept the LSTM at ``body.lstm``.
        for key in [k for k in state_dict if k.startswith(prefix + "lstm.")]:
            state_dict[prefix + "core." + key[len(prefix):]] = state_dict.pop(key)
        super()._load_from_state_dict(state_dict, prefix, *args, **kwargs)

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any,
        reset: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, Any, int, int, int]:
        """Return ``(core_out [T, B, lstm_size], next state, lead_dim, T, B)``."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        dtype = self.dtype
        if (prev_action.shape[-1:] != (self.action_input_size,)
                or prev_action.numel() != T * B * self.action_input_size):
            raise ValueError(
                f"recurrent model: prev_action of shape {tuple(prev_action.shape)} must have "
                "leading dims matching the observation's and trailing size "
                f"{self.action_input_size} (one-hot for discrete actions)."
            )
        if prev_reward.numel() != T * B:
            raise ValueError(
                f"recurrent model: prev_reward of shape {tuple(prev_reward.shape)} must hold one "
                f"scalar per step ({T * B} entries for T={T}, B={B})."
            )
        if reset is not None:
            if reset.numel() != T * B:
                raise ValueError(f"recurrent model: reset of shape {tuple(reset.shape)} must hold "
                                 f"one flag per step ({T * B} entries for T={T}, B={B}).")
            reset = reset.reshape(T, B)
        obs = self.obs_norm(observation.to(dtype))
        features = self.mlp(obs.reshape(T * B, -1))
        core_input = torch.cat(
            [
                features.reshape(T, B, -1),
                prev_action.to(dtype).reshape(T, B, self.action_input_size),
                prev_reward.to(dtype).reshape(T, B, 1),
            ],
            dim=2,
        )
        core_out, next_state = self.core(core_input, init_rnn_state, reset)
        return core_out, next_state, lead_dim, T, B


class RecurrentModel(torch.nn.Module, metaclass=ABCMeta):
    """``encode`` the observation, run the ``RecurrentBody`` (``self.body``), apply the ``heads``.

    ``forward(observation, prev_action, prev_reward, init_rnn_state=None, reset=None)`` returns
    the heads' outputs with the observation's leading dims ``[]``, ``[B]`` or ``[T, B]``, then
    the core's state after the last step (``None`` starts from zeros; ``reset``, with the
    observation's leading dims, zeroes the state before the steps that start an episode).
    """

    def encode(self, observation: torch.Tensor) -> torch.Tensor:
        """The body's observation input, with the observation's leading dims (as it is here)."""
        return observation

    def encode_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        """The body's previous-action input (as it is here: one-hot or continuous)."""
        return prev_action

    @abstractmethod
    def heads(self, core_out: torch.Tensor) -> tuple:
        """The model's outputs from the flat core output ``[T*B, lstm_size]``."""

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Any = None,
        reset: torch.Tensor | None = None,
    ) -> tuple:
        """The heads' outputs, and the core's state after the last step."""
        core_out, next_rnn_state, lead_dim, T, B = self.body(
            self.encode(observation), self.encode_prev_action(prev_action), prev_reward,
            init_rnn_state, reset)
        outputs = restore_leading_dims(self.heads(core_out.reshape(T * B, -1)), lead_dim, T, B)
        return (*outputs, next_rnn_state)


class RecurrentPgModel(RecurrentModel):
    """What the vector-observation recurrent policy-gradient models share: the argument checks,
    a ``RecurrentBody`` over the (optionally normalized) observation with the previous action (of
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
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__()
        self.action_size = check_positive(action_size, "action_size", integer=True,
                                          owner=model_name)
        self.normalize_observation = normalize_observation
        self.body = RecurrentBody(
            observation_shape, self.action_size, hidden_sizes, lstm_size, nonlinearity,
            normalize_observation, norm_obs_clip, norm_obs_var_clip, core=core,
            memory_len=memory_len,
        )

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.body.obs_norm.update(observation)
