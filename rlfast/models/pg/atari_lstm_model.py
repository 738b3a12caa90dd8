"""Recurrent policy-gradient model for Atari: convolutions, an FC layer, an LSTM, two heads."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.atari_conv import A2C_CONV, atari_conv, check_image_shape, conv_features
from rlfast.models.mlp import size_list
from rlfast.models.pg.recurrent_body import RecurrentBody, RecurrentModel
from rlfast.models.pg.model_parts import categorical_outputs, policy_value_heads
from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import restore_leading_dims

__all__ = ["AtariLstmModel"]


class AtariLstmModel(RecurrentModel):
    """Conv stack, then FC layers into an LSTM over ``[features, prev_action, prev_reward]``.

    ``forward(image, prev_action, prev_reward, init_rnn_state) -> (pi, value, next_rnn_state)``:
    ``pi`` ``[..., output_size]`` softmax probabilities and ``value`` ``[...]`` with the image's
    leading dims ``[]``, ``[B]`` or ``[T, B]``; ``next_rnn_state`` is an ``RnnState`` of
    ``[1, B, lstm_size]`` tensors (``init_rnn_state=None`` starts from zeros).  Images are uint8
    in [0, 255], scaled to [0, 1] inside ``forward``; ``prev_action`` is one-hot (float)
    ``[..., output_size]``, which the agent makes from integer actions.  The FC layers and the
    LSTM are the shared ``RecurrentBody`` of the vector-observation recurrent models, fed the
    flattened conv features as its observation; ``core`` swaps the LSTM for another memory core
    (``gru``, ``ln_lstm``, ``attention`` over ``memory_len`` steps).  Convolution defaults are as
    in ``AtariFfModel``.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] | None = 512,
        lstm_size: int = 512,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
        core: str = "lstm",
        memory_len: int = 32,
    ):
        super().__init__()
        self.output_size = check_positive(output_size, "output_size", integer=True,
                                          owner="AtariLstmModel")
        self.lstm_size = check_positive(lstm_size, "lstm_size", integer=True,
                                        owner="AtariLstmModel")
        self.image_shape = check_image_shape(image_shape, "AtariLstmModel")
        self.conv, self.conv_out_size = atari_conv(
            self.image_shape, channels, kernel_sizes, strides, paddings, use_maxpool,
            defaults=A2C_CONV)
        self.body = RecurrentBody(
            observation_shape=(self.conv_out_size,),
            action_input_size=self.output_size,
            hidden_sizes=size_list(fc_sizes),
            lstm_size=self.lstm_size,
            nonlinearity=torch.nn.ReLU,
            normalize_observation=False,
            norm_obs_clip=10,
            norm_obs_var_clip=1e-6,
            core=core,
            memory_len=memory_len,
        )
        self.pi, self.value = policy_value_heads(self.lstm_size, self.output_size)

    def encode(self, image: torch.Tensor) -> torch.Tensor:
        """Flattened conv features, with the image's leading dims."""
        conv_out, lead_dim, T, B = conv_features(self.conv, image, self.image_shape,
                                                 self.pi.weight.dtype, "AtariLstmModel")
        return restore_leading_dims(conv_out, lead_dim, T, B)

    def heads(self, lstm_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and state value."""
        return categorical_outputs(self.pi, self.value, lstm_out)
