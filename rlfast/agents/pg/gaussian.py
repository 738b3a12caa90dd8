"""Gaussian (continuous-action) policy-gradient agents, including the Mujoco-style ones."""
from __future__ import annotations

from rlfast.agents.base import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.agents.pg.base import PgAgentBase, RecurrentPgAgentBase
from rlfast.distributions import DistInfoStd, Gaussian
from rlfast.models.pg import MujocoFfModel, MujocoLstmModel


class _GaussianMixin:
    """Diagonal Gaussian over a flat action vector; model outputs (mu, log_std).

    ``action_clip`` (default: the action space's bound, when symmetric and finite) clips sampled
    actions so environments with bounded actions always receive valid ones.
    """

    def initialize(self, env_spaces, share_memory=False, global_B=1, env_ranks=None):
        super().initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                           env_ranks=env_ranks)
        self.distribution = Gaussian(dim=self.env_model_kwargs["action_size"],
                                     clip=_symmetric_bound(env_spaces.action))

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        shape = tuple(env_spaces.action.shape)
        if len(shape) != 1:
            raise TypeError(f"Gaussian agents need a flat continuous action space; got shape {shape}")
        return dict(observation_shape=tuple(env_spaces.observation.shape), action_size=shape[0])

    def dist_info_from_outputs(self, mu, log_std):
        return DistInfoStd(mean=mu, log_std=log_std)

    def greedy_action(self, dist_info):
        mean = dist_info.mean
        clip = self.distribution.clip
        return mean if clip is None else mean.clamp(-clip, clip)


def _symmetric_bound(space):
    import numpy as np
    high, low = getattr(space, "high", None), getattr(space, "low", None)
    if high is None or low is None:
        return None
    high, low = np.asarray(high, dtype=np.float64), np.asarray(low, dtype=np.float64)
    if not (np.all(np.isfinite(high)) and np.allclose(high, -low) and np.allclose(high, high.flat[0])):
        return None
    return float(high.flat[0])


class GaussianPgAgent(_GaussianMixin, PgAgentBase):
    """Feedforward Gaussian actor-critic agent."""


class RecurrentGaussianPgAgentBase(_GaussianMixin, RecurrentPgAgentBase):
    """Recurrent Gaussian actor-critic agent without the recurrent-state mixin."""


class RecurrentGaussianPgAgent(RecurrentAgentMixin, RecurrentGaussianPgAgentBase):
    """Recurrent Gaussian actor-critic agent."""


class AlternatingRecurrentGaussianPgAgent(AlternatingRecurrentAgentMixin,
                                          RecurrentGaussianPgAgentBase):
    """Recurrent Gaussian agent for alternating samplers (two recurrent states)."""


class MujocoFfAgent(GaussianPgAgent):
    """Gaussian agent with ``MujocoFfModel`` (MLP mean, learned log-std, MLP value)."""

    def __init__(self, ModelCls=MujocoFfModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)


class MujocoLstmAgent(RecurrentGaussianPgAgent):
    """Recurrent Gaussian agent with ``MujocoLstmModel``."""

    def __init__(self, ModelCls=MujocoLstmModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
