"""The convolutional front end every Atari model shares: one place for its defaults and build.

Every Atari model takes the same convolution keywords (``use_maxpool``, ``channels``,
``kernel_sizes``, ``strides``, ``paddings``; ``None`` means the model family's default) and
builds its stack with ``atari_conv``.  Policy-gradient models default to A2C's stack
(``A2C_CONV``), DQN-family models to Nature DQN's (``DQN_CONV``).  Images are uint8 in
[0, 255] (a quarter of float storage in sample buffers and transfers) and are scaled to [0, 1]
floats inside the models with ``scale_image``.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.conv2d import Conv2dModel
from rlfast.models.utils import HIDDEN_GAIN, orthogonal_init_
from rlfast.utils.tensor import infer_leading_dims

__all__ = ["A2C_CONV", "DQN_CONV", "atari_conv", "conv_features", "check_image_shape",
           "scale_image"]

# A2C: 16 8x8 filters at stride 4, then 32 4x4 at stride 2; on a (4, 104, 80) image 32 x 12 x 9.
A2C_CONV = dict(channels=(16, 32), kernel_sizes=(8, 4), strides=(4, 2), paddings=(0, 1))
# Nature DQN's filters with paddings [0, 1, 1]: on (4, 104, 80) 64 x 12 x 9 (84 x 84: 64 x 10 x 10).
DQN_CONV = dict(channels=(32, 64, 64), kernel_sizes=(8, 4, 3), strides=(4, 2, 1),
                paddings=(0, 1, 1))


def check_image_shape(image_shape: Sequence[int], model_name: str) -> tuple[int, int, int]:
    """Return ``image_shape`` as a (C, H, W) tuple of positive ints, or raise naming it."""
    shape = tuple(image_shape)
    if len(shape) != 3 or any(int(d) != d or d < 1 for d in shape):
        raise ValueError(f"{model_name}: image_shape must be (C, H, W) of positive ints, "
                         f"got {shape!r}.")
    return tuple(int(d) for d in shape)


def atari_conv(
    image_shape: tuple[int, int, int],
    channels: Sequence[int] | None = None,
    kernel_sizes: Sequence[int] | None = None,
    strides: Sequence[int] | None = None,
    paddings: Sequence[int] | None = None,
    use_maxpool: bool = False,
    defaults: dict = A2C_CONV,
) -> tuple[Conv2dModel, int]:
    """Build the ReLU conv stack (``defaults`` for any None argument) and its flat output size.

    Convolutions get orthogonal init with gain sqrt(2), as the ReLU hidden layers do.
    """
    c, h, w = image_shape
    conv = Conv2dModel(
        in_channels=c,
        channels=list(defaults["channels"] if channels is None else channels),
        kernel_sizes=list(defaults["kernel_sizes"] if kernel_sizes is None else kernel_sizes),
        strides=list(defaults["strides"] if strides is None else strides),
        paddings=list(defaults["paddings"] if paddings is None else paddings),
        nonlinearity=torch.nn.ReLU,
        use_maxpool=use_maxpool,
    )
    for layer in conv.modules():
        if isinstance(layer, torch.nn.Conv2d):
            orthogonal_init_(layer, gain=HIDDEN_GAIN)
    return conv, conv.conv_out_size(h, w)


def scale_image(image: torch.Tensor, dtype: torch.dtype,
                memory_format: torch.memory_format = torch.preserve_format) -> torch.Tensor:
    """Pixels in [0, 255] (uint8, or any dtype) to ``dtype`` in [0, 1], laid out in
    ``memory_format`` (default: the image's own).

    A uint8 image is converted (and laid out) in one pass and then scaled in place, so only
    one new tensor is made; an image already of ``dtype`` and layout is scaled out of place,
    never modifying the caller's tensor.
    """
    converted = image.to(dtype, memory_format=memory_format)
    if converted is image:
        return converted.mul(1.0 / 255)
    return converted.mul_(1.0 / 255)


def conv_features(conv: Conv2dModel, image: torch.Tensor, image_shape: tuple, dtype: torch.dtype,
                  model_name: str) -> tuple[torch.Tensor, int, int, int]:
    """Flat conv features ``[T*B, C*H*W]`` of images with leading dims ``[]``, ``[B]`` or
    ``[T, B]``, and those dims as ``(lead_dim, T, B)``; raises naming the model when the
    images do not end in ``image_shape``."""
    lead_dim, T, B, shape = infer_leading_dims(image, 3)
    if tuple(shape) != image_shape:
        raise ValueError(
            f"{model_name}: image of shape {tuple(image.shape)} must end in image_shape "
            f"{image_shape} after leading dims [], [B] or [T, B]."
        )
    image = image.reshape(T * B, *image_shape)
    layout = (torch.channels_last if conv._use_channels_last(image.device)
              else torch.preserve_format)  # converted and laid out in one pass
    img = scale_image(image, dtype, memory_format=layout)
    return conv(img).reshape(T * B, -1), lead_dim, T, B
