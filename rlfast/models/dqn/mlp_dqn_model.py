"""DQN models for vector observations: an MLP trunk into a Q head (plain, dueling, categorical,
noisy).

``hidden_sizes`` lists every hidden layer; the last one belongs to the head, so a dueling
model gives its value and advantage streams one hidden layer each of that size and shares the
layers before it, and a plain model is exactly an MLP ``obs -> hidden_sizes -> actions``.
With ``noisy=True`` the head's layers (the last hidden one and the output) are ``NoisyLinear``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rlfast.models.dqn.heads import make_q_head
from rlfast.models.dqn.q_model import FeedForwardQModel, Flatten, observation_shape_tuple
from rlfast.models.mlp import MlpModel, size_list
from rlfast.utils.checks import check_int, check_positive

__all__ = ["DqnMlpModel", "CatDqnMlpModel"]

DEFAULT_HIDDEN_SIZES = (64, 64)


def _build_mlp_q_model(model: FeedForwardQModel, name: str, observation_shape, output_size,
                       hidden_sizes, dueling, noisy, n_atoms) -> None:
    """Give ``model`` (a ``DqnMlpModel`` or ``CatDqnMlpModel``) its MLP trunk (all hidden layers
    but the last) and its head."""
    model.observation_shape = observation_shape_tuple(observation_shape, name)
    model.output_size = check_positive(output_size, "output_size", integer=True, owner=name)
    model.dueling, model.noisy, model.n_atoms = bool(dueling), bool(noisy), n_atoms
    sizes = size_list(DEFAULT_HIDDEN_SIZES if hidden_sizes is None else hidden_sizes)
    input_size = int(math.prod(model.observation_shape))
    trunk_sizes, head_sizes = sizes[:-1], sizes[-1:]
    if trunk_sizes:
        trunk_mlp = MlpModel(input_size, trunk_sizes, output_size=None, nonlinearity=torch.nn.ReLU)
        model.trunk = torch.nn.Sequential(Flatten(), trunk_mlp)
        feature_size = trunk_mlp.output_size
    else:
        model.trunk = Flatten()
        feature_size = input_size
    model.head = make_q_head(feature_size, head_sizes, model.output_size, dueling=dueling,
                             noisy=noisy, n_atoms=n_atoms)


class DqnMlpModel(FeedForwardQModel):
    """MLP Q-network for vector observations (e.g. CartPole).

    ``forward(observation, prev_action=None, prev_reward=None) -> q`` ``[..., output_size]``
    for float (or integer) observations ``[..., *observation_shape]`` with leading dims
    ``[]``, ``[B]`` or ``[T, B]``.
    """

    def __init__(self, observation_shape: Sequence[int], output_size: int,
                 hidden_sizes: Sequence[int] | None = None, dueling: bool = False,
                 noisy: bool = False):
        super().__init__()
        _build_mlp_q_model(self, "DqnMlpModel", observation_shape, output_size, hidden_sizes,
                           dueling, noisy, None)


class CatDqnMlpModel(FeedForwardQModel):
    """MLP categorical (distributional) Q-network for vector observations.

    ``forward(observation, prev_action=None, prev_reward=None, log_probs=False) -> p``
    ``[..., output_size, n_atoms]`` softmax probabilities over atoms for each action
    (log-probabilities with ``log_probs=True``).
    """

    def __init__(self, observation_shape: Sequence[int], output_size: int,
                 hidden_sizes: Sequence[int] | None = None, n_atoms: int = 51,
                 dueling: bool = False, noisy: bool = False):
        super().__init__()
        n_atoms = check_int(n_atoms, "n_atoms", minimum=2, owner="CatDqnMlpModel")
        _build_mlp_q_model(self, "CatDqnMlpModel", observation_shape, output_size, hidden_sizes,
                           dueling, noisy, n_atoms)
