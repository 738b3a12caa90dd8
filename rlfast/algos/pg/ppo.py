"""Proximal Policy Optimization: several epochs of clipped-ratio minibatch updates per batch."""
from __future__ import annotations

import torch

from rlfast.agents.base import AgentInputs
from rlfast.algos.pg.base import OptInfo, PolicyGradientAlgo
from rlfast.utils.buffer import buffer_func, buffer_to
from rlfast.utils.collections import namedarraytuple
from rlfast.utils.misc import iterate_mb_idxs
from rlfast.utils.tensor import valid_mean

LossInputs = namedarraytuple("LossInputs", ["agent_inputs", "action", "return_", "advantage",
                                           "valid", "old_dist_info"])


class PPO(PolicyGradientAlgo):
    """PPO with the clipped surrogate objective.

    Feedforward agents draw minibatches of single time steps from the flattened ``T*B`` batch;
    recurrent agents draw minibatches of whole environment columns (sequences of length T)
    starting from the recurrent state the sampler had. ``linear_lr_schedule`` anneals the
    learning rate linearly to zero over the run.
    """

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 1.0, entropy_loss_coeff: float = 0.01,
                 OptimCls=torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1.0, initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, minibatches: int = 4, epochs: int = 4,
                 ratio_clip: float = 0.1, linear_lr_schedule: bool = True,
                 normalize_advantage: bool = False, bootstrap_timelimit: bool = True):
        self.discount = discount
        self.learning_rate = learning_rate
        self.value_loss_coeff = value_loss_coeff
        self.entropy_loss_coeff = entropy_loss_coeff
        self.OptimCls = OptimCls
        self.optim_kwargs = dict(optim_kwargs or {})
        self.clip_grad_norm = clip_grad_norm
        self.initial_optim_state_dict = initial_optim_state_dict
        self.gae_lambda = gae_lambda
        self.minibatches = int(minibatches)
        self.epochs = int(epochs)
        self.ratio_clip = ratio_clip
        self.linear_lr_schedule = linear_lr_schedule
        self.normalize_advantage = normalize_advantage
        self.bootstrap_timelimit = bootstrap_timelimit
        if self.minibatches < 1 or self.epochs < 1:
            raise ValueError(f"minibatches and epochs must be >= 1; got {minibatches}, {epochs}")

    def initialize(self, *args, **kwargs):
        super().initialize(*args, **kwargs)
        self.lr_scheduler = None
        if self.linear_lr_schedule:
            n_itr = max(int(self.n_itr), 1)
            self.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(
                self.optimizer, lr_lambda=lambda itr: max(n_itr - itr, 0) / n_itr)

    def optimize_agent(self, itr: int, samples=None, sampler_itr=None) -> OptInfo:
        device = self.agent.device
        agent_inputs = AgentInputs(observation=samples.env.observation,
                                   prev_action=samples.agent.prev_action,
                                   prev_reward=samples.env.prev_reward)
        agent_inputs = buffer_to(agent_inputs, device=device)
        if hasattr(self.agent, "update_obs_rms"):
            self.agent.update_obs_rms(agent_inputs.observation)
        return_, advantage, valid = buffer_to(self.process_returns(samples), device)
        loss_inputs = LossInputs(agent_inputs=agent_inputs, action=samples.agent.action.to(device),
                                 return_=return_, advantage=advantage, valid=valid,
                                 old_dist_info=buffer_to(samples.agent.agent_info.dist_info, device))
        T, B = samples.env.reward.shape[:2]
        opt_info = OptInfo(loss=[], gradNorm=[], entropy=[], perplexity=[])
        if self.agent.recurrent:
            rnn = samples.agent.agent_info.prev_rnn_state[0]  # [B, N, H] at the batch start
            rnn = buffer_to(rnn, device)
            n_items = B
        else:
            # Flatten [T, B] -> [T*B] once, so minibatches are plain index selections.
            loss_inputs = buffer_func(loss_inputs, lambda x: x.reshape(T * B, *x.shape[2:]))
            n_items = T * B
        mb_size = max(n_items // self.minibatches, 1)
        for _ in range(self.epochs):
            for idxs in iterate_mb_idxs(n_items, mb_size, shuffle=True):
                idxs = torch.as_tensor(idxs, device=device)
                if self.agent.recurrent:
                    mb = loss_inputs[:, idxs]
                    init_rnn_state = buffer_func(rnn, lambda s: s[idxs].transpose(0, 1).contiguous())
                    loss, entropy, perplexity = self.loss(*mb, init_rnn_state=init_rnn_state)
                else:
                    loss, entropy, perplexity = self.loss(*loss_inputs[idxs])
                grad_norm = self._grad_step(loss)
                opt_info.loss.append(loss.item())
                opt_info.gradNorm.append(grad_norm)
                opt_info.entropy.append(entropy.item())
                opt_info.perplexity.append(perplexity.item())
        if self.lr_scheduler is not None:
            self.lr_scheduler.step()
        return opt_info

    def loss(self, agent_inputs, action, return_, advantage, valid, old_dist_info,
             init_rnn_state=None):
        if init_rnn_state is not None:
            dist_info, value, _ = self.agent(*agent_inputs, init_rnn_state)
        else:
            dist_info, value = self.agent(*agent_inputs)
        dist = self.agent.distribution
        # Clipped surrogate: -E[min(r A, clip(r, 1-eps, 1+eps) A)], r = pi(a|s) / pi_old(a|s)
        ratio = dist.likelihood_ratio(action, old_dist_info=old_dist_info, new_dist_info=dist_info)
        surrogate = ratio * advantage
        clipped = torch.clamp(ratio, 1.0 - self.ratio_clip, 1.0 + self.ratio_clip) * advantage
        pi_loss = -valid_mean(torch.min(surrogate, clipped), valid)
        # Value loss: c_v * E[0.5 (V(s) - R)^2]
        value_loss = self.value_loss_coeff * valid_mean(0.5 * (value - return_) ** 2, valid)
        # Entropy bonus: -c_H * E[H(pi(.|s))]
        entropy = dist.mean_entropy(dist_info, valid)
        loss = pi_loss + value_loss - self.entropy_loss_coeff * entropy
        return loss, entropy.detach(), dist.mean_perplexity(dist_info, valid).detach()
