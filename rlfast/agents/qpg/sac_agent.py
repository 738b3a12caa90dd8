"""SAC agent: a tanh-squashed Gaussian policy and twin critics (one two-member ensemble)."""
from __future__ import annotations

import math

import torch

from rlfast.agents.base import AgentStep, BaseAgent
from rlfast.agents.qpg.base import QpgAgentBase
from rlfast.distributions import DistInfoStd, Gaussian
from rlfast.models.qpg import PiMlpModel, QofMuMlpModel
from rlfast.utils.checks import check_fraction

__all__ = ["SacAgent"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SacAgent(QpgAgentBase, BaseAgent):
    """Soft actor-critic agent. Normalized actions are ``action_squash * tanh(x)`` with
    ``x ~ N(mean(s), std(s))`` (log-std clamped to [-20, 2]); ``step`` scales them to the
    action bounds. Eval mode acts with ``action_squash * tanh(mean)``. Until learning starts
    the pre-squash std is ``pretrain_std`` (near-uniform exploration with the default 0.75
    around an untrained mean of about 0). The critic has a target copy; the policy does not.
    """

    def __init__(self, ModelCls: type = PiMlpModel, QModelCls: type = QofMuMlpModel,
                 model_kwargs: dict | None = None, q_model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None, action_squash: float = 1.0,
                 pretrain_std: float | None = 0.75):
        model_kwargs = {"hidden_sizes": [256, 256], **(model_kwargs or {})}
        q_model_kwargs = {"hidden_sizes": [256, 256], **(q_model_kwargs or {})}
        super().__init__(ModelCls, QModelCls, model_kwargs, q_model_kwargs,
                         initial_model_state_dict, pretrain_std)
        # Normalized action units: the agent scales to the env bounds.
        self.action_squash = check_fraction(action_squash, "action_squash", allow_zero=False,
                                            owner=type(self).__name__)

    def q_model_extra_kwargs(self) -> dict:
        """Twin critics: one two-member ensemble."""
        return dict(ensemble_size=2)

    def make_distribution(self) -> None:
        """The squashed Gaussian (log-std clamped), and the pretraining one when configured."""
        dim = self.env_model_kwargs["action_size"]
        self.distribution = Gaussian(dim=dim, squash=self.action_squash,
                                     min_std=math.exp(LOG_STD_MIN), max_std=math.exp(LOG_STD_MAX))
        if self.pretrain_std is not None:
            self._pretrain_distribution = Gaussian(dim=dim, std=self.pretrain_std,
                                                   squash=self.action_squash)

    # ---- values for the algorithm ----------------------------------------------------------
    def pi(self, observation, prev_action, prev_reward, reparameterize: bool = True):
        """``(action, log_pi, dist_info)``: a squashed sample (normalized units) and its
        log-likelihood. Reparameterized, both carry gradient into the policy; otherwise the
        action is a constant sample and only ``log_pi`` does (score-function gradients)."""
        mean, log_std = self.model(*self.to_model_inputs(observation, prev_action, prev_reward))
        dist_info = DistInfoStd(mean=mean, log_std=log_std)
        if reparameterize:
            action, log_pi = self.distribution.sample_loglikelihood(dist_info)
            return action, log_pi, dist_info
        with torch.no_grad():
            std = log_std.clamp(LOG_STD_MIN, LOG_STD_MAX).exp()
            x = mean + std * torch.randn_like(mean)
        log_pi = self.distribution.log_likelihood(x, dist_info)
        return self.action_squash * torch.tanh(x), log_pi, dist_info

    def q(self, observation, prev_action, prev_reward, action, detach_params: bool = False):
        """Twin ``Q(s, a)`` ``[2, B]`` for normalized actions; ``detach_params=True`` lets
        gradient reach ``action`` only (the policy loss)."""
        observation, prev_action, prev_reward, action = self.to_model_inputs(
            observation, prev_action, prev_reward, action)
        return self.q_model(observation, prev_action, prev_reward, action,
                            detach_params=detach_params)

    def target_q(self, observation, prev_action, prev_reward, action) -> torch.Tensor:
        """Twin target ``Q(s', a')`` ``[2, B]``, without gradient."""
        with torch.no_grad():
            return self.target_q_model(*self.to_model_inputs(observation, prev_action,
                                                             prev_reward, action))

    # ---- sampling ------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """A squashed Gaussian sample in sample mode (``pretrain_std`` before learning starts),
        ``action_squash * tanh(mean)`` otherwise; scaled to the action bounds, on the CPU."""
        mean, log_std = self.model(*self.to_model_inputs(observation, prev_action, prev_reward))
        mu = self.action_squash * torch.tanh(mean)
        if self._mode != "sample":
            action = mu
        elif self.pretraining:
            action = self._pretrain_distribution.sample(DistInfoStd(mean=mean, log_std=log_std))
        else:
            action = self.distribution.sample(DistInfoStd(mean=mean, log_std=log_std))
        return self._step_output(action, mu)
