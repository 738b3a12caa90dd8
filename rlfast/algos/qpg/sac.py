"""Soft actor-critic with twin critics, a squashed Gaussian policy and automatic entropy
tuning, from replay."""
from __future__ import annotations

import math
from collections import namedtuple
from typing import Any

import torch

from rlfast.algos.qpg.base import QpgAlgoBase
from rlfast.utils.buffer import buffer_to
from rlfast.utils.checks import check_choice, check_int, check_positive

__all__ = ["SAC"]

OptInfo = namedtuple("OptInfo", ["piLoss", "qLoss", "alpha", "alphaLoss", "qMean", "logPi",
                                 "piGradNorm", "qGradNorm"])
_ACTION_PRIORS = ("uniform", "gaussian")
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class SAC(QpgAlgoBase):
    """Soft actor-critic (Haarnoja et al. 2018, with the learned temperature of the 2019
    version).

    Critics: ``y = reward_scale * R^(n) + f * (min_i Q_i,target(s', a') - alpha log pi(a'|s'))``
    with ``a' ~ pi(s')`` and ``f`` from :meth:`bootstrap_factor`; loss ``sum_i 0.5 (y - Q_i)^2``.
    Policy: ``alpha log pi(a|s) - min_i Q_i(s, a) - log prior(a)`` with ``a ~ pi(s)``
    reparameterized (``reparameterize=False``: score-function gradient instead). Temperature:
    ``alpha = fixed_alpha``, or learned with loss ``-log_alpha (log pi + target_entropy)``,
    ``target_entropy='auto'`` meaning ``-action_dim``. ``action_prior`` is 'uniform' (0) or
    'gaussian' (standard normal log-density of the normalized action). The actor, critics and
    ``log_alpha`` share ``learning_rate``; all three losses take one backward pass.
    ``linear_lr_schedule`` decays that rate linearly to zero over the run.
    """

    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 256,
                 min_steps_learn: int = 10_000, replay_size: int = 1_000_000,
                 replay_ratio: float = 256, target_update_tau: float = 0.005,
                 target_update_interval: int = 1, learning_rate: float = 3e-4,
                 fixed_alpha: float | None = None, OptimCls: type = torch.optim.Adam,
                 optim_kwargs: dict | None = None, initial_optim_state_dict: dict | None = None,
                 action_prior: str = "uniform", reward_scale: float = 1,
                 target_entropy: str | float = "auto", reparameterize: bool = True,
                 clip_grad_norm: float = 1e9, n_step_return: int = 1, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, ReplayBufferCls: type | None = None,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta: float = 0.4, initial_alpha: float = 1.0,
                 linear_lr_schedule: bool = False, replay_device: str = "auto",
                 compile: bool = False):
        super().__init__(discount, batch_size, min_steps_learn, replay_size, replay_ratio,
                         target_update_tau, target_update_interval, 1, OptimCls, optim_kwargs,
                         initial_optim_state_dict, clip_grad_norm, n_step_return,
                         bootstrap_timelimit, ReplayBufferCls, prioritized_replay, pri_alpha,
                         pri_beta, linear_lr_schedule, replay_device, compile)
        self.action_prior = check_choice(action_prior, "action_prior", _ACTION_PRIORS,
                                         owner="SAC")
        if fixed_alpha is not None and not fixed_alpha >= 0:
            raise ValueError(f"SAC: fixed_alpha must be >= 0 or None; got {fixed_alpha!r}")
        if not (target_entropy == "auto" or isinstance(target_entropy, (int, float))):
            raise ValueError(f"SAC: target_entropy must be 'auto' or a number; got "
                             f"{target_entropy!r}")
        self.learning_rate = check_positive(learning_rate, "learning_rate", owner="SAC")
        self.initial_alpha = check_positive(initial_alpha, "initial_alpha", owner="SAC")
        self.fixed_alpha = fixed_alpha
        self.reward_scale = float(reward_scale)
        self.target_entropy = target_entropy
        self.reparameterize = bool(reparameterize)
        self.updates_per_sync = check_int(updates_per_sync, "updates_per_sync", minimum=1,
                                          owner="SAC")

    def _setup(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
               examples: Any, async_: bool, shared_replay: bool = True) -> None:
        """Check for twin critics, create ``log_alpha`` (learned or fixed) and resolve the
        target entropy, then set up as QpgAlgoBase does (for :meth:`initialize` and
        :meth:`async_initialize`)."""
        if getattr(agent, "q_ensemble_size", None) != 2:
            raise ValueError(f"SAC needs twin critics (SacAgent); {type(agent).__name__} has "
                             f"{getattr(agent, 'q_ensemble_size', None)} critic(s)")
        action_dim = int(agent.env_model_kwargs["action_size"])
        self._target_entropy = (-float(action_dim) if self.target_entropy == "auto"
                                else float(self.target_entropy))
        self.log_alpha = torch.tensor(math.log(self.initial_alpha), device=agent.device,
                                      requires_grad=self.fixed_alpha is None)
        if self.fixed_alpha is not None:
            self.log_alpha.data.fill_(math.log(max(self.fixed_alpha, 1e-30)))
        # made once (a tensor made in the loss would be a host-to-device copy per update,
        # which a CUDA graph cannot capture)
        self._fixed_alpha = torch.tensor(float(self.fixed_alpha or 0.0), device=agent.device)
        super()._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, async_,
                       shared_replay)

    def optim_initialize(self, rank: int = 0) -> None:
        """Put ``log_alpha`` on the agent's device (an async optimizer moves the agent after
        setup), then build the optimizer as QpgAlgoBase does."""
        if self.log_alpha.device != self.agent.device:
            self.log_alpha = self.log_alpha.detach().to(self.agent.device).requires_grad_(
                self.fixed_alpha is None)
            self._fixed_alpha = self._fixed_alpha.to(self.agent.device)
        super().optim_initialize(rank)

    def param_groups(self) -> list[dict]:
        """Actor, critics and (when learned) ``log_alpha``, all at ``learning_rate``; the
        temperature is not gradient-clipped."""
        groups = [dict(params=list(self.agent.pi_parameters()), lr=self.learning_rate, name="pi"),
                  dict(params=list(self.agent.q_parameters()), lr=self.learning_rate, name="q")]
        if self.fixed_alpha is None:
            groups.append(dict(params=[self.log_alpha], lr=self.learning_rate, clip=False,
                               name="alpha"))
        return groups

    @property
    def alpha(self) -> float:
        """The current entropy temperature."""
        return float(self.fixed_alpha) if self.fixed_alpha is not None \
            else float(self.log_alpha.detach().exp())

    def prior_log_pi(self, action: torch.Tensor) -> torch.Tensor:
        """Log-density of the action prior at normalized actions (0 for 'uniform')."""
        if self.action_prior == "uniform":
            return torch.zeros((), device=action.device)
        return -(0.5 * action ** 2 + _HALF_LOG_2PI).sum(-1)

    def losses(self, batch: Any,
               update_policy: bool = True) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """Critic, policy and temperature losses of a replayed batch, summed for one backward;
        with the diagnostics and each sample's |TD error| (averaged over the critics)."""
        if self.agent.device.type != "cpu":
            batch = buffer_to(batch, self.agent.device)
        agent = self.agent
        alpha = self._fixed_alpha if self.fixed_alpha is not None \
            else self.log_alpha.detach().exp()
        factor, valid = self.bootstrap_factor(batch)
        with torch.no_grad():  # y = r + f * (min Q_target(s', a') - alpha log pi(a'|s'))
            next_action, next_log_pi, _ = agent.pi(*batch.target_inputs)
            target_v = agent.target_q(*batch.target_inputs, next_action).min(dim=0).values \
                - alpha * next_log_pi
            y = self.reward_scale * batch.return_ + factor * target_v
        q = agent.q(*batch.agent_inputs, batch.action)  # [2, B]
        delta = y - q
        q_loss = self.weighted_mean(0.5 * (delta ** 2).sum(0), batch, valid)

        # Policy: alpha log pi(a|s) - min Q(s, a) - log prior(a), critics' parameters detached.
        new_action, log_pi, dist_info = agent.pi(*batch.agent_inputs,
                                                 reparameterize=self.reparameterize)
        q_pi = agent.q(*batch.agent_inputs, new_action, detach_params=True).min(dim=0).values
        policy_terms = alpha * log_pi - q_pi - self.prior_log_pi(new_action)
        if self.reparameterize:
            pi_losses = policy_terms
        else:  # score function: grad E[g] = E[g grad log pi]
            pi_losses = log_pi * policy_terms.detach()
        pi_loss = self.weighted_mean(pi_losses, batch, valid)
        loss = q_loss + pi_loss
        if self.fixed_alpha is None:
            alpha_loss = -(self.log_alpha * (log_pi.detach() + self._target_entropy)).mean()
            loss = loss + alpha_loss
        else:
            alpha_loss = torch.zeros((), device=agent.device)
        info = dict(piLoss=pi_loss.detach(), qLoss=q_loss.detach(), alpha=alpha,
                    alphaLoss=alpha_loss.detach(), qMean=q.detach().mean(),
                    logPi=log_pi.detach().mean())
        return loss, info, delta.detach().abs().mean(0)

    def diagnostics(self, info: dict, norms: list, update_policy: bool) -> dict:
        """The OptInfo fields of one update: the loss terms plus both gradient norms."""
        return dict(info, piGradNorm=norms[0], qGradNorm=norms[1])

    def optim_state_dict(self) -> dict:
        """The optimizer's state and ``log_alpha``, which is trained outside the modules."""
        return dict(optimizer=self.optimizer.state_dict(), log_alpha=self.log_alpha.detach().cpu())

    def load_optim_state_dict(self, state_dict: dict) -> None:
        """Restore the optimizer and ``log_alpha`` from :meth:`optim_state_dict`'s output."""
        self.optimizer.load_state_dict(state_dict["optimizer"])
        self.log_alpha.data.copy_(state_dict["log_alpha"])
