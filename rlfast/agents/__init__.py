"""Agents: the sampler <-> model <-> algorithm interface."""
from rlfast.agents.base import (AgentInputs, AgentStep, AlternatingRecurrentAgentMixin, BaseAgent,
                                RandomAgent, RecurrentAgentMixin)
from rlfast.agents.dqn import (AtariCatDqnAgent, AtariDqnAgent, AtariR2d1Agent, CatDqnAgent,
                               DqnAgent, EpsilonGreedyAgentMixin, R2d1Agent)
from rlfast.agents.pg.atari import AlternatingAtariLstmAgent, AtariFfAgent, AtariLstmAgent
from rlfast.agents.pg.base import AgentInfo, AgentInfoRnn
from rlfast.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent,
                                          CategoricalPgAgent, RecurrentCategoricalPgAgent)
from rlfast.agents.qpg import DdpgAgent, SacAgent, Td3Agent
from rlfast.agents.pg.gaussian import (AlternatingRecurrentGaussianPgAgent, GaussianPgAgent,
                                       MujocoFfAgent, MujocoLstmAgent, RecurrentGaussianPgAgent)

__all__ = [
    "AgentInputs", "AgentStep", "AgentInfo", "AgentInfoRnn", "BaseAgent", "RandomAgent",
    "RecurrentAgentMixin", "AlternatingRecurrentAgentMixin", "CategoricalPgAgent",
    "RecurrentCategoricalPgAgent", "AlternatingRecurrentCategoricalPgAgent", "GaussianPgAgent",
    "RecurrentGaussianPgAgent", "AlternatingRecurrentGaussianPgAgent", "MujocoFfAgent",
    "MujocoLstmAgent", "AtariFfAgent", "AtariLstmAgent", "AlternatingAtariLstmAgent",
    "EpsilonGreedyAgentMixin", "DqnAgent", "CatDqnAgent", "R2d1Agent", "AtariDqnAgent",
    "AtariCatDqnAgent", "AtariR2d1Agent", "DdpgAgent", "Td3Agent", "SacAgent",
]
