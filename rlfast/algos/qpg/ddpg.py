"""DDPG and TD3: deterministic policy gradient through a learned critic, from replay."""
from __future__ import annotations

from collections import namedtuple

import torch

from rlfast.algos.qpg.base import QpgAlgoBase
from rlfast.utils.buffer import buffer_to

__all__ = ["DDPG", "TD3"]

OptInfo = namedtuple("OptInfo", ["muLoss", "qLoss", "qMean", "muGradNorm", "qGradNorm"])
_NAN = float("nan")


class DDPG(QpgAlgoBase):
    """Deep deterministic policy gradient.

    Critic: ``y = R^(n) + f * Q_target(s', mu_target(s'))`` clipped to ``+-q_target_clip``,
    loss ``0.5 (y - Q(s, a))^2``, with ``f`` from :meth:`bootstrap_factor` (a time-limit end
    bootstraps). Actor, every ``policy_update_interval`` updates: ``-Q(s, mu(s))``. Targets
    are Polyak-averaged with ``target_update_tau`` every ``target_update_interval`` updates.
    ``learning_rate`` is the actor's, ``q_learning_rate`` the critic's. ``updates_per_sync``
    is read by asynchronous runners (updates between copies to the sampler's model).
    """

    OptInfoCls = OptInfo
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, discount: float = 0.99, batch_size: int = 64,
                 min_steps_learn: int = 10_000, replay_size: int = 1_000_000,
                 replay_ratio: float = 64, target_update_tau: float = 0.01,
                 target_update_interval: int = 1, policy_update_interval: int = 1,
                 learning_rate: float = 1e-4, q_learning_rate: float = 1e-3,
                 OptimCls=torch.optim.Adam, optim_kwargs: dict | None = None,
                 initial_optim_state_dict: dict | None = None, clip_grad_norm: float = 1e8,
                 q_target_clip: float = 1e6, n_step_return: int = 1, updates_per_sync: int = 1,
                 bootstrap_timelimit: bool = True, ReplayBufferCls=None,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta: float = 0.4):
        super().__init__(discount, batch_size, min_steps_learn, replay_size, replay_ratio,
                         target_update_tau, target_update_interval, policy_update_interval,
                         OptimCls, optim_kwargs, initial_optim_state_dict, clip_grad_norm,
                         n_step_return, bootstrap_timelimit, ReplayBufferCls,
                         prioritized_replay, pri_alpha, pri_beta)
        if not learning_rate > 0 or not q_learning_rate > 0:
            raise ValueError(f"learning rates must be > 0, got learning_rate={learning_rate!r}, "
                             f"q_learning_rate={q_learning_rate!r}")
        if not q_target_clip > 0:
            raise ValueError(f"q_target_clip must be > 0, got {q_target_clip!r}")
        self.learning_rate = learning_rate
        self.q_learning_rate = q_learning_rate
        self.q_target_clip = float(q_target_clip)
        self.updates_per_sync = int(updates_per_sync)

    def param_groups(self) -> list:
        return [dict(params=list(self.agent.pi_parameters()), lr=self.learning_rate),
                dict(params=list(self.agent.q_parameters()), lr=self.q_learning_rate)]

    def q_target(self, batch) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(y, valid)``: the clipped n-step target and the valid mask (or None)."""
        factor, valid = self.bootstrap_factor(batch)
        target_q = self.agent.target_q_at_mu(*batch.target_inputs)
        if target_q.dim() > batch.return_.dim():  # twin critics: the smaller estimate
            target_q = target_q.min(dim=0).values
        y = batch.return_ + factor * target_q
        return y.clamp(-self.q_target_clip, self.q_target_clip), valid

    def losses(self, batch, update_policy: bool):
        """Critic loss, plus the actor loss on policy-update steps, summed for one backward."""
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
        nan = torch.full((), _NAN, device=info["qLoss"].device)
        return dict(muLoss=info.get("muLoss", nan), qLoss=info["qLoss"], qMean=info["qMean"],
                    muGradNorm=norms[0] if update_policy else nan, qGradNorm=norms[1])


class TD3(DDPG):
    """Twin delayed DDPG: the agent's two critics (``Td3Agent``) are both regressed on
    ``y = R^(n) + f * min(Q1_target, Q2_target)(s', a~)`` with the target action ``a~``
    smoothed by clipped noise (the agent's ``target_noise_std`` / ``target_noise_clip``); the
    actor maximizes ``Q1(s, mu(s))`` every ``policy_update_interval`` updates, and targets
    follow at ``target_update_interval``."""

    def __init__(self, batch_size: int = 100, replay_ratio: float = 100,
                 target_update_tau: float = 0.005, target_update_interval: int = 2,
                 policy_update_interval: int = 2, mu_learning_rate: float = 1e-3,
                 q_learning_rate: float = 1e-3, **kwargs):
        super().__init__(batch_size=batch_size, replay_ratio=replay_ratio,
                         target_update_tau=target_update_tau,
                         target_update_interval=target_update_interval,
                         policy_update_interval=policy_update_interval,
                         learning_rate=mu_learning_rate, q_learning_rate=q_learning_rate,
                         **kwargs)
        self.mu_learning_rate = mu_learning_rate

    def initialize(self, agent, *args, **kwargs):
        if getattr(agent.q_model, "ensemble_size", None) != 2:
            raise ValueError(f"TD3 needs twin critics (Td3Agent); {type(agent).__name__} has "
                             f"{getattr(agent.q_model, 'ensemble_size', None)} critic(s)")
        super().initialize(agent, *args, **kwargs)
