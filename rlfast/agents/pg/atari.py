"""Categorical policy-gradient agents for Atari, with the image models as defaults."""
from __future__ import annotations

from rlfast.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent,
                                          CategoricalPgAgent, RecurrentCategoricalPgAgent)
from rlfast.models.pg import AtariFfModel, AtariLstmModel

__all__ = ["AtariMixin", "AtariFfAgent", "AtariLstmAgent", "AlternatingAtariLstmAgent"]


class AtariMixin:
    """Gives the model the image shape and the number of actions, under the Atari models' names.

    Put it before a categorical agent: ``class MyAgent(AtariMixin, CategoricalPgAgent)``.
    The categorical agent's checks still apply (the action space must be scalar discrete).
    """

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(image_shape=observation shape, output_size=number of actions)``."""
        categorical_kwargs = super().make_env_to_model_kwargs(env_spaces)
        return dict(image_shape=categorical_kwargs["observation_shape"],
                    output_size=categorical_kwargs["action_size"])


class AtariFfAgent(AtariMixin, CategoricalPgAgent):
    """Feedforward categorical agent for Atari (default model: ``AtariFfModel``)."""

    def __init__(self, ModelCls: type = AtariFfModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariLstmAgent(AtariMixin, RecurrentCategoricalPgAgent):
    """Recurrent categorical agent for Atari (default model: ``AtariLstmModel``)."""

    def __init__(self, ModelCls: type = AtariLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingAtariLstmAgent(AtariMixin, AlternatingRecurrentCategoricalPgAgent):
    """Recurrent Atari agent for alternating samplers (two recurrent states)."""

    def __init__(self, ModelCls: type = AtariLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
