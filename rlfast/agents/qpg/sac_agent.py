"""SAC agent: a tanh-squashed Gaussian policy and twin critics (one two-member ensemble)."""
from __future__ import annotations

import math

import torch

from rlfast.agents.base import AgentStep, BaseAgent
from rlfast.agents.qpg.base import QpgAgentBase, _unwrap
from rlfast.distributions import DistInfoStd, Gaussian
from rlfast.models.qpg import PiMlpModel, PiSdeMlpModel, QofMuMlpModel
from rlfast.utils.checks import check_fraction, check_int

__all__ = ["SacAgent"]

LOG_STD_MIN, LOG_STD_MAX = -20.0, 2.0


class SacAgent(QpgAgentBase, BaseAgent):
    """Soft actor-critic agent. Normalized actions are ``action_squash * tanh(x)`` with
    ``x ~ N(mean(s), std(s))`` (log-std clamped to [-20, 2]); ``step`` scales them to the
    action bounds. Eval mode acts with ``action_squash * tanh(mean)``. Until learning starts
    the pre-squash std is ``pretrain_std`` (near-uniform exploration with the default 0.75
    around an untrained mean of about 0); with ``pretrain_uniform`` the actions are instead
    uniform over ``[-action_squash, action_squash]`` (the whole action bounds by default), as
    Stable-Baselines3 and the SAC paper's code explore before learning starts. The critic has
    a target copy; the policy does not.

    ``exploration="gsde"``: generalized state-dependent exploration (Raffin et al. 2022), the
    setting rl-baselines3-zoo uses where plain Gaussian noise does not find the reward
    (MountainCarContinuous). The policy is ``PiSdeMlpModel`` (the default ``ModelCls`` is
    replaced by it): sampling adds ``z(s) @ W`` to the mean, ``z`` the policy's last hidden
    features and ``W`` a noise matrix per environment drawn from the model's learned std,
    kept for ``sde_sample_interval`` sampling steps, then drawn afresh. The losses use the
    Gaussian that this noise has over ``W`` (the model's state-dependent log-std), sampled
    independently per replayed state. Each group of an alternating sampler keeps its own
    matrices (``use_group``); evaluation acts with the mean and leaves them alone.
    """

    def __init__(self, ModelCls: type = PiMlpModel, QModelCls: type = QofMuMlpModel,
                 model_kwargs: dict | None = None, q_model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None, action_squash: float = 1.0,
                 pretrain_std: float | None = 0.75, exploration: str = "gaussian",
                 sde_sample_interval: int = 1, pretrain_uniform: bool = False):
        owner = type(self).__name__
        if exploration not in ("gaussian", "gsde"):
            raise ValueError(f"{owner}: exploration must be 'gaussian' or 'gsde' (generalized "
                             f"state-dependent exploration); got {exploration!r}")
        if exploration == "gsde" and ModelCls is PiMlpModel:
            ModelCls = PiSdeMlpModel
        model_kwargs = {"hidden_sizes": [256, 256], **(model_kwargs or {})}
        q_model_kwargs = {"hidden_sizes": [256, 256], **(q_model_kwargs or {})}
        super().__init__(ModelCls, QModelCls, model_kwargs, q_model_kwargs,
                         initial_model_state_dict, pretrain_std, pretrain_uniform)
        # Normalized action units: the agent scales to the env bounds.
        self.action_squash = check_fraction(action_squash, "action_squash", allow_zero=False,
                                            owner=type(self).__name__)
        self.exploration = exploration
        self.sde_sample_interval = check_int(sde_sample_interval, "sde_sample_interval",
                                             minimum=1, owner=owner)
        self._sde_noise: dict[int, list] = {}  # group -> [W [N, F, A], steps left]
        self._sde_group = 0

    def q_model_extra_kwargs(self) -> dict:
        """Twin critics: one two-member ensemble."""
        return dict(ensemble_size=2)

    def make_distribution(self) -> None:
        """The squashed Gaussian (log-std clamped), and the pretraining one when configured;
        checks that a gSDE agent's policy model gives state-dependent noise."""
        if self.exploration == "gsde" and not getattr(_unwrap(self.model),
                                                      "state_dependent_noise", False):
            raise TypeError(f"{type(self).__name__}: exploration='gsde' needs a policy model "
                            f"with state-dependent noise (PiSdeMlpModel); got "
                            f"{type(_unwrap(self.model)).__name__}")
        self._sde_noise.clear()
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
        """A squashed Gaussian sample in sample mode (``pretrain_std`` before learning starts,
        or uniform actions with ``pretrain_uniform``), ``action_squash * tanh(mean)``
        otherwise; scaled to the action bounds, on the CPU."""
        inputs = self.to_model_inputs(observation, prev_action, prev_reward)
        sde = self.exploration == "gsde" and self._mode == "sample" and not self.pretraining
        if sde:
            mean, log_std, features = self.model(*inputs, features=True)
        else:
            mean, log_std = self.model(*inputs)
        mu = self.action_squash * torch.tanh(mean)
        if self._mode != "sample":
            action = mu
        elif self.pretraining and self.pretrain_uniform:
            action = torch.rand_like(mu).mul_(2.0 * self.action_squash).sub_(self.action_squash)
        elif self.pretraining:
            action = self._pretrain_distribution.sample(DistInfoStd(mean=mean, log_std=log_std))
        elif sde:
            action = self.action_squash * torch.tanh(mean + self._sde_step(features))
        else:
            action = self.distribution.sample(DistInfoStd(mean=mean, log_std=log_std))
        return self._step_output(action, mu)

    # ---- state-dependent exploration -------------------------------------------------------
    def _sde_step(self, features: torch.Tensor) -> torch.Tensor:
        """This group's noise ``z @ W`` for one sampling step (``[..., A]``); draws new
        matrices every ``sde_sample_interval`` steps, or when the batch's size changes."""
        z = features.reshape(-1, features.shape[-1])  # [N, F]
        entry = self._sde_noise.get(self._sde_group)
        if entry is None or entry[1] <= 0 or entry[0].shape[0] != z.shape[0]:
            sigma = _unwrap(self.model).noise_std().detach()  # [F, A]
            weights = sigma * torch.randn((z.shape[0],) + tuple(sigma.shape), device=z.device,
                                          dtype=sigma.dtype)
            entry = [weights, self.sde_sample_interval]
            self._sde_noise[self._sde_group] = entry
        entry[1] -= 1
        noise = torch.bmm(z.unsqueeze(1), entry[0]).squeeze(1)  # [N, A]
        return noise.reshape(features.shape[:-1] + noise.shape[-1:])

    def use_group(self, group: int) -> None:
        """Alternating samplers: step ``group``'s environments next (their own matrices)."""
        self._sde_group = int(group)
