"""Policy-gradient base: hyperparameters, optimizer construction, return / advantage
processing and the diagnostics A2C and PPO share."""
from __future__ import annotations

from collections import namedtuple
from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from rlfast.agents.base import AgentInputs
from rlfast.algos.base import RLAlgorithm
from rlfast.algos.graph_step import GraphStep, capture_for, copy_into, static_copy
from rlfast.algos.guarded_steps import GuardedSteps
from rlfast.algos.pg.reward_norm import RewardNormalizer
from rlfast.algos.pg.value_norm import ValueNormalizer
from rlfast.algos.utils import (build_optimizer, discount_return, episode_starts,
                                generalized_advantage_estimation, valid_from_done)
from rlfast.utils.buffer import buffer_func, buffer_to
from rlfast.utils.collections import namedarraytuple
from rlfast.utils.distributed import global_mean_std
from rlfast.utils.tensor import valid_mean

# The diagnostics of one gradient step, by name (A2C's; PPO adds clipFrac), and of a call.
STEP_FIELDS = ("loss", "gradNorm", "entropy", "perplexity", "approxKl")
OptInfo = namedtuple("OptInfo", STEP_FIELDS + ("explainedVariance",))
# The terms of one loss evaluation, detached: what the diagnostics (and tests) read.
LossInfo = namedtuple("LossInfo", ["piLoss", "valueLoss", "entropy", "perplexity", "approxKl"])
CHECKED = ("loss", "gradNorm")  # a step is refused unless these are finite
# What the loss reads, on the learner's device: one entry per step ([T, B] or flattened).
LossInputs = namedarraytuple("LossInputs", ["agent_inputs", "action", "return_", "advantage",
                                           "valid", "old_dist_info"])
# Recurrent batches also carry where episodes start inside each column.
RnnLossInputs = namedarraytuple("RnnLossInputs", LossInputs._fields + ("reset",))


class LossBatch(NamedTuple):
    """One ``optimize_agent`` call's batch on the device (:meth:`PolicyGradientAlgo.loss_batch`):
    the loss inputs, the recurrent state at the batch start (``[B, N, H]``, or None for a
    feedforward agent), how many items minibatches are drawn from (steps, or columns when
    recurrent), and the critic's explained variance on the batch (a 0-d device tensor)."""
    inputs: Any
    rnn: Any
    n_items: int
    explained: torch.Tensor


PG_HYPERPARAMETERS = ("discount", "learning_rate", "value_loss_coeff", "entropy_loss_coeff",
                      "OptimCls", "optim_kwargs", "clip_grad_norm", "initial_optim_state_dict",
                      "gae_lambda", "normalize_advantage", "bootstrap_timelimit",
                      "normalize_reward", "value_norm", "value_loss", "huber_delta")
VALUE_LOSSES = ("mse", "huber")  # the choices of ``value_loss``


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
    reward normalization), so the critic learns returns of order one on any reward scale.
    ``value_norm`` makes the critic predict returns normalized by their running mean and std
    (:class:`~rlfast.algos.pg.value_norm.ValueNormalizer`, the MAPPO code's value
    normalization): its estimates are mapped back to the return's units for GAE, and the
    returns are normalized for the value loss. ``value_loss`` is ``"mse"``
    (``0.5 (V - R)^2``) or ``"huber"`` (the same inside ``|V - R| <= huber_delta``, linear
    outside; MAPPO's, with delta 10). The subclasses set the defaults (they differ, e.g. in
    ``value_loss_coeff``), so every argument here is required. Every gradient step is refused
    with ``NonFiniteError`` when its loss or gradient norm is NaN or inf.
    """

    bootstrap_value = True
    on_policy = True
    OptInfo = OptInfo
    opt_info_fields = tuple(OptInfo._fields)
    step_fields = STEP_FIELDS  # the per-step diagnostics, in the order they are logged
    program_capture = None  # how a compile=True program captures (None: by device; tests set it)

    def __init__(self, *, discount: float, learning_rate: float, value_loss_coeff: float,
                 entropy_loss_coeff: float, OptimCls: type, optim_kwargs: dict | None,
                 clip_grad_norm: float, initial_optim_state_dict: dict | None,
                 gae_lambda: float, normalize_advantage: bool, bootstrap_timelimit: bool,
                 normalize_reward: bool = False, value_norm: bool = False,
                 value_loss: str = "mse", huber_delta: float = 10.0):
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
        owner = type(self).__name__
        if not isinstance(value_norm, bool):
            raise TypeError(f"{owner}: value_norm must be True or False; got {value_norm!r}")
        if value_loss not in VALUE_LOSSES:
            raise ValueError(f"{owner}: value_loss must be one of {', '.join(VALUE_LOSSES)}; "
                             f"got {value_loss!r}")
        if (isinstance(huber_delta, bool) or not isinstance(huber_delta, (int, float))
                or not 0 < huber_delta < float("inf")):
            raise ValueError(f"{owner}: huber_delta must be a positive finite number; "
                             f"got {huber_delta!r}")
        self.value_norm = value_norm
        self.value_loss = value_loss
        self.huber_delta = float(huber_delta)
        self.value_normalizer = ValueNormalizer() if value_norm else None

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
        self.guarded_steps = GuardedSteps(self.optimizer, self.check_finite)
        if self.value_normalizer is not None:
            self.value_normalizer.to(agent.device)
        self.loss_fn = self.compiled_loss  # the loss, under torch.compile with compile=True
        self._program = None  # the compile=True step program, built at the first call

    def process_returns(self, samples: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """(return_, advantage, valid) as float tensors shaped like the rewards ``[T, B]``.

        The targets the losses regress on: discounted returns or GAE from the sampler's value
        estimates, with time-limit cuts bootstrapped (see the class docstring), and the mask
        of steps that may be trained on. ``normalize_advantage`` standardizes the advantage
        over the valid steps. With ``value_norm`` the sampler's value estimates (the critic's
        normalized outputs, the bootstrap value too) are first mapped back to the return's
        units, on the normalizer's device, where the results then are.
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
        if self.value_normalizer is not None:
            device = self.value_normalizer.device
            reward, done, timeout = (None if x is None else x.to(device)
                                     for x in (reward, done, timeout))
            value = self.value_normalizer.denormalize(value.to(device))
            bootstrap = self.value_normalizer.denormalize(bootstrap.to(device))
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
            valid = valid * env_info.valid.to(reward.device, reward.dtype)
        if timeout is not None:
            valid = valid * (1 - timeout)
        if self.normalize_advantage:
            # Over the valid steps of the global batch: pooled over every rank under SyncRl.
            mean, std = global_mean_std(advantage, valid)
            advantage = (advantage - mean) / (std + 1e-6)
        return return_, advantage, valid

    def state_dict(self) -> dict:
        """Also the reward normalizer's statistics and running returns, and the value
        normalizer's statistics."""
        state = super().state_dict()
        if self.reward_normalizer is not None:
            state["reward_normalizer"] = self.reward_normalizer.state_dict()
        if self.value_normalizer is not None:
            state["value_normalizer"] = self.value_normalizer.state_dict()
        return state

    def load_state_dict(self, state: Any) -> None:
        super().load_state_dict(state)
        if self.reward_normalizer is not None and "reward_normalizer" in state:
            self.reward_normalizer.load_state_dict(state["reward_normalizer"])
        if self.value_normalizer is not None and "value_normalizer" in state:
            self.value_normalizer.load_state_dict(state["value_normalizer"])

    # ---- the update: a batch on the device, and one guarded gradient step ------------------
    def loss_batch(self, samples: Any, flatten: bool) -> LossBatch:
        """The batch as the loss reads it, on the agent's device (crossed once; uint8 frames
        stay uint8): agent inputs, actions, returns, advantages, the validity mask and the
        sampler's action distribution, plus the critic's explained variance (a device
        tensor). The observation statistics, if the model normalizes, are updated first, as
        the sampler's agent will use them next. Feedforward batches are flattened from
        ``[T, B]`` to ``[T*B]`` when ``flatten`` (minibatches of single steps); recurrent
        ones keep ``[T, B]`` with where episodes start (``reset``) and the recurrent state
        the sampler had at the batch start. With ``value_norm`` the normalizer takes the
        batch's valid returns before they are normalized as the critic's targets (MAPPO
        updates it per minibatch; over an epoch that averages to this batch's statistics);
        the explained variance compares the returns with the estimates in the return's
        units."""
        device = self.agent.device
        agent_inputs = buffer_to(AgentInputs(observation=samples.env.observation,
                                             prev_action=samples.agent.prev_action,
                                             prev_reward=samples.env.prev_reward), device)
        self.agent.update_obs_rms(agent_inputs.observation)
        return_, advantage, valid = buffer_to(self.process_returns(samples), device)
        value = samples.agent.agent_info.value.to(device)
        if self.value_normalizer is not None:
            value = self.value_normalizer.denormalize(value)  # as process_returns read it
        explained = explained_variance_tensor(return_, value, valid)
        if self.value_normalizer is not None:
            self.value_normalizer.update(return_, valid)
            return_ = self.value_normalizer.normalize(return_)
        inputs = LossInputs(agent_inputs=agent_inputs, action=samples.agent.action.to(device),
                            return_=return_, advantage=advantage, valid=valid,
                            old_dist_info=buffer_to(samples.agent.agent_info.dist_info, device))
        T, B = return_.shape[:2]
        if self.agent.recurrent:
            inputs = RnnLossInputs(*inputs, reset=episode_starts(samples.env.done).to(device))
            rnn = buffer_to(samples.agent.agent_info.prev_rnn_state[0], device)  # [B, N, H]
            return LossBatch(inputs, rnn, B, explained)
        if flatten:
            inputs = buffer_func(inputs, lambda x: x.reshape(T * B, *x.shape[2:]))
        return LossBatch(inputs, None, T * B, explained)

    def value_error(self, value: torch.Tensor, return_: torch.Tensor) -> torch.Tensor:
        """The per-step value loss the losses average: ``0.5 (V - R)^2`` (``"mse"``), or
        with ``"huber"`` the same for ``|V - R| <= delta`` and ``delta (|V - R| - delta / 2)``
        beyond (linear, so rare large errors do not dominate the critic's gradient)."""
        if self.value_loss == "huber":
            error = value - return_
            size = error.abs()
            return torch.where(size <= self.huber_delta, 0.5 * error ** 2,
                               self.huber_delta * (size - 0.5 * self.huber_delta))
        return 0.5 * (value - return_) ** 2

    def minibatch_loss(self, batch: LossBatch, idxs: torch.Tensor | None) -> tuple:
        """``(loss, info)`` of the minibatch ``idxs`` (None: the whole batch): single steps of
        a flattened feedforward batch, or whole columns of a recurrent one, replayed from the
        sampler's recurrent state."""
        if batch.rnn is None:
            return self.loss_fn(*(batch.inputs if idxs is None else batch.inputs[idxs]))
        inputs = batch.inputs if idxs is None else batch.inputs[:, idxs]
        rnn = batch.rnn if idxs is None else buffer_func(batch.rnn, lambda s: s[idxs])
        init_rnn_state = buffer_func(rnn, lambda s: s.transpose(0, 1).contiguous())  # [N, B, H]
        return self.loss_fn(*tuple(inputs)[:len(LossInputs._fields)],
                            init_rnn_state=init_rnn_state, reset=inputs.reset)

    def step_terms(self, loss: torch.Tensor, info: Any,
                   set_to_none: bool = True) -> dict[str, torch.Tensor]:
        """Backward ``loss`` and clip the gradient norm to ``clip_grad_norm`` (no optimizer
        step); returns the step's diagnostics named by :attr:`step_fields`, device tensors
        (nothing is read). ``set_to_none=False`` keeps the gradients' addresses (a program)."""
        self.optimizer.zero_grad(set_to_none=set_to_none)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.agent.parameters(), self.clip_grad_norm)
        terms = dict(info._asdict(), loss=loss.detach(), gradNorm=grad_norm)
        return {name: terms[name] for name in self.step_fields}

    def gradient_step(self, batch: LossBatch, mb_size: int | None) -> Callable[[int, Any], None]:
        """Start the guarded steps of one ``optimize_agent`` call and return the step the
        update loop takes per minibatch, ``step(itr, idxs)`` (``idxs`` None: the whole batch).

        Every step goes through :class:`~rlfast.algos.guarded_steps.GuardedSteps`: a
        non-finite loss or gradient norm never reaches the weights, and with a fused
        optimizer nothing is read on the host until the call ends (the batch's explained
        variance comes back in that read). With ``compile`` on a feedforward batch, each
        step of ``mb_size`` items runs as one :class:`~rlfast.algos.graph_step.GraphStep`
        (a CUDA graph on CUDA); a smaller remainder minibatch runs eagerly, under the same
        sticky failure flag."""
        guard = self.guarded_steps
        program = self._program_for(batch, mb_size)
        guard.begin(failed=None if program is None else program.failed,
                    also=dict(explainedVariance=batch.explained))

        def eager(itr: int, idxs: Any) -> None:
            guard.step(itr, self.step_terms(*self.minibatch_loss(batch, idxs)), CHECKED)

        def replayed(itr: int, idxs: Any) -> None:
            if idxs is not None and len(idxs) != mb_size:
                return eager(itr, idxs)
            names, row, _ = program.step(idxs)
            guard.record(itr, names, row, program.n_extra)

        return eager if program is None else replayed

    def _program_for(self, batch: LossBatch, mb_size: int | None) -> GraphStep | None:
        """The step program for ``compile=True`` (or a test's ``program_capture``): built at
        the first call and whenever the batch's shape changes, with the batch copied into its
        static buffers. None for the plain step: ``compile`` off, a recurrent agent, or an
        optimizer that cannot refuse a step on the device (a program needs it)."""
        if not (self.compile or self.program_capture is not None):
            return None
        if batch.rnn is not None or not self.skips_on_device:
            return None
        key = (tuple(batch.inputs.return_.shape), mb_size)
        if self._program is None or self._program_key != key:
            self._program_inputs = static_copy(batch.inputs)
            whole = LossBatch(self._program_inputs, None, batch.n_items, batch.explained)
            device = self.agent.device
            idxs = None if mb_size is None else torch.zeros(mb_size, dtype=torch.long,
                                                             device=device)
            self._program = GraphStep(
                self.optimizer,
                lambda i: (self.step_terms(*self.minibatch_loss(whole, i), set_to_none=False),
                           None, None),
                CHECKED, idxs, capture_for(device, self.program_capture),
                owner=type(self).__name__, device=device)
            self._program_key = key
        copy_into(self._program_inputs, batch.inputs, type(self).__name__)
        self._program.begin()
        return self._program

    def opt_info(self, records: list) -> Any:
        """The call's diagnostics by name: each of :attr:`step_fields` as the list of its
        per-step values, and the batch's explained variance (once)."""
        columns = {name: [record.scalars[name] for record in records]
                   for name in self.step_fields}
        once = {name: [value] for name, value in self.guarded_steps.also_values.items()}
        return self.OptInfo(**columns, **once)

    @property
    def skips_on_device(self) -> bool:
        """Whether a non-finite step is refused on the device, without reading a value on the
        host: the optimizer is a fused one (see
        :func:`~rlfast.algos.guarded_steps.skips_on_device`)."""
        return self.guarded_steps.skips_on_device


# ---- diagnostics (computed under no_grad; they never feed a loss) ----------------------------

def approx_kl(ratio: torch.Tensor, valid: torch.Tensor | None) -> torch.Tensor:
    """KL(old || new) estimated from the likelihood ratio ``r = pi_new / pi_old`` at the
    sampled actions: ``E[(r - 1) - log r]`` over valid steps (unbiased, low variance and
    never negative; the estimator CleanRL logs)."""
    with torch.no_grad():
        return valid_mean((ratio - 1) - ratio.log(), valid)


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
