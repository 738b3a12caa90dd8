"""Atari DQN models: the Nature-DQN convolutions into a Q head (plain, dueling, categorical, noisy).

Default convolutions are Nature DQN's (channels [32, 64, 64], kernels [8, 4, 3], strides
[4, 2, 1]) with paddings [0, 1, 1]; on a (4, 104, 80) observation they leave 64 x 12 x 9 =
6912 features (on the classic 84 x 84 frame, 64 x 10 x 10).  Images are uint8 in [0, 255]
(a quarter of float storage in replay buffers and transfers) and are scaled to [0, 1] floats
inside ``forward``.
"""
from __future__ import annotations

from typing import Optional, Sequence, Union

import torch

from rlfast.models.dqn.heads import make_q_head
from rlfast.models.dqn.q_model import FeedForwardQModel, Flatten, check_output_size
from rlfast.models.pg.atari_ff_model import atari_conv, check_image_shape

__all__ = ["AtariDqnModel", "AtariCatDqnModel", "dqn_conv", "DQN_CHANNELS", "DQN_KERNEL_SIZES",
           "DQN_STRIDES", "DQN_PADDINGS"]

DQN_CHANNELS = (32, 64, 64)
DQN_KERNEL_SIZES = (8, 4, 3)
DQN_STRIDES = (4, 2, 1)
DQN_PADDINGS = (0, 1, 1)

Sizes = Union[int, Sequence[int], None]


def dqn_conv(image_shape, channels=None, kernel_sizes=None, strides=None, paddings=None, use_maxpool=False):
    """The conv stack with DQN defaults for any None argument, and its flattened output size."""
    return atari_conv(
        image_shape,
        channels=DQN_CHANNELS if channels is None else channels,
        kernel_sizes=DQN_KERNEL_SIZES if kernel_sizes is None else kernel_sizes,
        strides=DQN_STRIDES if strides is None else strides,
        paddings=DQN_PADDINGS if paddings is None else paddings,
        use_maxpool=use_maxpool,
    )


class _AtariQModel(FeedForwardQModel):
    """Builds the conv trunk and the Q head for the Atari models."""

    def _build(self, name, image_shape, output_size, fc_sizes, dueling, noisy, n_atoms,
               use_maxpool, channels, kernel_sizes, strides, paddings) -> None:
        self.image_shape = self.observation_shape = check_image_shape(image_shape, name)
        self.scale_uint8 = True
        self.output_size = check_output_size(output_size, name)
        self.dueling, self.noisy, self.n_atoms = bool(dueling), bool(noisy), n_atoms
        conv, self.conv_out_size = dqn_conv(self.image_shape, channels, kernel_sizes, strides, paddings, use_maxpool)
        self.trunk = torch.nn.Sequential(conv, Flatten())
        self.conv = conv
        self.head = make_q_head(self.conv_out_size, fc_sizes, self.output_size, dueling=dueling,
                                noisy=noisy, n_atoms=n_atoms)


class AtariDqnModel(_AtariQModel):
    """Convolutions over stacked frames into an MLP (``fc_sizes``) giving Q-values per action.

    ``forward(observation, prev_action=None, prev_reward=None) -> q`` ``[..., output_size]``
    for uint8 (or float, in [0, 255]) images with leading dims ``[]``, ``[B]`` or ``[T, B]``.
    ``dueling`` uses a ``DuelingHeadModel`` (value and advantage streams of ``fc_sizes`` each);
    ``noisy`` builds the fully connected layers as ``NoisyLinear`` (``reset_noise()``,
    ``set_noise(enabled)``).  ``use_maxpool`` swaps strided convolutions for max pooling.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        fc_sizes: Sizes = 512,
        dueling: bool = False,
        use_maxpool: bool = False,
        channels: Optional[Sequence[int]] = None,
        kernel_sizes: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        paddings: Optional[Sequence[int]] = None,
        noisy: bool = False,
    ):
        super().__init__()
        self._build("AtariDqnModel", image_shape, output_size, fc_sizes, dueling, noisy, None,
                    use_maxpool, channels, kernel_sizes, strides, paddings)


class AtariCatDqnModel(_AtariQModel):
    """Convolutions into an MLP with ``n_atoms`` outputs per action: a distribution of returns.

    ``forward(observation, prev_action=None, prev_reward=None, log_probs=False) -> p``
    ``[..., output_size, n_atoms]``: softmax probabilities over atoms for each action
    (``log_softmax`` log-probabilities with ``log_probs=True``).  ``dueling`` uses a
    ``DistributionalDuelingHeadModel``, ``noisy`` noisy fully connected layers (Rainbow is
    ``dueling=True, noisy=True``).  Images as in ``AtariDqnModel``.
    """

    def __init__(
        self,
        image_shape: Sequence[int],
        output_size: int,
        n_atoms: int = 51,
        fc_sizes: Sizes = 512,
        dueling: bool = False,
        noisy: bool = False,
        use_maxpool: bool = False,
        channels: Optional[Sequence[int]] = None,
        kernel_sizes: Optional[Sequence[int]] = None,
        strides: Optional[Sequence[int]] = None,
        paddings: Optional[Sequence[int]] = None,
    ):
        super().__init__()
        if int(n_atoms) != n_atoms or n_atoms < 2:
            raise ValueError(f"AtariCatDqnModel: n_atoms must be an int >= 2, got {n_atoms!r}.")
        self._build("AtariCatDqnModel", image_shape, output_size, fc_sizes, dueling, noisy, int(n_atoms),
                    use_maxpool, channels, kernel_sizes, strides, paddings)
