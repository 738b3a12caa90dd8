"""DDPG and TD3: deterministic policy gradient through a learned critic, from replay.

TD3 is DDPG's update run with the twin critics of a ``Td3Agent`` (the target takes their
minimum; target smoothing noise lives in the agent) and other defaults. Both derive directly
from :class:`QpgAlgoBase`; TD3 shares DDPG's update methods instead of inheriting them, which
keeps the class hierarchy flat.
"""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch

from rlfast.algos.qpg.base import QpgAlgoBase, qpg_base_arguments
from rlfast.utils.buffer import buffer_to
from rlfast.utils.checks import check_int, check_positive

__all__ = ["DDPG", "TD3"]

OptInfo = namedtuple("OptInfo", ["muLoss", "qLoss", "qMean", "muGradNorm", "qGradNorm"])
_NAN = float("nan")


def _set_rates(algo: QpgAlgoBase, learning_rate: float, q_learning_rate: float,
               q_target_clip: float, updates_per_sync: int) -> None:
    """The settings DDPG and TD3 add to :class:`QpgAlgoBase`'s, checked."""
    owner = type(algo).__name__
    algo.learning_rate = check_positive(learning_rate, "learning_rate", owner=owner)
    algo.q_learning_rate = check_positive(q_learning_rate, "q_learning_rate", owner=owner)
    algo.q_target_clip = check_positive(q_target_clip, "q_target_clip", owner=owner)
    algo.updates_per_sync = check_int(updates_per_sync, "updates_per_sync", minimum=1,
                                      owner=owner)


class DDPG(QpgAlgoBase):
    """Deep deterministic policy gradient.

    Critic: ``y = R^(n) + f * Q_target(s', mu_target(s'))`` clipped to ``+-q_target_clip``,
    loss ``0.5 (y - Q(s, a))^2``, with ``f`` from :meth:`bootstrap_factor` (a time-limit end
    bootstraps). Actor, every ``policy_update_interval`` updates: ``-Q(s, mu(s))``. Targets
    are Polyak-averaged with ``target_update_tau`` every ``target_update_interval`` updates.
    ``learning_rate`` is the actor's, ``q_learning_rate`` the critic's (both decaying linearly
    to zero over the run with ``linear_lr_schedule``). ``updates_per_sync``
    is read by asynchronous runners (updates between copies to the sampler's model).
    """

    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 64,
                 min_steps_learn: int = 10_000, replay_size: int = 1_000_000,
                 replay_ratio: float = 64, target_update_tau: float = 0.01,
                 target_update_interval: int = 1, policy_update_interval: int = 1,
                 learning_rate: float = 1e-4, q_learning_rate: float = 1e-3,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 initial_optim_state_dict: dict | None = None, clip_grad_norm: float = 1e8,
                 q_target_clip: float = 1e6, n_step_return: int = 1, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, ReplayBufferCls: type | None = None,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta: float = 0.4, linear_lr_schedule: bool = False,
                 replay_device: str = "auto", compile: bool = False):
        super().__init__(**qpg_base_arguments(locals()))
        _set_rates(self, learning_rate, q_learning_rate, q_target_clip, updates_per_sync)

    def param_groups(self) -> list[dict]:
        """The actor's parameters at ``learning_rate``, the critic's at ``q_learning_rate``."""
        return [dict(params=list(self.agent.pi_parameters()), lr=self.learning_rate, name="mu"),
                dict(params=list(self.agent.q_parameters()), lr=self.q_learning_rate, name="q")]

    def q_target(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(y, valid)``: the clipped n-step target and the valid mask (or None)."""
        factor, valid = self.bootstrap_factor(batch)
        target_q = self.agent.target_q_at_mu(*batch.target_inputs)
        if target_q.dim() > batch.return_.dim():  # twin critics: the smaller estimate
            target_q = target_q.min(dim=0).values
        y = batch.return_ + factor * target_q
        return y.clamp(-self.q_target_clip, self.q_target_clip), valid

    def losses(self, batch: Any, update_policy: bool) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """Critic loss, plus the actor loss on policy-update steps, summed for one backward;
        with the diagnostics and each sample's |TD error| (averaged over twin critics)."""
        if self.agent.device.type != "cpu":
            batch = buffer_to(batch, self.agent.device)
        y, valid = self.q_target(batch)
        q = self.agent.q(*batch.agent_inputs, batch.action)  # [B] or [2, B]
        delta = y - q
        q_loss = self.weighted_mean(0.5 * (delta ** 2).reshape(-1, y.shape[0]).sum(0), batch,
                                    valid)
        info = dict(qLoss=q_loss.detach(), qMean=q.detach().mean())
        loss = q_loss
        if update_policy:
            mu_loss = self.weighted_mean(-self.agent.q_at_mu(*batch.agent_inputs), batch, valid)
            loss = loss + mu_loss
            info["muLoss"] = mu_loss.detach()
        td_abs = delta.detach().abs().reshape(-1, y.shape[0]).mean(0)
        return loss, info, td_abs

    def diagnostics(self, info: dict, norms: list, update_policy: bool) -> dict:
        """The OptInfo fields of one update; actor terms are NaN on critic-only updates."""
        nan = torch.full((), _NAN, device=info["qLoss"].device)
        return dict(muLoss=info.get("muLoss", nan), qLoss=info["qLoss"], qMean=info["qMean"],
                    muGradNorm=norms[0] if update_policy else nan, qGradNorm=norms[1])


class TD3(QpgAlgoBase):
    """Twin delayed DDPG: the agent's two critics (``Td3Agent``) are both regressed on
    ``y = R^(n) + f * min(Q1_target, Q2_target)(s', a~)`` with the target action ``a~``
    smoothed by clipped noise (the agent's ``target_noise_std`` / ``target_noise_clip``); the
    actor maximizes ``Q1(s, mu(s))`` every ``policy_update_interval`` updates, and targets
    follow at ``target_update_interval``. ``mu_learning_rate`` is the actor's learning rate;
    the keyword-only arguments are DDPG's, with its defaults.
    """

    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, batch_size: int = 100, replay_ratio: float = 100,
                 target_update_tau: float = 0.005, target_update_interval: int = 2,
                 policy_update_interval: int = 2, mu_learning_rate: float = 1e-3,
                 q_learning_rate: float = 1e-3, *, discount: float = 0.99,
                 min_steps_learn: int = 10_000, replay_size: int = 1_000_000,
                 OptimCls: type = torch.optim.Adam, optim_kwargs: dict | None = None,
                 initial_optim_state_dict: dict | None = None, clip_grad_norm: float = 1e8,
                 q_target_clip: float = 1e6, n_step_return: int = 1, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, ReplayBufferCls: type | None = None,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta: float = 0.4, linear_lr_schedule: bool = False,
                 replay_device: str = "auto", compile: bool = False):
        super().__init__(**qpg_base_arguments(locals()))
        _set_rates(self, mu_learning_rate, q_learning_rate, q_target_clip, updates_per_sync)
        self.mu_learning_rate = self.learning_rate

    def _setup(self, agent: Any, *args: Any, **kwargs: Any) -> None:
        """As QpgAlgoBase's setup (for :meth:`initialize` and :meth:`async_initialize`),
        after checking the agent has twin critics."""
        if getattr(agent, "q_ensemble_size", None) != 2:
            raise ValueError(f"TD3 needs twin critics (Td3Agent); {type(agent).__name__} has "
                             f"{getattr(agent, 'q_ensemble_size', None)} critic(s)")
        super()._setup(agent, *args, **kwargs)

    # The update itself is DDPG's (its target already takes the minimum of twin critics).
    # These methods never call super(), so they work unchanged on a TD3.
    param_groups = DDPG.param_groups
    q_target = DDPG.q_target
    losses = DDPG.losses
    diagnostics = DDPG.diagnostics
