"""Feedforward policy-gradient model for Atari: convolutions, an MLP, policy and value heads."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.atari_conv import A2C_CONV, atari_conv, check_image_shape, conv_features
from rlfast.models.mlp import MlpModel, size_list
from rlfast.models.pg.model_parts import (HIDDEN_GAIN, categorical_outputs, init_mlp_,
                                          policy_value_heads)
from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import restore_leading_dims

__all__ = ["AtariFfModel"]


class AtariFfModel(torch.nn.Module):
    """Conv stack into an MLP (``fc_sizes``), then linear policy and value heads.

    ``forward(image, prev_action, prev_reward) -> (pi, value)`` with ``pi`` softmax
    probabilities ``[..., output_size]`` and ``value`` ``[...]``, for images with leading dims
    ``[]``, ``[B]`` or ``[T, B]``.  Images are uint8 in [0, 255] (a quarter of float storage in
    sample buffers and transfers) and are scaled to float in [0, 1] inside ``forward``.  Default
    convolutions are A2C's (channels [16, 32], kernels [8, 4], strides [4, 2], paddings [0, 1]);
    for a (4, 104, 80) image they give 32 x 12 x 9 features.  ``use_maxpool`` replaces strided
    convolutions by stride-1 ones followed by max pooling.  Orthogonal init: hidden gain
    sqrt(2), policy output 0.01 (near-uniform start), value output 1.0.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: int | Sequence[int] | None = 512,
        use_maxpool: bool = False,
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
    ):
        super().__init__()
        self.output_size = check_positive(output_size, "output_size", integer=True,
                                          owner="AtariFfModel")
        self.image_shape = check_image_shape(image_shape, "AtariFfModel")
        self.conv, self.conv_out_size = atari_conv(
            self.image_shape, channels, kernel_sizes, strides, paddings, use_maxpool,
            defaults=A2C_CONV)
        self.fc = MlpModel(self.conv_out_size, size_list(fc_sizes), output_size=None,
                           nonlinearity=torch.nn.ReLU)
        init_mlp_(self.fc, output_gain=HIDDEN_GAIN)
        self.pi, self.value = policy_value_heads(self.fc.output_size, self.output_size)

    def forward(
        self, image: torch.Tensor, prev_action: torch.Tensor = None,
        prev_reward: torch.Tensor = None
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and state value; ``prev_action``/``prev_reward`` are unused."""
        conv_out, lead_dim, T, B = conv_features(self.conv, image, self.image_shape,
                                                 self.pi.weight.dtype, "AtariFfModel")
        outputs = categorical_outputs(self.pi, self.value, self.fc(conv_out))
        return restore_leading_dims(outputs, lead_dim, T, B)
