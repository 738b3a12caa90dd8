"""DDPG and TD3 agents: a deterministic policy ``mu(s)`` explored with Gaussian noise, and a
critic ``Q(s, a)`` (twin critics for TD3, as one two-member ensemble)."""
from __future__ import annotations

import math

import torch

from rlfast.agents.base import AgentStep, BaseAgent
from rlfast.agents.qpg.base import QpgAgentBase, _unwrap, positive_or_none
from rlfast.models.qpg import MuMlpModel, QofMuMlpModel
from rlfast.utils.checks import check_positive

__all__ = ["DdpgAgent", "Td3Agent"]


class DdpgAgent(QpgAgentBase, BaseAgent):
    """Deterministic policy with Gaussian exploration; critic and target copies of both.

    In sample mode ``step`` returns ``mu(s) + clip(N(0, action_std), +-action_noise_clip)``
    clipped to ``[-1, 1]`` and scaled to the action bounds; in eval mode ``mu(s)``. Before
    learning starts (``give_min_itr_learn``) the noise std is ``pretrain_std`` when that is
    set; with ``pretrain_uniform`` the actions are instead uniform over the action bounds,
    whatever the policy (the TD3 paper's start: Fujimoto et al. 2018 sample the first 10k
    actions uniformly). Networks take and give normalized actions (see ``QpgAgentBase``).

    ``exploration="ou"`` replaces the independent Gaussian draws (after pretraining) by an
    Ornstein-Uhlenbeck process per environment, the DDPG paper's temporally correlated
    exploration (Lillicrap et al. 2016: theta 0.15): ``x <- (1 - ou_theta * ou_dt) * x +
    action_std * sqrt(ou_dt) * N(0, 1)`` at every sampling step, from ``x = 0`` when the
    environment's episode starts (``reset_one``). Consecutive actions then push the same way,
    which finds rewards that need a long push (MountainCarContinuous). Each group of an
    alternating sampler keeps its own states (``use_group``); evaluation leaves them alone.
    """

    target_names = ("target_model", "target_q_model")

    def __init__(self, ModelCls: type = MuMlpModel, QModelCls: type = QofMuMlpModel,
                 model_kwargs: dict | None = None, q_model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None, action_std: float = 0.1,
                 action_noise_clip: float | None = None, pretrain_std: float | None = None,
                 pretrain_uniform: bool = False, exploration: str = "gaussian",
                 ou_theta: float = 0.15, ou_dt: float = 1e-2):
        model_kwargs = {"hidden_sizes": [400, 300], **(model_kwargs or {})}
        q_model_kwargs = {"hidden_sizes": [400, 300], **(q_model_kwargs or {})}
        super().__init__(ModelCls, QModelCls, model_kwargs, q_model_kwargs,
                         initial_model_state_dict, pretrain_std, pretrain_uniform)
        owner = type(self).__name__
        self.action_std = positive_or_none(action_std, "action_std", owner)
        self.action_noise_clip = positive_or_none(action_noise_clip, "action_noise_clip", owner)
        if exploration not in ("gaussian", "ou"):
            raise ValueError(f"{owner}: exploration must be 'gaussian' or 'ou' "
                             f"(Ornstein-Uhlenbeck); got {exploration!r}")
        self.exploration = exploration
        self.ou_theta = float(ou_theta)
        if not (math.isfinite(self.ou_theta) and self.ou_theta >= 0):
            raise ValueError(f"{owner}: ou_theta must be a finite number >= 0; got {ou_theta!r}")
        self.ou_dt = check_positive(ou_dt, "ou_dt", owner=owner)
        self._ou_states: dict[int, torch.Tensor] = {}  # group -> [B, A] process values
        self._ou_group = 0

    # ---- values for the algorithm ----------------------------------------------------------
    def q(self, observation, prev_action, prev_reward, action) -> torch.Tensor:
        """``Q(s, a)`` for normalized replayed actions, with gradient (``[2, B]`` for TD3)."""
        return self.q_model(*self.to_model_inputs(observation, prev_action, prev_reward, action))

    def q_at_mu(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """``Q(s, mu(s))``, gradient flowing into the policy only (the critic's parameters are
        detached, so actor and critic losses can share one backward pass)."""
        observation, prev_action, prev_reward = self.to_model_inputs(
            observation, prev_action, prev_reward)
        mu = self.model(observation, prev_action, prev_reward)
        return self.q_model(observation, prev_action, prev_reward, mu, detach_params=True,
                            member=0 if _unwrap(self.q_model).ensemble_size > 1 else None)

    def target_action(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """The target policy's action at the next state (TD3 adds smoothing noise)."""
        return self.target_model(observation, prev_action, prev_reward)

    def target_q_at_mu(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """``Q_target(s', mu_target(s'))``, without gradient."""
        with torch.no_grad():
            observation, prev_action, prev_reward = self.to_model_inputs(
                observation, prev_action, prev_reward)
            action = self.target_action(observation, prev_action, prev_reward)
            return self.target_q_model(observation, prev_action, prev_reward, action)

    # ---- sampling ------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """``mu(s)`` plus clipped Gaussian noise in sample mode (``pretrain_std`` before
        learning starts, or uniform actions with ``pretrain_uniform``), ``mu(s)`` otherwise;
        scaled to the action bounds, on the CPU."""
        observation, prev_action, prev_reward = self.to_model_inputs(
            observation, prev_action, prev_reward)
        mu = self.model(observation, prev_action, prev_reward)
        action = mu
        if self._mode == "sample":
            pretraining = self.pretraining
            std = self.pretrain_std if pretraining else self.action_std
            if pretraining and self.pretrain_uniform:
                action = torch.rand_like(mu).mul_(2.0).sub_(1.0)
            elif std is not None:
                if self.exploration == "ou" and not pretraining:
                    noise = self._ou_step(mu, std)
                else:
                    noise = std * torch.randn_like(mu)
                if self.action_noise_clip is not None:
                    noise = noise.clamp(-self.action_noise_clip, self.action_noise_clip)
                action = (mu + noise).clamp(-1.0, 1.0)
        return self._step_output(action, mu)

    # ---- Ornstein-Uhlenbeck exploration ---------------------------------------------------
    def _ou_step(self, mu: torch.Tensor, sigma: float) -> torch.Tensor:
        """Advance this group's processes one step and return them (``mu``'s shape; a batch
        of another shape starts from zeros)."""
        state = self._ou_states.get(self._ou_group)
        if state is None or state.shape != mu.shape:
            state = torch.zeros_like(mu)
        state = state * (1.0 - self.ou_theta * self.ou_dt) \
            + (sigma * math.sqrt(self.ou_dt)) * torch.randn_like(mu)
        self._ou_states[self._ou_group] = state
        return state

    def reset(self) -> None:
        """Every environment restarts: the noise processes restart from zero (not in eval
        mode: an evaluation does not touch the training environments' exploration)."""
        super().reset()
        if self._mode != "eval":
            self._ou_states.clear()

    def reset_one(self, idx: int) -> None:
        """Environment ``idx``'s episode ended: its noise process restarts from zero (an
        evaluation environment's end, in eval mode, touches no training process)."""
        super().reset_one(idx)
        if self._mode == "eval":
            return
        state = self._ou_states.get(self._ou_group)
        if state is not None and state.dim() > 1 and 0 <= idx < state.shape[0]:
            state[idx] = 0.0

    def use_group(self, group: int) -> None:
        """Alternating samplers: step ``group``'s environments next (their own processes)."""
        self._ou_group = int(group)


class Td3Agent(DdpgAgent):
    """TD3: twin critics (one two-member ensemble evaluated in one pass) and target policy
    smoothing: the target action is ``clip(mu_target(s') + clip(N(0, target_noise_std),
    +-target_noise_clip), -1, 1)``. Samples with ``pretrain_std`` noise until learning
    starts."""

    def __init__(self, pretrain_std: float | None = 0.5, target_noise_std: float = 0.2,
                 target_noise_clip: float = 0.5, **kwargs):
        super().__init__(pretrain_std=pretrain_std, **kwargs)
        owner = type(self).__name__
        self.target_noise_std = positive_or_none(target_noise_std, "target_noise_std", owner)
        self.target_noise_clip = positive_or_none(target_noise_clip, "target_noise_clip", owner)

    def q_model_extra_kwargs(self) -> dict:
        """Twin critics: one two-member ensemble."""
        return dict(ensemble_size=2)

    def target_action(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """The smoothed target action ``clip(mu_target(s') + clipped noise, -1, 1)``."""
        mu = self.target_model(observation, prev_action, prev_reward)
        if self.target_noise_std is None:
            return mu
        noise = self.target_noise_std * torch.randn_like(mu)
        if self.target_noise_clip is not None:
            noise = noise.clamp(-self.target_noise_clip, self.target_noise_clip)
        return (mu + noise).clamp(-1.0, 1.0)
