"""Feedforward policy-gradient model for Atari: convolutions, an MLP, policy and value heads.

Also holds the two pieces the Atari LSTM model shares with it: the convolution stack with the
A2C defaults (``atari_conv``) and the one-copy uint8 -> [0, 1] float conversion
(``scale_image``).
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch
import torch.nn.functional as F

from rlfast.models.conv2d import Conv2dModel
from rlfast.models.mlp import MlpModel
from rlfast.models.pg.model_parts import HIDDEN_GAIN, init_mlp_, orthogonal_init_
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["AtariFfModel", "atari_conv", "scale_image", "check_image_shape", "fc_size_list"]

# Conv stack of the A2C Atari model: 16 8x8 filters at stride 4, then 32 4x4 at stride 2.
DEFAULT_CHANNELS = (16, 32)
DEFAULT_KERNEL_SIZES = (8, 4)
DEFAULT_STRIDES = (4, 2)
DEFAULT_PADDINGS = (0, 1)


def check_image_shape(image_shape: Sequence[int], model_name: str) -> Tuple[int, int, int]:
    """Return ``image_shape`` as a (C, H, W) tuple of positive ints, or raise naming it."""
    shape = tuple(image_shape)
    if len(shape) != 3 or any(int(d) != d or d < 1 for d in shape):
        raise ValueError(f"{model_name}: image_shape must be (C, H, W) of positive ints, got {shape!r}.")
    return tuple(int(d) for d in shape)


def fc_size_list(fc_sizes: Union[int, Sequence[int], None]) -> list:
    """``fc_sizes`` as a list: an int is one layer, None or [] means no fully connected layer."""
    if fc_sizes is None:
        return []
    if isinstance(fc_sizes, int):
        return [fc_sizes]
    return list(fc_sizes)


def atari_conv(
    image_shape: Tuple[int, int, int],
    channels: Optional[Sequence[int]] = None,
    kernel_sizes: Optional[Sequence[int]] = None,
    strides: Optional[Sequence[int]] = None,
    paddings: Optional[Sequence[int]] = None,
    use_maxpool: bool = False,
) -> Tuple[Conv2dModel, int]:
    """Build the ReLU conv stack (A2C defaults for any None argument) and its flat output size.

    Convolutions get orthogonal init with gain sqrt(2), as the ReLU hidden layers do.
    """
    c, h, w = image_shape
    conv = Conv2dModel(
        in_channels=c,
        channels=list(DEFAULT_CHANNELS if channels is None else channels),
        kernel_sizes=list(DEFAULT_KERNEL_SIZES if kernel_sizes is None else kernel_sizes),
        strides=list(DEFAULT_STRIDES if strides is None else strides),
        paddings=list(DEFAULT_PADDINGS if paddings is None else paddings),
        nonlinearity=torch.nn.ReLU,
        use_maxpool=use_maxpool,
    )
    for layer in conv.modules():
        if isinstance(layer, torch.nn.Conv2d):
            orthogonal_init_(layer, gain=HIDDEN_GAIN)
    return conv, conv.conv_out_size(h, w)


def scale_image(image: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Pixels in [0, 255] (uint8, or any dtype) to ``dtype`` in [0, 1].

    A uint8 image is converted and then scaled in place, so only one new tensor is made; an
    image already of ``dtype`` is scaled out of place, never modifying the caller's tensor.
    """
    converted = image.to(dtype)
    if converted is image:
        return converted.mul(1.0 / 255)
    return converted.mul_(1.0 / 255)


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
        fc_sizes: Union[int, Sequence[int], None] = 512,
        use_maxpool: bool = False,
        channels: Optional[Sequence[int]] = None,
        kernel_sizes: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        paddings: Optional[Sequence[int]] = None,
    ):
        super().__init__()
        if int(output_size) != output_size or output_size < 1:
            raise ValueError(f"AtariFfModel: output_size must be a positive int, got {output_size!r}.")
        self.image_shape = check_image_shape(image_shape, "AtariFfModel")
        self.output_size = int(output_size)
        self.conv, self.conv_out_size = atari_conv(
            self.image_shape, channels, kernel_sizes, strides, paddings, use_maxpool)
        self.fc = MlpModel(self.conv_out_size, fc_size_list(fc_sizes), output_size=None,
                           nonlinearity=torch.nn.ReLU)
        init_mlp_(self.fc, output_gain=HIDDEN_GAIN)
        self.pi = orthogonal_init_(torch.nn.Linear(self.fc.output_size, self.output_size), gain=0.01)
        self.value = orthogonal_init_(torch.nn.Linear(self.fc.output_size, 1), gain=1.0)

    def forward(
        self, image: torch.Tensor, prev_action: torch.Tensor = None, prev_reward: torch.Tensor = None
    ) -> Tuple[torch.Tensor, torch.Tensor]:
        """Action probabilities and state value; ``prev_action``/``prev_reward`` are unused."""
        lead_dim, T, B, shape = infer_leading_dims(image, 3)
        if tuple(shape) != self.image_shape:
            raise ValueError(
                f"AtariFfModel: image of shape {tuple(image.shape)} must end in image_shape "
                f"{self.image_shape} after leading dims [], [B] or [T, B]."
            )
        img = scale_image(image, self.pi.weight.dtype)
        conv_out = self.conv(img.reshape(T * B, *self.image_shape))
        features = self.fc(conv_out.reshape(T * B, -1))
        pi = F.softmax(self.pi(features), dim=-1)
        value = self.value(features).squeeze(-1)
        return restore_leading_dims((pi, value), lead_dim, T, B)
