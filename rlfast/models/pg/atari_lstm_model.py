"""Recurrent policy-gradient model for Atari: convolutions, an FC layer, an LSTM, two heads."""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from rlfast.models.pg.atari_ff_model import atari_conv, check_image_shape, fc_size_list, scale_image
from rlfast.models.pg.lstm_common import LstmBody, RnnState
from rlfast.models.pg.model_parts import orthogonal_init_
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["AtariLstmModel"]


class AtariLstmModel(torch.nn.Module):
    """Conv stack, then FC layers into an LSTM over ``[features, prev_action, prev_reward]``.

    ``forward(image, prev_action, prev_reward, init_rnn_state) -> (pi, value, next_rnn_state)``:
    ``pi`` ``[..., output_size]`` softmax probabilities and ``value`` ``[...]`` with the image's
    leading dims ``[]``, ``[B]`` or ``[T, B]``; ``next_rnn_state`` is an ``RnnState`` of
    ``[1, B, lstm_size]`` tensors (``init_rnn_state=None`` starts from zeros).  Images are uint8
    in [0, 255], scaled to [0, 1] inside ``forward``; ``prev_action`` is one-hot (float)
    ``[..., output_size]``, which the agent makes from integer actions.  The FC layers and the
    LSTM are the shared ``LstmBody`` of the vector-observation LSTM models, fed the flattened
    conv features as its observation.  Convolution defaults are as in ``AtariFfModel``.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: Union[int, Sequence[int], None] = 512,
        lstm_size: int = 512,
        use_maxpool: bool = False,
        channels: Optional[Sequence[int]] = None,
        kernel_sizes: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        paddings: Optional[Sequence[int]] = None,
    ):
        super().__init__()
        if int(output_size) != output_size or output_size < 1:
            raise ValueError(f"AtariLstmModel: output_size must be a positive int, got {output_size!r}.")
        if int(lstm_size) != lstm_size or lstm_size < 1:
            raise ValueError(f"AtariLstmModel: lstm_size must be a positive int, got {lstm_size!r}.")
        self.image_shape = check_image_shape(image_shape, "AtariLstmModel")
        self.output_size = int(output_size)
        self.lstm_size = int(lstm_size)
        self.conv, self.conv_out_size = atari_conv(
            self.image_shape, channels, kernel_sizes, strides, paddings, use_maxpool)
        self.body = LstmBody(
            observation_shape=(self.conv_out_size,),
            action_input_size=self.output_size,
            hidden_sizes=fc_size_list(fc_sizes),
            lstm_size=self.lstm_size,
            nonlinearity=torch.nn.ReLU,
            normalize_observation=False,
            norm_obs_clip=10,
            norm_obs_var_clip=1e-6,
        )
        self.pi = orthogonal_init_(torch.nn.Linear(self.lstm_size, self.output_size), gain=0.01)
        self.value = orthogonal_init_(torch.nn.Linear(self.lstm_size, 1), gain=1.0)

    def forward(
        self,
        image: torch.Tensor,
        prev_action: torch.Tensor,
        prev_reward: torch.Tensor,
        init_rnn_state: Optional[RnnState] = None,
    ) -> Tuple[torch.Tensor, torch.Tensor, RnnState]:
        """Action probabilities, value, and the LSTM state after the last step."""
        lead_dim, T, B, shape = infer_leading_dims(image, 3)
        if tuple(shape) != self.image_shape:
            raise ValueError(
                f"AtariLstmModel: image of shape {tuple(image.shape)} must end in image_shape "
                f"{self.image_shape} after leading dims [], [B] or [T, B]."
            )
        img = scale_image(image, self.pi.weight.dtype)
        conv_out = self.conv(img.reshape(T * B, *self.image_shape)).reshape(T * B, -1)
        # The body infers [T, B] again from the features, so hand them over in the image's layout.
        features = restore_leading_dims(conv_out, lead_dim, T, B)
        lstm_out, next_rnn_state, _, _, _ = self.body(features, prev_action, prev_reward, init_rnn_state)
        flat = lstm_out.reshape(T * B, -1)
        pi = F.softmax(self.pi(flat), dim=-1)
        value = self.value(flat).squeeze(-1)
        pi, value = restore_leading_dims((pi, value), lead_dim, T, B)
        return pi, value, next_rnn_state
