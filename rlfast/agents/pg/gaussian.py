"""Gaussian (continuous-action) policy-gradient agents, including the Mujoco-style ones.

``GaussianPgAgent`` and its recurrent variants take any suitable ``ModelCls``; the Mujoco
agents are the same agents with ``MujocoFfModel`` / ``MujocoLstmModel`` as defaults.
"""
from __future__ import annotations

from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import GaussianPolicy
from rlfast.models.pg import MujocoFfModel, MujocoLstmModel

__all__ = ["GaussianPgAgent", "RecurrentGaussianPgAgent", "AlternatingRecurrentGaussianPgAgent",
           "MujocoFfAgent", "MujocoLstmAgent"]


class GaussianPgAgent(PgAgent):
    """Feedforward Gaussian actor-critic agent."""

    policy = GaussianPolicy()


class RecurrentGaussianPgAgent(RecurrentAgentMixin, PgAgent):
    """Recurrent Gaussian actor-critic agent."""

    policy = GaussianPolicy()


class AlternatingRecurrentGaussianPgAgent(AlternatingRecurrentAgentMixin, PgAgent):
    """Recurrent Gaussian agent for alternating samplers (two recurrent states)."""

    policy = GaussianPolicy()


class MujocoFfAgent(PgAgent):
    """Gaussian agent with ``MujocoFfModel`` (MLP mean, learned log-std, MLP value)."""

    policy = GaussianPolicy()

    def __init__(self, ModelCls: type = MujocoFfModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class MujocoLstmAgent(RecurrentAgentMixin, PgAgent):
    """Recurrent Gaussian agent with ``MujocoLstmModel``."""

    policy = GaussianPolicy()

    def __init__(self, ModelCls: type = MujocoLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
