"""DQN-family agents: epsilon-greedy (optionally noisy-net) Q agents with target networks.

``agent_info`` layouts: ``DqnAgent`` -> ``AgentInfo(q)``, ``CatDqnAgent`` -> ``CatAgentInfo(p)``
(its module calls it ``AgentInfo``), ``R2d1Agent`` -> ``AgentInfoRnn(q, prev_rnn_state)``.
"""
from rlfast.agents.dqn.atari import AtariCatDqnAgent, AtariDqnAgent, AtariDqnAgentMixin, AtariR2d1Agent
from rlfast.agents.dqn.catdqn_agent import AgentInfo as CatAgentInfo
from rlfast.agents.dqn.catdqn_agent import CatDqnAgent
from rlfast.agents.dqn.dqn_agent import AgentInfo, DqnAgent
from rlfast.agents.dqn.epsilon_greedy import EpsilonGreedyAgentMixin
from rlfast.agents.dqn.r2d1_agent import AgentInfoRnn, R2d1Agent, R2d1AgentBase

__all__ = [
    "EpsilonGreedyAgentMixin", "DqnAgent", "CatDqnAgent", "R2d1AgentBase", "R2d1Agent",
    "AtariDqnAgentMixin", "AtariDqnAgent", "AtariCatDqnAgent", "AtariR2d1Agent",
    "AgentInfo", "CatAgentInfo", "AgentInfoRnn",
]
