"""Categorical (discrete-action) policy-gradient agents."""
from __future__ import annotations

from rlfast.agents.base import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.pg.base import PgAgentBase, RecurrentPgAgentBase
from rlfast.distributions import Categorical, DistInfo
from rlfast.models.pg import CategoricalPgFfModel, CategoricalPgLstmModel


class _CategoricalMixin:
    """Categorical distribution over ``env_spaces.action.n`` actions; model outputs probs."""

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        super().initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                           env_ranks=env_ranks)
        self.distribution = Categorical(dim=int(env_spaces.action.n))

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        action_space = env_spaces.action
        if getattr(action_space, "n", None) is None or tuple(action_space.shape) != ():
            raise TypeError("Categorical agents need a scalar discrete action space; got "
                            f"{action_space!r}. Use a Gaussian agent for continuous actions.")
        return dict(observation_shape=tuple(env_spaces.observation.shape),
                    action_size=int(action_space.n))

    def dist_info_from_outputs(self, pi):
        return DistInfo(prob=pi)

    def greedy_action(self, dist_info):
        return dist_info.prob.argmax(dim=-1)


class CategoricalPgAgent(_CategoricalMixin, PgAgentBase):
    """Feedforward categorical actor-critic agent (default model: ``CategoricalPgFfModel``)."""

    def __init__(self, ModelCls=CategoricalPgFfModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class _RecurrentCategoricalBase(_CategoricalMixin, RecurrentPgAgentBase):
    def model_prev_action(self, prev_action):
        return self.distribution.to_onehot(prev_action)


class RecurrentCategoricalPgAgent(RecurrentAgentMixin, _RecurrentCategoricalBase):
    """Recurrent categorical actor-critic agent (default model: ``CategoricalPgLstmModel``)."""

    def __init__(self, ModelCls=CategoricalPgLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingRecurrentCategoricalPgAgent(AlternatingRecurrentAgentMixin,
                                             _RecurrentCategoricalBase):
    """Recurrent categorical agent for alternating samplers (two recurrent states)."""

    def __init__(self, ModelCls=CategoricalPgLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
