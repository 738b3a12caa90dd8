"""Policy-gradient agents: one ``PgAgent`` with a distribution strategy per action kind
(categorical, multi-categorical, Gaussian)."""
from rlfast.agents.pg.atari import AlternatingAtariLstmAgent, AtariFfAgent, AtariLstmAgent
from rlfast.agents.pg.base import AgentInfo, AgentInfoRnn, PgAgent
from rlfast.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent,
                                          CategoricalPgAgent, RecurrentCategoricalPgAgent)
from rlfast.agents.pg.gaussian import (AlternatingRecurrentGaussianPgAgent, GaussianPgAgent,
                                       MujocoFfAgent, MujocoLstmAgent, RecurrentGaussianPgAgent)
from rlfast.agents.pg.multi_categorical import (AlternatingRecurrentMultiCategoricalPgAgent,
                                                MultiCategoricalPgAgent,
                                                RecurrentMultiCategoricalPgAgent)
from rlfast.agents.pg.multiagent import MultiAgentPgAgent
from rlfast.agents.pg.policies import CategoricalPolicy, GaussianPolicy, MultiCategoricalPolicy

__all__ = [
    "PgAgent", "CategoricalPolicy", "MultiCategoricalPolicy", "GaussianPolicy", "AgentInfo",
    "AgentInfoRnn", "MultiCategoricalPgAgent", "RecurrentMultiCategoricalPgAgent",
    "AlternatingRecurrentMultiCategoricalPgAgent",
    "CategoricalPgAgent", "RecurrentCategoricalPgAgent", "AlternatingRecurrentCategoricalPgAgent",
    "GaussianPgAgent", "RecurrentGaussianPgAgent", "AlternatingRecurrentGaussianPgAgent",
    "MujocoFfAgent", "MujocoLstmAgent", "AtariFfAgent", "AtariLstmAgent",
    "AlternatingAtariLstmAgent",
    "MultiAgentPgAgent",
]
