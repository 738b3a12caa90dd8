"""Policy-gradient agents: one ``PgAgent`` with a distribution strategy per action kind."""
from rlfast.agents.pg.atari import AlternatingAtariLstmAgent, AtariFfAgent, AtariLstmAgent
from rlfast.agents.pg.base import AgentInfo, AgentInfoRnn, PgAgent
from rlfast.agents.pg.categorical import (AlternatingRecurrentCategoricalPgAgent, CategoricalPgAgent,
                                          RecurrentCategoricalPgAgent)
from rlfast.agents.pg.gaussian import (AlternatingRecurrentGaussianPgAgent, GaussianPgAgent, MujocoFfAgent,
                                       MujocoLstmAgent, RecurrentGaussianPgAgent)
from rlfast.agents.pg.policies import CategoricalPolicy, GaussianPolicy

__all__ = [
    "PgAgent", "CategoricalPolicy", "GaussianPolicy", "AgentInfo", "AgentInfoRnn",
    "CategoricalPgAgent", "RecurrentCategoricalPgAgent", "AlternatingRecurrentCategoricalPgAgent",
    "GaussianPgAgent", "RecurrentGaussianPgAgent", "AlternatingRecurrentGaussianPgAgent",
    "MujocoFfAgent", "MujocoLstmAgent", "AtariFfAgent", "AtariLstmAgent", "AlternatingAtariLstmAgent",
]
