"""Atari DQN models: the Nature-DQN convolutions into a Q head (plain, dueling, categorical, noisy).

Default convolutions are Nature DQN's (``DQN_CONV``: channels [32, 64, 64], kernels [8, 4, 3],
strides [4, 2, 1]) with paddings [0, 1, 1]; on a (4, 104, 80) observation they leave 64 x 12 x
9 = 6912 features (on the classic 84 x 84 frame, 64 x 10 x 10).  Images are uint8 in [0, 255]
(a quarter of float storage in replay buffers and transfers) and are scaled to [0, 1] floats
inside ``forward``.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.atari_conv import DQN_CONV, atari_conv, check_image_shape
from rlfast.models.dqn.heads import make_q_head
from rlfast.models.dqn.q_model import FeedForwardQModel, Flatten
from rlfast.utils.checks import check_int, check_positive

__all__ = ["AtariDqnModel", "AtariCatDqnModel"]

Sizes = int | Sequence[int] | None


def _build_atari_q_model(model: FeedForwardQModel, name: str, image_shape, output_size, fc_sizes,
                         dueling, noisy, n_atoms, use_maxpool, channels, kernel_sizes, strides,
                         paddings) -> None:
    """Give ``model`` (an ``AtariDqnModel`` or ``AtariCatDqnModel``) its conv trunk and Q head."""
    model.image_shape = model.observation_shape = check_image_shape(image_shape, name)
    model.scale_uint8 = True
    model.output_size = check_positive(output_size, "output_size", integer=True, owner=name)
    model.dueling, model.noisy, model.n_atoms = bool(dueling), bool(noisy), n_atoms
    conv, model.conv_out_size = atari_conv(model.image_shape, channels, kernel_sizes, strides,
                                           paddings, use_maxpool, defaults=DQN_CONV)
    model.trunk = torch.nn.Sequential(conv, Flatten())
    model.conv = conv
    model.head = make_q_head(model.conv_out_size, fc_sizes, model.output_size, dueling=dueling,
                             noisy=noisy, n_atoms=n_atoms)


class AtariDqnModel(FeedForwardQModel):
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
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
        noisy: bool = False,
    ):
        super().__init__()
        _build_atari_q_model(self, "AtariDqnModel", image_shape, output_size, fc_sizes, dueling,
                             noisy, None, use_maxpool, channels, kernel_sizes, strides, paddings)


class AtariCatDqnModel(FeedForwardQModel):
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
        channels: Sequence[int] | None = None,
        kernel_sizes: Sequence[int] | None = None,
        strides: Sequence[int] | None = None,
        paddings: Sequence[int] | None = None,
    ):
        super().__init__()
        n_atoms = check_int(n_atoms, "n_atoms", minimum=2, owner="AtariCatDqnModel")
        _build_atari_q_model(self, "AtariCatDqnModel", image_shape, output_size, fc_sizes, dueling,
                             noisy, n_atoms, use_maxpool, channels, kernel_sizes, strides,
                             paddings)
