"""Advantage Actor-Critic (synchronous): one gradient step per batch."""
from __future__ import annotations

from typing import Any

import torch

from rlfast.algos.graph_step import check_compile
from rlfast.algos.pg.base import (LossInfo, OptInfo, PolicyGradientAlgo, approx_kl,
                                  pg_hyperparameters)
from rlfast.utils.distributed import pooled_valid_mean, rank_loss_count


class A2C(PolicyGradientAlgo):
    """A2C: ``loss = -E[log pi(a|s) A] + c_v E[0.5 (V(s) - R)^2] - c_H E[H(pi(.|s))]``.

    One gradient step on the whole ``[T, B]`` batch per iteration, with returns and
    advantages from :meth:`process_returns`. ``compile=True`` runs the step as a
    :class:`~rlfast.algos.graph_step.GraphStep`: the loss under ``torch.compile`` and, on
    CUDA, the whole step in one CUDA graph. ``value_norm``, ``value_loss`` and
    ``huber_delta``: the value normalization and Huber value loss (off by default; see
    :class:`PolicyGradientAlgo`). The other arguments are those of
    :class:`PolicyGradientAlgo`.
    """

    def __init__(self, discount: float = 0.99, learning_rate: float = 0.001,
                 value_loss_coeff: float = 0.5, entropy_loss_coeff: float = 0.01,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 clip_grad_norm: float = 1.0, initial_optim_state_dict: dict | None = None,
                 gae_lambda: float = 1, normalize_advantage: bool = False,
                 bootstrap_timelimit: bool = True,
                 normalize_reward: bool = False, compile: bool = False,
                 value_norm: bool = False, value_loss: str = "mse", huber_delta: float = 10.0):
        super().__init__(**pg_hyperparameters(locals()))
        self.compile = check_compile(compile, "A2C")

    def optimize_agent(self, itr: int, samples: Any = None,
                       sampler_itr: int | None = None) -> OptInfo:
        """One gradient step on the whole batch; returns its loss, gradient norm and
        diagnostics, and the critic's explained variance.

        The step is guarded like every other (:meth:`~PolicyGradientAlgo.gradient_step`):
        its diagnostics and the explained variance come back in the call's one host read,
        before the step with an optimizer that cannot refuse it on the device, after it with
        one that can.
        """
        batch = self.loss_batch(samples, flatten=False)
        step = self.gradient_step(batch, None)
        counter_at_begin = self.update_counter
        step(itr, None)
        self.update_counter += 1
        records = self.guarded_steps.end_counted(itr, self, counter_at_begin)
        return self.opt_info(records)

    def loss(self, agent_inputs: Any, action: torch.Tensor, return_: torch.Tensor,
             advantage: torch.Tensor, valid: torch.Tensor, old_dist_info: Any,
             init_rnn_state: Any = None,
             reset: torch.Tensor | None = None) -> tuple[torch.Tensor, LossInfo]:
        """The A2C loss of a batch and its detached terms.

        The arguments are the fields of :class:`~rlfast.algos.pg.base.LossInputs` on the
        agent's device (:meth:`~PolicyGradientAlgo.loss_batch`); recurrent agents also pass
        the state the sampler had at the batch start (``init_rnn_state``, ``[N, B, H]``) and
        where episodes start (``reset``). ``approxKl`` compares the sampler's action
        distribution with the current one (A2C trains on fresh samples, so it is ~0 unless
        the observation normalization moved).
        """
        if init_rnn_state is not None:
            dist_info, value, _ = self.agent(*agent_inputs, init_rnn_state, reset)
        else:
            dist_info, value = self.agent(*agent_inputs)
        dist = self.agent.distribution
        # Policy loss: -E[log pi(a|s) * A]
        n = rank_loss_count(valid)  # under SyncRl: means over every rank's valid steps
        pi_loss = -pooled_valid_mean(dist.log_likelihood(action, dist_info) * advantage, valid, n)
        # Value loss: c_v * E[0.5 (V - R)^2] (or Huber; R normalized with value_norm)
        value_loss = self.value_loss_coeff * pooled_valid_mean(self.value_error(value, return_),
                                                               valid, n)
        # Entropy bonus: -c_H * E[H]
        entropy = pooled_valid_mean(dist.entropy(dist_info), valid, n)
        loss = pi_loss + value_loss - self.entropy_loss_coeff * entropy
        with torch.no_grad():
            ratio = dist.likelihood_ratio(action, old_dist_info=old_dist_info,
                                          new_dist_info=dist_info)
            info = LossInfo(piLoss=pi_loss.detach(), valueLoss=value_loss.detach(),
                            entropy=entropy.detach(),
                            perplexity=dist.mean_perplexity(dist_info, valid).detach(),
                            approxKl=approx_kl(ratio, valid))
        return loss, info
