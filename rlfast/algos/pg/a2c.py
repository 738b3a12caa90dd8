"""Advantage Actor-Critic (synchronous): one gradient step per batch."""
from __future__ import annotations

from typing import Any

import torch

from rlfast.agents.base import AgentInputs
from rlfast.algos.graph_step import check_compile
from rlfast.algos.pg.base import (LossInfo, OptInfo, PolicyGradientAlgo, approx_kl,
                                  diagnostic_row, explained_variance_tensor,
                                  pg_hyperparameters)
from rlfast.algos.utils import episode_starts
from rlfast.utils.buffer import buffer_func, buffer_to
from rlfast.utils.distributed import pooled_valid_mean, rank_loss_count


class A2C(PolicyGradientAlgo):
    """A2C: ``loss = -E[log pi(a|s) A] + c_v E[0.5 (V(s) - R)^2] - c_H E[H(pi(.|s))]``.

    One gradient step on the whole ``[T, B]`` batch per iteration, with returns and
    advantages from :meth:`process_returns`. ``compile=True`` runs the loss under
    ``torch.compile``. The other arguments are those of :class:`PolicyGradientAlgo`.
    """

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 0.5, entropy_loss_coeff: float = 0.01,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1.0, initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, normalize_advantage: bool = False,
                 bootstrap_timelimit: bool = True,
                 normalize_reward: bool = False, compile: bool = False):
        super().__init__(**pg_hyperparameters(locals()))
        self.compile = check_compile(compile, "A2C")

    def optimize_agent(self, itr: int, samples: Any = None,
                       sampler_itr: int | None = None) -> OptInfo:
        """One gradient step on the batch; returns its loss, gradient norm and diagnostics.

        The observation statistics (if the model normalizes) are updated from the batch
        first, as the sampler's agent will use them next. The loss, gradient norm and
        diagnostics are read on the host once, together, between the backward pass and the
        optimizer step: the finite check needs them there, and it is the call's only host
        synchronisation, whatever the optimizer.
        """
        self.agent.update_obs_rms(samples.env.observation)
        return_, advantage, valid = buffer_to(self.process_returns(samples), self.agent.device)
        loss, info = self.compiled_loss(samples, return_, advantage, valid)
        grad_norm = self._clip_gradients(loss)
        value = samples.agent.agent_info.value
        values = diagnostic_row(loss, grad_norm, info.entropy, info.perplexity, info.approxKl,
                                explained_variance_tensor(return_, value, valid)).tolist()
        self.check_finite(itr, {"loss": values[0], "gradNorm": values[1]})
        self.optimizer.step()
        self.update_counter += 1
        return OptInfo(loss=[values[0]], gradNorm=[values[1]], entropy=[values[2]],
                       perplexity=[values[3]], approxKl=[values[4]],
                       explainedVariance=[values[5]])

    def loss(self, samples: Any, return_: torch.Tensor, advantage: torch.Tensor,
             valid: torch.Tensor) -> tuple[torch.Tensor, LossInfo]:
        """The A2C loss of a batch and its detached terms.

        The agent is evaluated on the whole batch (recurrent agents from the state the
        sampler had at its start); ``return_``, ``advantage`` and ``valid`` are
        :meth:`process_returns`' output on the agent's device. ``approxKl`` compares the
        sampler's action distribution with the current one (A2C trains on fresh samples, so
        it is ~0 unless the observation normalization moved).
        """
        agent_inputs = AgentInputs(observation=samples.env.observation,
                                   prev_action=samples.agent.prev_action,
                                   prev_reward=samples.env.prev_reward)
        agent_inputs = buffer_to(agent_inputs, device=self.agent.device)
        if self.agent.recurrent:
            init_rnn_state = samples.agent.agent_info.prev_rnn_state[0]  # [B, N, H]
            init_rnn_state = buffer_func(init_rnn_state, lambda s: s.transpose(0, 1).contiguous())
            reset = episode_starts(samples.env.done).to(self.agent.device)
            dist_info, value, _ = self.agent(*agent_inputs, init_rnn_state, reset)
        else:
            dist_info, value = self.agent(*agent_inputs)
        dist = self.agent.distribution
        action = samples.agent.action.to(self.agent.device)
        # Policy loss: -E[log pi(a|s) * A]
        n = rank_loss_count(valid)  # under SyncRl: means over every rank's valid steps
        pi_loss = -pooled_valid_mean(dist.log_likelihood(action, dist_info) * advantage, valid, n)
        # Value loss: c_v * E[0.5 (V - R)^2]
        value_loss = self.value_loss_coeff * pooled_valid_mean(0.5 * (value - return_) ** 2,
                                                               valid, n)
        # Entropy bonus: -c_H * E[H]
        entropy = pooled_valid_mean(dist.entropy(dist_info), valid, n)
        loss = pi_loss + value_loss - self.entropy_loss_coeff * entropy
        with torch.no_grad():
            old_dist_info = buffer_to(samples.agent.agent_info.dist_info, self.agent.device)
            ratio = dist.likelihood_ratio(action, old_dist_info=old_dist_info,
                                          new_dist_info=dist_info)
            info = LossInfo(piLoss=pi_loss.detach(), valueLoss=value_loss.detach(),
                            entropy=entropy.detach(),
                            perplexity=dist.mean_perplexity(dist_info, valid).detach(),
                            approxKl=approx_kl(ratio, valid))
        return loss, info
