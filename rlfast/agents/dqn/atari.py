"""DQN-family agents for Atari, with the image models as defaults."""
from __future__ import annotations

from rlfast.agents.dqn.catdqn_agent import CatDqnAgent
from rlfast.agents.dqn.dqn_agent import DqnAgent
from rlfast.agents.dqn.r2d1_agent import R2d1Agent
from rlfast.models.dqn import AtariCatDqnModel, AtariDqnModel, AtariR2d1Model

__all__ = ["AtariDqnAgentMixin", "AtariDqnAgent", "AtariCatDqnAgent", "AtariR2d1Agent"]


class AtariDqnAgentMixin:
    """Gives the model ``image_shape`` (the observation shape) and ``output_size`` (number of actions).

    Put it before a DQN-family agent: ``class MyAgent(AtariDqnAgentMixin, DqnAgent)``; the
    agent's check that the action space is scalar discrete still applies.
    """

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(image_shape=observation shape, output_size=number of actions)``."""
        kwargs = super().make_env_to_model_kwargs(env_spaces)
        return dict(image_shape=kwargs["observation_shape"], output_size=kwargs["output_size"])


class AtariDqnAgent(AtariDqnAgentMixin, DqnAgent):
    """DQN agent for Atari (default model: ``AtariDqnModel``)."""

    def __init__(self, ModelCls: type = AtariDqnModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariCatDqnAgent(AtariDqnAgentMixin, CatDqnAgent):
    """Categorical DQN (and Rainbow, with a dueling noisy model) agent for Atari
    (default model: ``AtariCatDqnModel``)."""

    def __init__(self, ModelCls: type = AtariCatDqnModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariR2d1Agent(AtariDqnAgentMixin, R2d1Agent):
    """R2D1 agent for Atari (default model: ``AtariR2d1Model``)."""

    def __init__(self, ModelCls: type = AtariR2d1Model, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
