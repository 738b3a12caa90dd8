"""Recurrent Q-networks for R2D1: features into an LSTM with the previous action and reward.

Per step the LSTM reads ``[features, one-hot previous action, previous reward]`` and a Q head
(plain or dueling, of ``head_size`` hidden units) reads the LSTM output.  The Atari model's
features are the DQN convolutions followed by one ReLU layer of ``fc_size``; the vector model's
are an MLP.  Both reuse the policy-gradient models' ``LstmBody`` for the recurrent part, so the
state layout is the same ``RnnState(h, c)`` of ``[1, B, lstm_size]`` tensors (cudnn layout).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

from rlfast.models.dqn.atari_dqn_model import dqn_conv
from rlfast.models.dqn.heads import make_q_head
from rlfast.models.dqn.noisy import NoisyModelMixin, size_list
from rlfast.models.dqn.q_model import check_output_size, observation_shape_tuple
from rlfast.models.pg.atari_ff_model import check_image_shape, scale_image
from rlfast.models.pg.lstm_common import LstmBody, RnnState
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims, to_onehot

__all__ = ["AtariR2d1Model", "R2d1MlpModel"]


def _positive(name: str, value, model: str) -> int:
    if int(value) != value or value < 1:
        raise ValueError(f"{model}: {name} must be a positive int, got {value!r}.")
    return int(value)


class _RecurrentQModel(NoisyModelMixin, torch.nn.Module):
    """``forward(observation, prev_action, prev_reward, init_rnn_state=None) -> (q, RnnState)``.

    Subclasses set ``observation_shape``, ``output_size``, ``body`` (an ``LstmBody``),
    ``head`` and ``encode`` (observations to the body's input, keeping leading dims).
    """

    def encode(self, observation: torch.Tensor, lead_dim: int, T: int, B: int) -> torch.Tensor:
        return observation

    def forward(
        self,
        observation: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Optional[RnnState] = None,
    ) -> Tuple[torch.Tensor, RnnState]:
        """Q-values ``[..., output_size]`` with the observation's leading dims, and the next state.

        Leading dims ``[]``, ``[B]`` or ``[T, B]``; a ``[T, B]`` input runs the LSTM over all
        ``T`` steps at once.  ``prev_action`` is one-hot (float) ``[..., output_size]``, or
        integer actions ``[...]`` which are one-hot encoded here.  ``init_rnn_state`` is an
        ``RnnState`` (or ``(h, c)``) of ``[1, B, lstm_size]`` tensors, or None for zeros.
        """
        lead_dim, T, B, shape = infer_leading_dims(observation, len(self.observation_shape))
        if tuple(shape) != tuple(self.observation_shape):
            raise ValueError(
                f"{type(self).__name__}: observation of shape {tuple(observation.shape)} must end in "
                f"{tuple(self.observation_shape)} after leading dims [], [B] or [T, B]."
            )
        if not torch.is_floating_point(prev_action):
            prev_action = to_onehot(prev_action, self.output_size, dtype=torch.float32)
        features = self.encode(observation, lead_dim, T, B)
        lstm_out, next_rnn_state, _, _, _ = self.body(features, prev_action, prev_reward, init_rnn_state)
        q = self.head(lstm_out.reshape(T * B, -1))
        return restore_leading_dims(q, lead_dim, T, B), next_rnn_state


class AtariR2d1Model(_RecurrentQModel):
    """DQN convolutions -> ReLU FC (``fc_size``) -> LSTM (``lstm_size``) -> Q head (``head_size``).

    Images are uint8 in [0, 255] (or floats on that scale), scaled to [0, 1] inside.  ``dueling``
    gives the head value and advantage streams; ``noisy`` makes the head's layers ``NoisyLinear``.
    Convolution defaults as in ``AtariDqnModel``.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_size: int = 512,
        lstm_size: int = 512,
        head_size: int = 512,
        dueling: bool = False,
        use_maxpool: bool = False,
        channels: Optional[Sequence[int]] = None,
        kernel_sizes: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        paddings: Optional[Sequence[int]] = None,
        noisy: bool = False,
    ):
        super().__init__()
        name = "AtariR2d1Model"
        self.image_shape = self.observation_shape = check_image_shape(image_shape, name)
        self.output_size = check_output_size(output_size, name)
        self.lstm_size = _positive("lstm_size", lstm_size, name)
        self.dueling, self.noisy = bool(dueling), bool(noisy)
        self.conv, self.conv_out_size = dqn_conv(self.image_shape, channels, kernel_sizes, strides, paddings,
                                                 use_maxpool)
        self.body = LstmBody(
            observation_shape=(self.conv_out_size,), action_input_size=self.output_size,
            hidden_sizes=[_positive("fc_size", fc_size, name)], lstm_size=self.lstm_size,
            nonlinearity=torch.nn.ReLU, normalize_observation=False, norm_obs_clip=10, norm_obs_var_clip=1e-6,
        )
        self.head = make_q_head(self.lstm_size, [_positive("head_size", head_size, name)], self.output_size,
                                dueling=dueling, noisy=noisy)

    def encode(self, observation: torch.Tensor, lead_dim: int, T: int, B: int) -> torch.Tensor:
        img = scale_image(observation, self.body.lstm.weight_ih_l0.dtype)
        conv_out = self.conv(img.reshape(T * B, *self.image_shape)).reshape(T * B, -1)
        return restore_leading_dims(conv_out, lead_dim, T, B)


class R2d1MlpModel(_RecurrentQModel):
    """MLP (``hidden_sizes``, ReLU) -> LSTM (``lstm_size``) -> Q head (``head_size``), vector observations."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        hidden_sizes: Optional[Sequence[int]] = None,
        lstm_size: int = 64,
        head_size: int = 64,
        dueling: bool = False,
        noisy: bool = False,
    ):
        super().__init__()
        name = "R2d1MlpModel"
        self.observation_shape = observation_shape_tuple(observation_shape, name)
        self.output_size = check_output_size(output_size, name)
        self.lstm_size = _positive("lstm_size", lstm_size, name)
        self.dueling, self.noisy = bool(dueling), bool(noisy)
        self.body = LstmBody(
            observation_shape=self.observation_shape if self.observation_shape else (1,),
            action_input_size=self.output_size,
            hidden_sizes=size_list([64] if hidden_sizes is None else hidden_sizes), lstm_size=self.lstm_size,
            nonlinearity=torch.nn.ReLU, normalize_observation=False, norm_obs_clip=10, norm_obs_var_clip=1e-6,
        )
        self.head = make_q_head(self.lstm_size, [_positive("head_size", head_size, name)], self.output_size,
                                dueling=dueling, noisy=noisy)

    def encode(self, observation: torch.Tensor, lead_dim: int, T: int, B: int) -> torch.Tensor:
        if not self.observation_shape:  # scalar observations: give the body a trailing dim of 1
            return observation.unsqueeze(-1)
        return observation
