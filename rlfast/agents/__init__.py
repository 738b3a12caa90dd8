"""Agents: the sampler <-> model <-> algorithm interface."""
from rlfast.agents.base import (AgentInputs, AgentStep, AlternatingRecurrentAgentMixin, BaseAgent,
                                RandomAgent, RecurrentAgentMixin)
from rlfast.agents.dqn import (AlternatingAtariR2d1Agent, AlternatingR2d1Agent, AtariCatDqnAgent,
                               AtariDqnAgent, AtariR2d1Agent, CatDqnAgent, DqnAgent,
                               EpsilonGreedyAgentMixin, R2d1Agent)
from rlfast.agents.pg import (AgentInfo, AgentInfoRnn, AlternatingAtariLstmAgent,
                              AlternatingRecurrentCategoricalPgAgent,
                              AlternatingRecurrentGaussianPgAgent,
                              AlternatingRecurrentMultiCategoricalPgAgent, AtariFfAgent,
                              AtariLstmAgent, CategoricalPgAgent, GaussianPgAgent, MujocoFfAgent,
                              MujocoLstmAgent, MultiAgentPgAgent, MultiCategoricalPgAgent,
                              RecurrentCategoricalPgAgent,
                              RecurrentGaussianPgAgent, RecurrentMultiCategoricalPgAgent)
from rlfast.agents.qpg import DdpgAgent, SacAgent, Td3Agent

__all__ = [
    "AgentInputs", "AgentStep", "AgentInfo", "AgentInfoRnn", "BaseAgent", "RandomAgent",
    "RecurrentAgentMixin", "AlternatingRecurrentAgentMixin", "CategoricalPgAgent",
    "RecurrentCategoricalPgAgent", "AlternatingRecurrentCategoricalPgAgent", "GaussianPgAgent",
    "RecurrentGaussianPgAgent", "AlternatingRecurrentGaussianPgAgent", "MultiCategoricalPgAgent",
    "RecurrentMultiCategoricalPgAgent", "AlternatingRecurrentMultiCategoricalPgAgent",
    "MujocoFfAgent",
    "MujocoLstmAgent", "AtariFfAgent", "AtariLstmAgent", "AlternatingAtariLstmAgent",
    "EpsilonGreedyAgentMixin", "DqnAgent", "CatDqnAgent", "R2d1Agent", "AlternatingR2d1Agent",
    "AtariDqnAgent", "AtariCatDqnAgent", "AtariR2d1Agent", "AlternatingAtariR2d1Agent",
    "DdpgAgent", "Td3Agent", "SacAgent", "MultiAgentPgAgent",
]
