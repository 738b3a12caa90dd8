"""Recurrent Q-networks for R2D1: features into an LSTM with the previous action and reward.

Per step the LSTM reads ``[features, one-hot previous action, previous reward]`` and a Q head
(plain or dueling, of ``head_size`` hidden units) reads the LSTM output.  The Atari model's
features are the DQN convolutions followed by one ReLU layer of ``fc_size``; the vector model's
are an MLP.  Both are ``RecurrentModel``s like the policy-gradient recurrent models: ``core``
swaps the LSTM for another memory core (``gru``, ``ln_lstm``, ``attention`` over
``memory_len`` steps; ``rlfast.models.memory``), and the LSTM's state is the same
``RnnState(h, c)`` of ``[1, B, lstm_size]`` tensors (cudnn layout).
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.atari_conv import DQN_CONV, atari_conv, check_image_shape, conv_features
from rlfast.models.dqn.heads import make_q_head
from rlfast.models.dqn.noisy import NoisyModelMixin
from rlfast.models.dqn.q_model import checked_leading_dims, observation_shape_tuple
from rlfast.models.mlp import size_list
from rlfast.models.pg.recurrent_body import RecurrentBody, RecurrentModel
from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import restore_leading_dims, to_onehot

__all__ = ["AtariR2d1Model", "R2d1MlpModel"]


class _RecurrentQModel(NoisyModelMixin, RecurrentModel):
    """``forward(observation, prev_action, prev_reward, init_rnn_state=None) -> (q, RnnState)``.

    Q-values ``[..., output_size]`` have the observation's leading dims ``[]``, ``[B]`` or
    ``[T, B]``; a ``[T, B]`` input runs the LSTM over all ``T`` steps at once.  ``prev_action``
    is one-hot (float) ``[..., output_size]``, or integer actions ``[...]`` which are one-hot
    encoded here.  ``init_rnn_state`` is an ``RnnState`` (or ``(h, c)``) of ``[1, B,
    lstm_size]`` tensors, or None for zeros.  Subclasses set ``observation_shape`` and build
    the body and head with ``_build_body_and_head``; ``features`` maps observations to the
    body's input when that is more than the observation.
    """

    def _build_body_and_head(self, name: str, observation_shape: tuple, output_size: int,
                             hidden_sizes: list, lstm_size: int, head_size: int, dueling: bool,
                             noisy: bool, core: str = "lstm", memory_len: int = 32) -> None:
        self.output_size = check_positive(output_size, "output_size", integer=True, owner=name)
        self.lstm_size = check_positive(lstm_size, "lstm_size", integer=True, owner=name)
        self.dueling, self.noisy = bool(dueling), bool(noisy)
        self.body = RecurrentBody(
            observation_shape=observation_shape, action_input_size=self.output_size,
            hidden_sizes=hidden_sizes, lstm_size=self.lstm_size,
            nonlinearity=torch.nn.ReLU, normalize_observation=False, norm_obs_clip=10,
            norm_obs_var_clip=1e-6,
            core=core, memory_len=memory_len,
        )
        head_size = check_positive(head_size, "head_size", integer=True, owner=name)
        self.head = make_q_head(self.lstm_size, [head_size], self.output_size, dueling=dueling,
                                noisy=noisy)

    def heads(self, lstm_out: torch.Tensor) -> tuple[torch.Tensor]:
        """Q-values ``[T*B, output_size]``."""
        return (self.head(lstm_out),)

    def encode(self, observation: torch.Tensor) -> torch.Tensor:
        """Check that observations end in ``observation_shape``; then the subclass's
        ``features``."""
        checked_leading_dims(observation, self.observation_shape, type(self).__name__)
        return self.features(observation)

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """The body's input for checked observations (as they are here)."""
        return observation

    def encode_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        """One-hot (float) previous actions: integer actions are encoded here."""
        if not torch.is_floating_point(prev_action):
            prev_action = to_onehot(prev_action, self.output_size, dtype=torch.float32)
        return prev_action


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
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
        noisy: bool = False,
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__()
        name = "AtariR2d1Model"
        self.image_shape = self.observation_shape = check_image_shape(image_shape, name)
        self.conv, self.conv_out_size = atari_conv(self.image_shape, channels, kernel_sizes,
                                                   strides, paddings, use_maxpool,
                                                   defaults=DQN_CONV)
        fc_size = check_positive(fc_size, "fc_size", integer=True, owner=name)
        self._build_body_and_head(name, (self.conv_out_size,), output_size, [fc_size], lstm_size,
                                  head_size, dueling, noisy, core, memory_len)

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """Flattened conv features, with the image's leading dims."""
        conv_out, lead_dim, T, B = conv_features(self.conv, observation, self.image_shape,
                                                 self.body.dtype, "AtariR2d1Model")
        return restore_leading_dims(conv_out, lead_dim, T, B)


class R2d1MlpModel(_RecurrentQModel):
    """MLP (``hidden_sizes``, ReLU) -> LSTM (``lstm_size``) -> Q head (``head_size``), vector
    observations."""

    def __init__(
        self,
        observation_shape: Sequence[int],
        output_size: int,
        hidden_sizes: Sequence[int] | None = None,
        lstm_size: int = 64,
        head_size: int = 64,
        dueling: bool = False,
        noisy: bool = False,
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__()
        name = "R2d1MlpModel"
        self.observation_shape = observation_shape_tuple(observation_shape, name)
        self._build_body_and_head(name, self.observation_shape if self.observation_shape else (1,),
                                  output_size,
                                  size_list([64] if hidden_sizes is None else hidden_sizes),
                                  lstm_size, head_size, dueling, noisy, core, memory_len)

    def features(self, observation: torch.Tensor) -> torch.Tensor:
        """The observation, with a trailing dim of 1 for scalar observations."""
        if not self.observation_shape:
            return observation.unsqueeze(-1)
        return observation
