"""Advantage Actor-Critic (synchronous): one gradient step per batch."""
from __future__ import annotations

import torch

from rlfast.agents.base import AgentInputs
from rlfast.algos.pg.base import OptInfo, PolicyGradientAlgo
from rlfast.utils.buffer import buffer_func, buffer_to
from rlfast.utils.tensor import valid_mean


class A2C(PolicyGradientAlgo):
    """A2C: ``loss = -E[log pi(a|s) A] + c_v E[0.5 (V(s) - R)^2] - c_H E[H(pi(.|s))]``."""

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 0.5, entropy_loss_coeff: float = 0.01,
                 OptimCls=torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1.0, initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, normalize_advantage: bool = False,
                 bootstrap_timelimit: bool = True):
        self.discount = discount
        self.learning_rate = learning_rate
        self.value_loss_coeff = value_loss_coeff
        self.entropy_loss_coeff = entropy_loss_coeff
        self.OptimCls = OptimCls
        self.optim_kwargs = dict(optim_kwargs or {})
        self.clip_grad_norm = clip_grad_norm
        self.initial_optim_state_dict = initial_optim_state_dict
        self.gae_lambda = gae_lambda
        self.normalize_advantage = normalize_advantage
        self.bootstrap_timelimit = bootstrap_timelimit

    def optimize_agent(self, itr: int, samples=None, sampler_itr=None) -> OptInfo:
        if hasattr(self.agent, "update_obs_rms"):
            self.agent.update_obs_rms(samples.env.observation)
        loss, entropy, perplexity = self.loss(samples)
        grad_norm = self._grad_step(loss)
        return OptInfo(loss=[loss.item()], gradNorm=[grad_norm], entropy=[entropy.item()],
                       perplexity=[perplexity.item()])

    def loss(self, samples):
        agent_inputs = AgentInputs(observation=samples.env.observation,
                                   prev_action=samples.agent.prev_action,
                                   prev_reward=samples.env.prev_reward)
        agent_inputs = buffer_to(agent_inputs, device=self.agent.device)
        if self.agent.recurrent:
            init_rnn_state = samples.agent.agent_info.prev_rnn_state[0]  # [B, N, H]
            init_rnn_state = buffer_func(init_rnn_state, lambda s: s.transpose(0, 1).contiguous())
            dist_info, value, _ = self.agent(*agent_inputs, init_rnn_state)
        else:
            dist_info, value = self.agent(*agent_inputs)
        return_, advantage, valid = buffer_to(self.process_returns(samples), self.agent.device)
        dist = self.agent.distribution
        action = samples.agent.action.to(self.agent.device)
        # Policy loss: -E[log pi(a|s) * A]
        pi_loss = -valid_mean(dist.log_likelihood(action, dist_info) * advantage, valid)
        # Value loss: c_v * E[0.5 (V - R)^2]
        value_loss = self.value_loss_coeff * valid_mean(0.5 * (value - return_) ** 2, valid)
        # Entropy bonus: -c_H * E[H]
        entropy = dist.mean_entropy(dist_info, valid)
        loss = pi_loss + value_loss - self.entropy_loss_coeff * entropy
        return loss, entropy.detach(), dist.mean_perplexity(dist_info, valid).detach()
