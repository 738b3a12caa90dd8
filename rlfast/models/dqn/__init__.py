"""DQN-family models: Q-networks (plain, dueling, categorical, noisy) and recurrent R2D1 networks.

Q models return Q-values ``[..., A]``; categorical models return atom probabilities
``[..., A, n_atoms]`` (``log_probs=True`` for log-probabilities); recurrent models return
``(q, RnnState)``.  All accept leading dims ``[]``, ``[B]`` or ``[T, B]``.
"""
from rlfast.models.dqn.atari_dqn_model import AtariCatDqnModel, AtariDqnModel
from rlfast.models.dqn.heads import (DistributionalDuelingHeadModel, DistributionalHeadModel,
                                     DuelingHeadModel, make_q_head)
from rlfast.models.dqn.mlp_dqn_model import CatDqnMlpModel, DqnMlpModel
from rlfast.models.dqn.noisy import NoisyLinear, NoisyModelMixin
from rlfast.models.dqn.r2d1_model import AtariR2d1Model, R2d1MlpModel
from rlfast.models.pg.recurrent_body import RnnState

__all__ = [
    "AtariDqnModel", "AtariCatDqnModel", "AtariR2d1Model", "DqnMlpModel", "CatDqnMlpModel",
    "R2d1MlpModel", "DuelingHeadModel", "DistributionalHeadModel", "DistributionalDuelingHeadModel",
    "NoisyLinear", "NoisyModelMixin", "make_q_head", "RnnState",
]
