"""Policy-gradient base: hyperparameters, optimizer construction, return / advantage
processing and the diagnostics A2C and PPO share."""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch

from rlfast.algos.base import RLAlgorithm
from rlfast.algos.guarded_steps import skips_on_device, step_unless_failed
from rlfast.algos.pg.reward_norm import RewardNormalizer
from rlfast.algos.utils import (build_optimizer, discount_return,
                                generalized_advantage_estimation, valid_from_done)
from rlfast.utils.distributed import global_mean_std
from rlfast.utils.tensor import valid_mean

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "entropy", "perplexity", "approxKl",
                                 "explainedVariance"])
# The terms of one loss evaluation, detached: what the diagnostics (and tests) read.
LossInfo = namedtuple("LossInfo", ["piLoss", "valueLoss", "entropy", "perplexity", "approxKl"])


PG_HYPERPARAMETERS = ("discount", "learning_rate", "value_loss_coeff", "entropy_loss_coeff",
                      "OptimCls", "optim_kwargs", "clip_grad_norm", "initial_optim_state_dict",
                      "gae_lambda", "normalize_advantage", "bootstrap_timelimit",
                      "normalize_reward")


def pg_hyperparameters(arguments: dict) -> dict:
    """The shared hyperparameters picked from a subclass constructor's ``locals()``, so A2C
    and PPO keep their own documented signatures and defaults without repeating the list."""
    return {name: arguments[name] for name in PG_HYPERPARAMETERS}


class PolicyGradientAlgo(RLAlgorithm):
    """Shared by A2C and PPO: holds the hyperparameters they have in common, builds the
    optimizer and turns a batch into returns, advantages and a validity mask.

    Returns use plain discounting when ``gae_lambda == 1`` and GAE otherwise. When the env
    reports ``env_info.timeout`` and ``bootstrap_timelimit`` is on, episodes cut by a time
    limit bootstrap from the value estimate instead of being treated as terminal, and the cut
    step itself is masked out of the loss. ``normalize_reward`` scales the rewards by the
    running std of the discounted return first (:class:`RewardNormalizer`, VecNormalize's
    reward normalization), so the critic learns returns of order one on any reward scale. The subclasses set the defaults (they differ, e.g.
    in ``value_loss_coeff``), so every argument here is required. Every gradient step is
    refused with ``NonFiniteError`` when its loss or gradient norm is NaN or inf.
    """

    bootstrap_value = True
    on_policy = True
    opt_info_fields = tuple(OptInfo._fields)

    def __init__(self, *, discount: float, learning_rate: float, value_loss_coeff: float,
                 entropy_loss_coeff: float, OptimCls: type, optim_kwargs: dict | None,
                 clip_grad_norm: float, initial_optim_state_dict: dict | None,
                 gae_lambda: float, normalize_advantage: bool, bootstrap_timelimit: bool,
                 normalize_reward: bool = False):
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
        if not isinstance(normalize_reward, bool):
            raise TypeError(f"{type(self).__name__}: normalize_reward must be True or False; "
                            f"got {normalize_reward!r}")
        self.normalize_reward = normalize_reward
        self.reward_normalizer = RewardNormalizer(discount) if normalize_reward else None

    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool = False,
                   examples: Any = None, world_size: int = 1, rank: int = 0) -> None:
        """Bind the agent and build the optimizer over all its parameters.

        ``mid_batch_reset`` decides the validity mask: without it nothing after the first
        ``done`` of a batch column is trained on (the environment idled there). With it every
        step is, recurrent agents included: their losses replay each column with the state
        zeroed where an episode starts (``episode_starts``), as the sampler stepped it.
        """
        self.agent = agent
        self.n_itr = n_itr
        self.batch_spec = batch_spec
        self.mid_batch_reset = mid_batch_reset
        self.world_size, self.rank = world_size, rank
        self.optimizer = build_optimizer(self.OptimCls, agent.parameters(), prefer_fused=True,
                                         lr=self.learning_rate, **self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.optimizer.load_state_dict(self.initial_optim_state_dict)

    def process_returns(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(return_, advantage, valid) as float tensors shaped like the rewards ``[T, B]``.

        The targets the losses regress on: discounted returns or GAE from the sampler's value
        estimates, with time-limit cuts bootstrapped (see the class docstring), and the mask
        of steps that may be trained on. ``normalize_advantage`` standardizes the advantage
        over the valid steps.
        """
        reward = samples.env.reward
        done = samples.env.done.to(reward.dtype)
        if self.reward_normalizer is not None:
            reward = self.reward_normalizer(reward, done)
        value = samples.agent.agent_info.value.to(reward.dtype)
        bootstrap = samples.agent.bootstrap_value[0].to(reward.dtype)
        env_info = samples.env.env_info
        timeout = None
        if self.bootstrap_timelimit and env_info is not None and "timeout" in env_info:
            timeout = env_info.timeout.to(reward.dtype)
        if self.gae_lambda == 1:
            return_ = discount_return(reward, done, bootstrap, self.discount, timeout, value)
            advantage = return_ - value
        else:
            advantage, return_ = generalized_advantage_estimation(
                reward, value, done, bootstrap, self.discount, self.gae_lambda, timeout)
        if not self.mid_batch_reset:
            valid = valid_from_done(done)  # nothing after the first done in each column
        else:
            valid = torch.ones_like(reward)
        if env_info is not None and "valid" in env_info:
            # multi-agent columns of agents that had left the episode (rlfast.envs.multiagent)
            valid = valid * env_info.valid.to(reward.dtype)
        if timeout is not None:
            valid = valid * (1 - timeout)
        if self.normalize_advantage:
            # Over the valid steps of the global batch: pooled over every rank under SyncRl.
            mean, std = global_mean_std(advantage, valid)
            advantage = (advantage - mean) / (std + 1e-6)
        return return_, advantage, valid

    def state_dict(self) -> dict:
        """Also the reward normalizer's statistics and running returns."""
        state = super().state_dict()
        if self.reward_normalizer is not None:
            state["reward_normalizer"] = self.reward_normalizer.state_dict()
        return state

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        if self.reward_normalizer is not None and "reward_normalizer" in state:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])

    # ---- gradient steps without host reads ------------------------------------------------
    def _clip_gradients(self, loss: torch.Tensor) -> torch.Tensor:
        """Backward ``loss`` and clip the gradient norm to ``clip_grad_norm``; returns the
        norm before clipping as a device tensor (nothing is read on the host)."""
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        return torch.nn.utils.clip_grad_norm_(self.agent.parameters(), self.clip_grad_norm)

    @property
    def skips_on_device(self) -> bool:
        """Whether a non-finite step can be refused on the device, without reading a value on
        the host: the optimizer is a fused one (Adam, AdamW, SGD with ``fused=True``), whose
        kernel leaves the parameters, moments and step count untouched while its
        ``found_inf`` tensor is nonzero (the mechanism ``torch.amp.GradScaler`` drives)."""
        return skips_on_device(self.optimizer)

    def _begin_steps(self, failed: torch.Tensor | None = None) -> None:
        """Start the gradient steps of one ``optimize_agent`` call: no step has failed yet.
        ``failed``: a 0-d bool device tensor, False, to keep the call's sticky failure flag in
        (a compiled step program shares its own), else one is made at the first step."""
        self._failed = failed  # device flag: some step of this call was not finite

    def _guarded_step(self, itr: int, loss: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One clipped gradient step of ``loss``; returns ``(gradient norm, finite)`` as device
        tensors (``finite``: 1.0 when the loss and norm were finite, else 0.0).

        With an optimizer that :attr:`skips_on_device`, nothing is read on the host: from the
        first non-finite step of the call on, every step is refused by the optimizer's own
        kernel, so the weights stay as they were before it, and :meth:`_end_steps` raises once
        the call's diagnostics are read. Other optimizers read the loss and norm on the host
        before each step and raise at once (one synchronisation per step).
        """
        grad_norm = self._clip_gradients(loss)
        finite = torch.isfinite(loss.detach()) & torch.isfinite(grad_norm)
        if not self.skips_on_device:
            values = torch.stack([loss.detach().to(grad_norm.dtype), grad_norm]).tolist()
            self.check_finite(itr, dict(zip(("loss", "gradNorm"), values)))
            self.optimizer.step()
            self.update_counter += 1
            return grad_norm, finite.to(grad_norm.dtype)
        if self._failed is None:
            self._failed = torch.zeros((), dtype=torch.bool, device=finite.device)
        step_unless_failed(self.optimizer, self._failed, finite)
        return grad_norm, finite.to(grad_norm.dtype)

    @property
    def compiled_loss(self) -> Any:
        """``loss`` under ``torch.compile`` when ``compile`` is on (compiled once), else
        ``loss`` itself."""
        if not getattr(self, "compile", False):
            return self.loss
        if getattr(self, "_compiled_loss", None) is None:
            self._compiled_loss = torch.compile(self.loss, dynamic=False)
        return self._compiled_loss

    def _end_steps(self, itr: int, steps: list[list[float]], loss_col: int = 0,
                   grad_norm_col: int = 1, finite_col: int = -1) -> None:
        """After the call's one host read: raise ``NonFiniteError`` for the first step whose
        loss or gradient norm was not finite (the optimizer refused it and every later one),
        naming the value as a per-step check would have; else count the steps taken.
        ``steps``: one row of host values per gradient step."""
        if not self.skips_on_device:
            return  # checked and counted step by step
        for row in steps:
            if row[finite_col] != 1.0:
                self.check_finite(itr, {"loss": row[loss_col], "gradNorm": row[grad_norm_col]})
            self.update_counter += 1


# ---- diagnostics (computed under no_grad; they never feed a loss) ----------------------------

def approx_kl(ratio: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """KL(old || new) estimated from the likelihood ratio ``r = pi_new / pi_old`` at the
    sampled actions: ``E[(r - 1) - log r]`` over valid steps (unbiased, low variance and
    never negative; the estimator CleanRL logs)."""
    with torch.no_grad():
        return valid_mean((ratio - 1) - ratio.log(), valid)


def diagnostic_row(*values: torch.Tensor) -> torch.Tensor:
    """0-d tensors (detached) stacked into one float64 row on their device: a gradient
    step's diagnostics, kept there until the call's one host read."""
    return torch.stack([v.detach().reshape(()).to(torch.float64) for v in values])


def explained_variance_tensor(return_: torch.Tensor, value: torch.Tensor,
                               valid: torch.Tensor | None) -> torch.Tensor:
    """``1 - Var[return - value] / Var[return]`` over valid steps, as a 0-d float64 tensor on
    ``return_``'s device: 1 for a perfect critic, 0 for one that predicts the mean, negative
    for worse; NaN when the returns are constant (or no step is valid). Nothing is read on the
    host, so a learner can report it with its other diagnostics in one read."""
    with torch.no_grad():
        return_ = return_.double()
        value = value.to(return_.device, torch.float64)
        valid = torch.ones_like(return_) if valid is None else valid.to(return_.device,
                                                                        torch.float64)
        n = valid.sum()
        safe_n = torch.where(n > 0, n, torch.ones_like(n))

        def variance(x: torch.Tensor) -> torch.Tensor:
            mean = (x * valid).sum() / safe_n
            return ((x - mean) ** 2 * valid).sum() / safe_n

        var_return = variance(return_)
        defined = (n > 0) & (var_return > 0)
        safe_var = torch.where(defined, var_return, torch.ones_like(var_return))
        ratio = 1 - variance(return_ - value) / safe_var
        return torch.where(defined, ratio, torch.full_like(ratio, float("nan")))


def explained_variance(return_: torch.Tensor, value: torch.Tensor,
                       valid: torch.Tensor | None) -> float:
    """:func:`explained_variance_tensor` read as a Python float."""
    return float(explained_variance_tensor(return_, value, valid))
