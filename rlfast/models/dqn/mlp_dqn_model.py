"""DQN models for vector observations: an MLP trunk into a Q head (plain, dueling, categorical, noisy).

``hidden_sizes`` lists every hidden layer; the last one belongs to the head, so a dueling
model gives its value and advantage streams one hidden layer each of that size and shares the
layers before it, and a plain model is exactly an MLP ``obs -> hidden_sizes -> actions``.
With ``noisy=True`` the head's layers (the last hidden one and the output) are ``NoisyLinear``.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

import torch

from rlfast.models.dqn.heads import make_q_head
from rlfast.models.dqn.noisy import size_list
from rlfast.models.dqn.q_model import FeedForwardQModel, Flatten, check_output_size, observation_shape_tuple
from rlfast.models.mlp import MlpModel

__all__ = ["DqnMlpModel", "CatDqnMlpModel"]

DEFAULT_HIDDEN_SIZES = (64, 64)


class _MlpQModel(FeedForwardQModel):
    """Builds the MLP trunk (all hidden layers but the last) and the head."""

    def _build(self, name, observation_shape, output_size, hidden_sizes, dueling, noisy, n_atoms) -> None:
        self.observation_shape = observation_shape_tuple(observation_shape, name)
        self.output_size = check_output_size(output_size, name)
        self.dueling, self.noisy, self.n_atoms = bool(dueling), bool(noisy), n_atoms
        sizes = size_list(DEFAULT_HIDDEN_SIZES if hidden_sizes is None else hidden_sizes)
        input_size = int(math.prod(self.observation_shape))
        trunk_sizes, head_sizes = sizes[:-1], sizes[-1:]
        if trunk_sizes:
            trunk_mlp = MlpModel(input_size, trunk_sizes, output_size=None, nonlinearity=torch.nn.ReLU)
            self.trunk = torch.nn.Sequential(Flatten(), trunk_mlp)
            feature_size = trunk_mlp.output_size
        else:
            self.trunk = Flatten()
            feature_size = input_size
        self.head = make_q_head(feature_size, head_sizes, self.output_size, dueling=dueling, noisy=noisy,
                                n_atoms=n_atoms)


class DqnMlpModel(_MlpQModel):
    """MLP Q-network for vector observations (e.g. CartPole).

    ``forward(observation, prev_action=None, prev_reward=None) -> q`` ``[..., output_size]``
    for float (or integer) observations ``[..., *observation_shape]`` with leading dims
    ``[]``, ``[B]`` or ``[T, B]``.
    """

    def __init__(self, observation_shape: Sequence[int], output_size: int,
                 hidden_sizes: Optional[Sequence[int]] = None, dueling: bool = False, noisy: bool = False):
        super().__init__()
        self._build("DqnMlpModel", observation_shape, output_size, hidden_sizes, dueling, noisy, None)


class CatDqnMlpModel(_MlpQModel):
    """MLP categorical (distributional) Q-network for vector observations.

    ``forward(observation, prev_action=None, prev_reward=None, log_probs=False) -> p``
    ``[..., output_size, n_atoms]`` softmax probabilities over atoms for each action
    (log-probabilities with ``log_probs=True``).
    """

    def __init__(self, observation_shape: Sequence[int], output_size: int,
                 hidden_sizes: Optional[Sequence[int]] = None, n_atoms: int = 51, dueling: bool = False,
                 noisy: bool = False):
        super().__init__()
        if int(n_atoms) != n_atoms or n_atoms < 2:
            raise ValueError(f"CatDqnMlpModel: n_atoms must be an int >= 2, got {n_atoms!r}.")
        self._build("CatDqnMlpModel", observation_shape, output_size, hidden_sizes, dueling, noisy, int(n_atoms))
