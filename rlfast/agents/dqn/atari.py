"""DQN-family agents for Atari, with the image models as defaults.

Each is the vector-observation agent's counterpart with a policy that names the model's
arguments as the Atari models do: ``image_shape`` (the observation shape) and ``output_size``
(the number of actions).  The check that the action space is scalar discrete still applies.
"""
from __future__ import annotations

from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.dqn.catdqn_agent import CategoricalQPolicy
from rlfast.agents.dqn.dqn_agent import DqnAgent, QValuePolicy
from rlfast.models.dqn import AtariCatDqnModel, AtariDqnModel, AtariR2d1Model

__all__ = ["AtariDqnAgent", "AtariCatDqnAgent", "AtariR2d1Agent", "AlternatingAtariR2d1Agent"]


class AtariDqnAgent(DqnAgent):
    """DQN agent for Atari (default model: ``AtariDqnModel``)."""

    policy = QValuePolicy(image_model=True)

    def __init__(self, ModelCls: type = AtariDqnModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariCatDqnAgent(DqnAgent):
    """Categorical DQN (and Rainbow, with a dueling noisy model) agent for Atari
    (default model: ``AtariCatDqnModel``); otherwise as ``CatDqnAgent``."""

    def __init__(self, n_atoms: int = 51, ModelCls: type = AtariCatDqnModel, **kwargs):
        super().__init__(ModelCls=ModelCls, policy=CategoricalQPolicy(n_atoms, image_model=True),
                         **kwargs)


class AtariR2d1Agent(RecurrentAgentMixin, DqnAgent):
    """R2D1 agent for Atari (default model: ``AtariR2d1Model``)."""

    policy = QValuePolicy(image_model=True)

    def __init__(self, ModelCls: type = AtariR2d1Model, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingAtariR2d1Agent(AlternatingRecurrentAgentMixin, DqnAgent):
    """R2D1 agent for Atari and alternating samplers (one LSTM state per group of environments)."""

    policy = QValuePolicy(image_model=True)

    def __init__(self, ModelCls: type = AtariR2d1Model, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
