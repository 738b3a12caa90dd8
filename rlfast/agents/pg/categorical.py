"""Categorical (discrete-action) policy-gradient agents."""
from __future__ import annotations

from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import CategoricalPolicy
from rlfast.models.pg import CategoricalPgFfModel, CategoricalPgLstmModel

__all__ = ["CategoricalPgAgent", "RecurrentCategoricalPgAgent",
           "AlternatingRecurrentCategoricalPgAgent"]


class CategoricalPgAgent(PgAgent):
    """Feedforward categorical actor-critic agent (default model: ``CategoricalPgFfModel``)."""

    policy = CategoricalPolicy()

    def __init__(self, ModelCls: type = CategoricalPgFfModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class RecurrentCategoricalPgAgent(RecurrentAgentMixin, PgAgent):
    """Recurrent categorical actor-critic agent (default model: ``CategoricalPgLstmModel``)."""

    policy = CategoricalPolicy()

    def __init__(self, ModelCls: type = CategoricalPgLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingRecurrentCategoricalPgAgent(AlternatingRecurrentAgentMixin, PgAgent):
    """Recurrent categorical agent for alternating samplers (two recurrent states)."""

    policy = CategoricalPolicy()

    def __init__(self, ModelCls: type = CategoricalPgLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
