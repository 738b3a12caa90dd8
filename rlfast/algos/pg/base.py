"""Policy-gradient base: optimizer construction and return / advantage processing."""
from __future__ import annotations

from collections import namedtuple

import torch

from rlfast.algos.base import RLAlgorithm
from rlfast.algos.utils import (discount_return, discount_return_tl,
                                generalized_advantage_estimation,
                                generalized_advantage_estimation_tl, valid_from_done)

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "entropy", "perplexity"])


class PolicyGradientAlgo(RLAlgorithm):
    """Shared by A2C and PPO: builds the optimizer and turns a batch into returns, advantages
    and a validity mask.

    Returns use plain discounting when ``gae_lambda == 1`` and GAE otherwise. When the env
    reports ``env_info.timeout`` and ``bootstrap_timelimit`` is on, episodes cut by a time
    limit bootstrap from the value estimate instead of being treated as terminal, and the cut
    step itself is masked out of the loss.
    """

    bootstrap_value = True
    opt_info_fields = tuple(OptInfo._fields)

    def initialize(self, agent, n_itr, batch_spec, mid_batch_reset=False, examples=None,
                   world_size=1, rank=0):
        self.agent = agent
        self.n_itr = n_itr
        self.batch_spec = batch_spec
        self.mid_batch_reset = mid_batch_reset
        self.world_size, self.rank = world_size, rank
        self.optimizer = self.OptimCls(agent.parameters(), lr=self.learning_rate,
                                       **self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.optimizer.load_state_dict(self.initial_optim_state_dict)

    def process_returns(self, samples):
        """(return_, advantage, valid) as float tensors shaped like the rewards ``[T, B]``."""
        reward = samples.env.reward
        done = samples.env.done.to(reward.dtype)
        value = samples.agent.agent_info.value.to(reward.dtype)
        bootstrap = samples.agent.bootstrap_value[0].to(reward.dtype)
        env_info = samples.env.env_info
        timeout = None
        if self.bootstrap_timelimit and env_info is not None and "timeout" in env_info:
            timeout = env_info.timeout.to(reward.dtype)
        if self.gae_lambda == 1:
            if timeout is None:
                return_ = discount_return(reward, done, bootstrap, self.discount)
            else:
                return_ = discount_return_tl(reward, done, bootstrap, self.discount, timeout, value)
            advantage = return_ - value
        elif timeout is None:
            advantage, return_ = generalized_advantage_estimation(
                reward, value, done, bootstrap, self.discount, self.gae_lambda)
        else:
            advantage, return_ = generalized_advantage_estimation_tl(
                reward, value, done, bootstrap, self.discount, self.gae_lambda, timeout)
        if not self.mid_batch_reset or self.agent.recurrent:
            valid = valid_from_done(done)  # nothing after the first done in each column
        else:
            valid = torch.ones_like(reward)
        if timeout is not None:
            valid = valid * (1 - timeout)
        if self.normalize_advantage:
            n = valid.sum().clamp(min=1)
            mean = (advantage * valid).sum() / n
            std = (((advantage - mean) ** 2 * valid).sum() / n).sqrt()
            advantage = (advantage - mean) / (std + 1e-6)
        return return_, advantage, valid

    def _grad_step(self, loss: torch.Tensor) -> float:
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.agent.parameters(), self.clip_grad_norm)
        self.optimizer.step()
        self.update_counter += 1
        return float(grad_norm)
