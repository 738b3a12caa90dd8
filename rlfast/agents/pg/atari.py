"""Categorical policy-gradient agents for Atari, with the image models as defaults.

They are the categorical agents with a ``CategoricalPolicy(image_model=True)``, which names the
model's arguments as the Atari models do: ``image_shape`` and ``output_size``.
"""
from __future__ import annotations

from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import CategoricalPolicy
from rlfast.models.pg import AtariFfModel, AtariLstmModel

__all__ = ["AtariFfAgent", "AtariLstmAgent", "AlternatingAtariLstmAgent"]


class AtariFfAgent(PgAgent):
    """Feedforward categorical agent for Atari (default model: ``AtariFfModel``)."""

    policy = CategoricalPolicy(image_model=True)

    def __init__(self, ModelCls: type = AtariFfModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AtariLstmAgent(RecurrentAgentMixin, PgAgent):
    """Recurrent categorical agent for Atari (default model: ``AtariLstmModel``)."""

    policy = CategoricalPolicy(image_model=True)

    def __init__(self, ModelCls: type = AtariLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingAtariLstmAgent(AlternatingRecurrentAgentMixin, PgAgent):
    """Recurrent Atari agent for alternating samplers (two recurrent states)."""

    policy = CategoricalPolicy(image_model=True)

    def __init__(self, ModelCls: type = AtariLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
