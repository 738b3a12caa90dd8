"""Policy-gradient agents for vectors of discrete actions (MultiDiscrete, MultiBinary).

They are the categorical agents' models with ``MultiCategoricalPolicy``: the model emits one
probability vector per action dimension and actions are sampled per dimension.
"""
from __future__ import annotations

from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import MultiCategoricalPolicy
from rlfast.models.pg import CategoricalPgFfModel, CategoricalPgLstmModel

__all__ = ["MultiCategoricalPgAgent", "RecurrentMultiCategoricalPgAgent",
           "AlternatingRecurrentMultiCategoricalPgAgent"]


class MultiCategoricalPgAgent(PgAgent):
    """Feedforward actor-critic agent for MultiDiscrete / MultiBinary actions (default model:
    ``CategoricalPgFfModel`` with ``action_nvec``, one softmax per action dimension)."""

    policy = MultiCategoricalPolicy()

    def __init__(self, ModelCls: type = CategoricalPgFfModel, **kwargs) -> None:
        super().__init__(ModelCls=ModelCls, **kwargs)


class RecurrentMultiCategoricalPgAgent(RecurrentAgentMixin, PgAgent):
    """Recurrent actor-critic agent for MultiDiscrete / MultiBinary actions (default model:
    ``CategoricalPgLstmModel``; the previous action enters as concatenated one-hots)."""

    policy = MultiCategoricalPolicy()

    def __init__(self, ModelCls: type = CategoricalPgLstmModel, **kwargs) -> None:
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingRecurrentMultiCategoricalPgAgent(AlternatingRecurrentAgentMixin, PgAgent):
    """Recurrent MultiDiscrete / MultiBinary agent for alternating samplers (two recurrent
    states)."""

    policy = MultiCategoricalPolicy()

    def __init__(self, ModelCls: type = CategoricalPgLstmModel, **kwargs) -> None:
        super().__init__(ModelCls=ModelCls, **kwargs)
