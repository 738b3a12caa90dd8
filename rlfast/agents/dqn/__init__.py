"""DQN-family agents: epsilon-greedy (optionally noisy-net) Q agents with target networks.

``agent_info`` layouts: ``DqnAgent`` -> ``AgentInfo(q)``, ``CatDqnAgent`` -> ``CatAgentInfo(p)``
(its module calls it ``AgentInfo``), ``R2d1Agent`` -> ``AgentInfoRnn(q, prev_rnn_state)``.
"""
from rlfast.agents.dqn.atari import (AlternatingAtariR2d1Agent, AtariCatDqnAgent, AtariDqnAgent,
                                     AtariR2d1Agent)
from rlfast.agents.dqn.catdqn_agent import AgentInfo as CatAgentInfo
from rlfast.agents.dqn.catdqn_agent import CatDqnAgent, CategoricalQPolicy
from rlfast.agents.dqn.dqn_agent import AgentInfo, AgentInfoRnn, DqnAgent, QValuePolicy
from rlfast.agents.dqn.epsilon_greedy import EpsilonGreedyAgentMixin
from rlfast.agents.dqn.r2d1_agent import AlternatingR2d1Agent, R2d1Agent

__all__ = [
    "EpsilonGreedyAgentMixin", "DqnAgent", "CatDqnAgent", "R2d1Agent", "AlternatingR2d1Agent",
    "AtariDqnAgent", "AtariCatDqnAgent", "AtariR2d1Agent", "AlternatingAtariR2d1Agent",
    "QValuePolicy", "CategoricalQPolicy", "AgentInfo", "CatAgentInfo", "AgentInfoRnn",
]
