"""Recurrent DQN agents for R2D1: epsilon-greedy on a recurrent Q-network's outputs.

They are ``DqnAgent`` with a recurrent mixin: the sampler-facing ``step`` carries the LSTM
state between steps and records the state *before* each step in ``agent_info.prev_rnn_state``
as ``[B, N, H]``; ``__call__(observation, prev_action, prev_reward, init_rnn_state) -> (q,
rnn_state)`` with gradient on the model's device, ``target(..., init_rnn_state)`` the same from
the target model without gradient.  Integer ``prev_action`` is one-hot encoded for the model (a
float ``prev_action`` is taken to be one-hot already); ``init_rnn_state`` is an ``RnnState`` of
``[N, B, H]`` tensors (``N = 1``), or None for zeros.
"""
from __future__ import annotations

from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.dqn.dqn_agent import AgentInfoRnn, DqnAgent
from rlfast.models.dqn import R2d1MlpModel

__all__ = ["R2d1Agent", "AlternatingR2d1Agent", "AgentInfoRnn"]


class R2d1Agent(RecurrentAgentMixin, DqnAgent):
    """R2D1 agent: recurrent epsilon-greedy Q agent that keeps its LSTM state between steps.

    Default model ``R2d1MlpModel``; ``AtariR2d1Agent`` uses ``AtariR2d1Model``.  ``reset()``
    clears the state, ``reset_one(idx)`` zeroes one environment's entry (when its episode ends).
    """

    def __init__(self, ModelCls: type = R2d1MlpModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class AlternatingR2d1Agent(AlternatingRecurrentAgentMixin, DqnAgent):
    """R2D1 agent for alternating samplers: one LSTM state per group of environments.

    Otherwise as ``R2d1Agent`` (epsilon schedule included: the mode switches reach
    ``EpsilonGreedyAgentMixin``).
    """

    def __init__(self, ModelCls: type = R2d1MlpModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
