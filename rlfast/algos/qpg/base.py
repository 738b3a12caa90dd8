"""The replay-driven training loop DDPG, TD3 and SAC share.

Each iteration appends the sampler's batch to a time-limit replay buffer; once
``min_steps_learn`` steps are stored, ``replay_ratio * sampler_batch_size / batch_size``
gradient updates run. One update is one forward pass of every loss, ONE backward pass of their
sum and ONE optimizer step: actor losses reach the critic through detached critic parameters,
so they cannot move it, and the actor, critic (and entropy temperature) are parameter groups
of one optimizer with their own learning rates. The targets follow by Polyak averaging.
Diagnostics stay on the device until the call ends, and a NaN / inf loss or gradient norm
never reaches the weights (:class:`~rlfast.algos.guarded_steps.GuardedSteps`: the fused Adam
refuses the step on the device and the call raises ``NonFiniteError`` after its one read; a
host-side prioritized replay, or an optimizer without a fused kernel, makes one read per step).
Where the replay lives (host, device, or host behind a prefetcher) is ``replay_device``
(:mod:`rlfast.algos.replay_choice`).
"""
from __future__ import annotations

import abc
import inspect
from typing import Any

import torch

from rlfast.algos.base import RLAlgorithm
from rlfast.algos.graph_step import GraphStep, capture_for, check_compile
from rlfast.algos.guarded_steps import GuardedSteps
from rlfast.algos.replay_choice import (REPLAY_DEVICES, finish_shared_replay, make_learner_replay,
                                        takes_device_priorities)
from rlfast.replays.device_buffers import priority_alarm
from rlfast.utils.checks import check_choice, check_fraction, check_int, check_positive
from rlfast.utils.collections import namedarraytuple

__all__ = ["QpgAlgoBase", "SamplesToBuffer", "SamplesToBufferTl"]

SamplesToBuffer = namedarraytuple("SamplesToBuffer",
                                  ["observation", "action", "reward", "done", "timeout"])
SamplesToBufferTl = namedarraytuple("SamplesToBufferTl", SamplesToBuffer._fields +
                                    ("final_observation",))


class QpgAlgoBase(RLAlgorithm):
    """Replay, update count, optimizer and targets; subclasses define ``param_groups`` and
    ``losses(batch, update_policy)`` (returning the summed loss and a dict of scalar
    diagnostics tensors), and name their diagnostics in ``opt_info_fields``.

    The replay buffer is time-limit aware (prioritized with ``prioritized_replay``) unless
    ``ReplayBufferCls`` names another; ``replay_ratio`` is how many times each sampled step
    is replayed on average. ``linear_lr_schedule`` scales every learning rate by the fraction
    of the run still to come (zero at its end; rl-baselines3-zoo's ``lin_`` rates).
    ``replay_device`` says where replay lives (:mod:`rlfast.algos.replay_choice`);
    ``compile=True`` compiles the losses and runs each update as one program, a CUDA graph on
    CUDA (:mod:`rlfast.algos.graph_step`).
    """

    OptInfoCls = None  # namedtuple of lists, set by subclasses

    def __init__(self, discount: float, batch_size: int, min_steps_learn: int, replay_size: int,
                 replay_ratio: float, target_update_tau: float, target_update_interval: int,
                 policy_update_interval: int, OptimCls: type, optim_kwargs: dict | None,
                 initial_optim_state_dict: dict | None, clip_grad_norm: float,
                 n_step_return: int, bootstrap_timelimit: bool, ReplayBufferCls: type | None,
                 prioritized_replay: bool = False, pri_alpha: float = 0.6,
                 pri_beta: float = 0.4, linear_lr_schedule: bool = False,
                 replay_device: str = "auto", compile: bool = False):
        owner = type(self).__name__
        self.discount = check_fraction(discount, "discount", owner=owner)
        self.batch_size = check_positive(batch_size, "batch_size", integer=True, owner=owner)
        self.min_steps_learn = check_int(min_steps_learn, "min_steps_learn", minimum=0,
                                         owner=owner)
        self.replay_size = check_positive(replay_size, "replay_size", integer=True, owner=owner)
        self.replay_ratio = check_positive(replay_ratio, "replay_ratio", owner=owner)
        self.target_update_tau = check_fraction(target_update_tau, "target_update_tau",
                                                allow_zero=False, owner=owner)
        self.target_update_interval = check_positive(
            target_update_interval, "target_update_interval", integer=True, owner=owner)
        self.policy_update_interval = check_positive(
            policy_update_interval, "policy_update_interval", integer=True, owner=owner)
        self.OptimCls = OptimCls
        self.optim_kwargs = dict(optim_kwargs or {})
        self.initial_optim_state_dict = initial_optim_state_dict
        self.clip_grad_norm = check_positive(clip_grad_norm, "clip_grad_norm", owner=owner)
        self.n_step_return = check_positive(n_step_return, "n_step_return", integer=True,
                                            owner=owner)
        self.bootstrap_timelimit = bool(bootstrap_timelimit)
        self.ReplayBufferCls = ReplayBufferCls
        self.prioritized_replay = bool(prioritized_replay)
        self.pri_alpha, self.pri_beta = pri_alpha, pri_beta
        if not isinstance(linear_lr_schedule, bool):
            raise TypeError(f"{owner}: linear_lr_schedule must be True or False; got "
                            f"{linear_lr_schedule!r}")
        self.linear_lr_schedule = linear_lr_schedule
        self.replay_device = check_choice(replay_device, "replay_device", REPLAY_DEVICES,
                                          owner=owner)
        self.replay_choice: str | None = None  # what replay_device resolved to
        self.compile = check_compile(compile, owner)
        self.program_capture = None  # how step programs capture (None: by device; tests)
        self._programs: dict[bool, GraphStep] = {}
        self._compiled_losses = None
        self.update_counter = 0

    # ---- setup ---------------------------------------------------------------------------
    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
                   examples: Any, world_size: int = 1, rank: int = 0) -> None:
        """Bind the agent, derive the update schedule from the sampler's batch size, build
        the replay buffer from ``examples`` and the one optimizer. Needs a collector that
        resets mid-batch (idle steps would otherwise be replayed as transitions)."""
        self.world_size = check_int(world_size, "world_size", minimum=1, owner=type(self).__name__)
        self._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, async_=False)
        self.optim_initialize(rank)

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: Any, world_size: int = 1,
                         shared_replay: bool = True) -> Any:
        """Asynchronous runners, in the master before the sampler process forks: the
        schedule of :meth:`initialize` and a shared-memory (``Async*``) replay buffer, which
        is returned; :meth:`optim_initialize` builds the optimizer later, on the device."""
        self.world_size = check_int(world_size, "world_size", minimum=1, owner=type(self).__name__)
        self._setup(agent, sampler_n_itr, batch_spec, mid_batch_reset, examples, async_=True,
                    shared_replay=shared_replay)
        return self.replay_buffer

    def _setup(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
               examples: Any, async_: bool, shared_replay: bool = True) -> None:
        if not mid_batch_reset:
            raise ValueError(f"{type(self).__name__} replays single transitions: use a "
                             f"collector that resets mid-batch (CpuResetCollector / "
                             f"GpuResetCollector)")
        self.agent = agent
        self.n_itr = n_itr
        # Under SyncRl every rank samples: the schedule counts the steps of all of them.
        self.sampler_bs = batch_spec.size * (1 if async_ else self.world_size)
        self.replay_ranks = 1 if async_ else self.world_size
        self.replay_batch_size  # noqa: B018 - checks that the batch divides over the ranks
        self.updates_per_optimize = max(1, round(self.replay_ratio * self.sampler_bs /
                                                 self.batch_size))
        self.min_itr_learn = int(self.min_steps_learn // self.sampler_bs)
        agent.give_min_itr_learn(self.min_itr_learn)
        self._shared_replay = async_ and shared_replay
        if async_ and not shared_replay:  # the optimizer process builds it, on its device
            self._deferred_replay, self.replay_buffer = (examples, batch_spec), None
        else:
            self.initialize_replay_buffer(examples, batch_spec, async_=async_)

    def initialize_replay_buffer(self, examples: dict, batch_spec: Any,
                                 async_: bool = False) -> None:
        """Build the time-limit replay buffer (storing final observations when the env
        reports them; its shared-memory ``Async*`` variant with ``async_``), or
        ``ReplayBufferCls`` if given."""
        env_info = examples["env_info"]
        fields = getattr(env_info, "_fields", ())
        if "timeout" not in fields:
            raise ValueError(f"{type(self).__name__} needs env_info.timeout (rlfast's gymnasium "
                             f"wrapper provides it); env_info fields: {fields}")
        self._store_final = "final_observation" in fields
        example = self._to_buffer(examples["observation"], examples["action"],
                                  examples["reward"], examples["done"], env_info,
                                  normalize=False)
        kwargs = dict(example=example, size=self.rank_replay_size, B=batch_spec.B,
                      discount=self.discount, n_step_return=self.n_step_return)
        if self.prioritized_replay:
            kwargs.update(alpha=self.pri_alpha, beta=self.pri_beta)
        if self.ReplayBufferCls is not None:
            self.replay_buffer = self.ReplayBufferCls(**kwargs)
        else:
            self.replay_buffer, self.replay_choice = make_learner_replay(
                self.replay_device, getattr(self.agent, "device", None), self.replay_batch_size,
                async_=async_, owner=type(self).__name__, prioritized=self.prioritized_replay,
                time_limit=True, **kwargs)
        self._mask_timeouts = self.bootstrap_timelimit and not getattr(
            self.replay_buffer, "has_final_observation", False)

    @abc.abstractmethod
    def param_groups(self) -> list[dict]:
        """Optimizer parameter groups (dicts with ``params`` and ``lr``; ``clip=False`` keeps
        a group out of gradient-norm clipping; ``name`` (e.g. ``"q"``) names its gradient
        norm ``<name>GradNorm`` in non-finite errors)."""

    @abc.abstractmethod
    def losses(self, batch: Any, update_policy: bool) -> tuple[torch.Tensor, dict, torch.Tensor]:
        """``(summed loss, dict of scalar diagnostics tensors, per-sample |TD error|)`` of a
        replayed batch; policy terms only when ``update_policy``. The errors become the new
        priorities under prioritized replay."""

    def optim_initialize(self, rank: int = 0) -> None:
        """One optimizer over every parameter group (fused Adam where possible), restoring
        ``initial_optim_state_dict`` if given."""
        self.rank = rank
        self.build_deferred_replay()
        if getattr(self, "_shared_replay", False) and self.ReplayBufferCls is None:
            self.replay_buffer, self.replay_choice = finish_shared_replay(
                self.replay_buffer, self.replay_device, self.agent.device,
                self.replay_batch_size, owner=type(self).__name__)
        groups = self.param_groups()
        self._clip_groups = [list(g["params"]) for g in groups if g.get("clip", True)]
        self._grad_norm_names = [f"{g.get('name', f'group{i}')}GradNorm"
                                 for i, g in enumerate(groups) if g.get("clip", True)]
        for g in groups:  # rlfast's own keys stay out of the optimizer (and its state_dict)
            g.pop("clip", None)
            g.pop("name", None)
        kwargs = dict(self.optim_kwargs)
        if self.OptimCls in (torch.optim.Adam, torch.optim.AdamW) and \
                not {"fused", "foreach"} & set(kwargs):
            kwargs["fused"] = True  # one kernel for all parameters: ~3x faster steps on CPU
        self.optimizer = self.OptimCls(groups, **kwargs)
        # The configured rates, kept before a restored state dict replaces the groups' ``lr``
        # (the schedule scales these, so a resumed run continues the same schedule).
        self._base_lrs = [g["lr"] for g in self.optimizer.param_groups]
        if self.initial_optim_state_dict is not None:
            self.load_optim_state_dict(self.initial_optim_state_dict)
        self.guarded_steps = GuardedSteps(self.optimizer, self.check_finite)
        self._programs = {}  # built for this optimizer at the first updates

    @property
    def device_priorities(self) -> bool:
        """Whether new priorities go to the replay as a device tensor, unread (a device
        replay or a prefetcher); else they are read on the host with the step's one read."""
        return takes_device_priorities(self.replay_buffer)

    def _to_buffer(self, observation: Any, action: Any, reward: Any, done: Any, env_info: Any,
                   normalize: bool = True) -> Any:
        if normalize:
            action = self.agent.normalize_action(action)
        if self._store_final:
            return SamplesToBufferTl(observation, action, reward, done, env_info.timeout,
                                     env_info.final_observation)
        return SamplesToBuffer(observation, action, reward, done, env_info.timeout)

    def samples_to_buffer(self, samples: Any) -> Any:
        """The replayed fields of a sampler batch, actions in normalized units."""
        return self._to_buffer(samples.env.observation, samples.agent.action, samples.env.reward,
                               samples.env.done, samples.env.env_info)

    @property
    def replay_batch_size(self) -> int:
        """Transitions per replayed batch: this rank's share of ``batch_size``."""
        return self.rank_share(self.batch_size, "batch_size")

    # ---- training ------------------------------------------------------------------------
    def optimize_agent(self, itr: int, samples: Any = None, sampler_itr: int | None = None) -> Any:
        """Append the batch to replay, then (once learning has started) run
        ``updates_per_optimize`` updates: every loss, one backward pass, one optimizer step,
        priorities and targets updated as configured. Returns ``OptInfoCls`` of lists."""
        if samples is not None:
            self.replay_buffer.append_samples(self.samples_to_buffer(samples))
        if not self.learning(itr):
            return self.OptInfoCls(*([] for _ in self.OptInfoCls._fields))
        if self.linear_lr_schedule:
            self.schedule_learning_rates(itr if sampler_itr is None else sampler_itr)
        guard = self.guarded_steps
        guard.begin(alarm=priority_alarm(self.replay_buffer))  # all-zero draws
        for program in self._programs.values():
            program.begin()
        counter_at_begin = self.update_counter
        host_priorities = self.prioritized_replay and not self.device_priorities
        for _ in range(self.updates_per_optimize):
            batch = self.replay_buffer.sample_batch(self.replay_batch_size)
            update_policy = self.update_counter % self.policy_update_interval == 0
            program = self.graph_step(batch, update_policy)
            if program is not None:  # the whole step in one program (a CUDA graph on CUDA)
                names, row, td_abs = program.step(batch)
                host = guard.record(itr, names, row, program.n_extra,
                                    read_now=td_abs if host_priorities else None)
            else:
                scalars, extra, td_abs = self.update_terms(batch, update_policy)
                host = guard.step(itr, scalars, ("loss", *self._grad_norm_names), extra=extra,
                                  read_now=td_abs if host_priorities else None)
            if self.prioritized_replay:
                self.replay_buffer.update_batch_priorities(
                    host if host_priorities else td_abs.detach())
            self.update_counter += 1
            if self.on_update is not None:
                self.on_update(self.update_counter)
            if self.update_counter % self.target_update_interval == 0:
                self.agent.update_target(self.target_update_tau)
        records = guard.end_counted(itr, self, counter_at_begin)
        columns = zip(*(r.extra.tolist() for r in records))
        return self.OptInfoCls(*([v for v in col if v == v] for col in columns))  # drop NaN

    def update_terms(self, batch: Any, update_policy: bool,
                     set_to_none: bool = True) -> tuple[dict, list, torch.Tensor]:
        """Every loss, one backward pass and the per-group gradient clipping of one replayed
        batch (no optimizer step): ``(scalars, extra, |TD error|)``. ``scalars``: the loss
        terms, the summed loss and the gradient norms (the loss and norms must be finite;
        all are named in an error); ``extra``: the OptInfo fields' 0-d tensors in order. Device
        tensors: nothing is read. ``set_to_none=False`` keeps the gradients' addresses (a
        program)."""
        loss, info, td_abs = self.compiled_losses(batch, update_policy)
        self.optimizer.zero_grad(set_to_none=set_to_none)
        loss.backward()
        norms = [torch.nn.utils.clip_grad_norm_(params, self.clip_grad_norm, foreach=True)
                 for params in self._clip_groups]
        scalars = {**info, "loss": loss.detach(), **dict(zip(self._grad_norm_names, norms))}
        row = self.diagnostics(info, norms, update_policy)
        extra = [row[f] for f in self.OptInfoCls._fields]  # stacked once per call
        return scalars, extra, td_abs

    def compiled_losses(self, batch: Any, update_policy: bool) -> Any:
        """``losses`` under ``torch.compile`` when ``compile`` is on (one compiled function
        per value of ``update_policy``), else ``losses`` itself."""
        if not self.compile:
            return self.losses(batch, update_policy)
        if self._compiled_losses is None:
            self._compiled_losses = torch.compile(self.losses, dynamic=False)
        return self._compiled_losses(batch, update_policy)

    def graph_step(self, batch: Any, update_policy: bool) -> GraphStep | None:
        """The step program for ``compile=True`` (or a test's ``program_capture``), built at
        its first batch; None for the plain step: when the optimizer has no fused kernel to
        refuse a step on the device, and for TD3's critic-only updates (a program keeps every
        gradient allocated, and Adam would move the actor on zero gradients by its momentum,
        where the plain step leaves parameters without a gradient alone)."""
        if not (self.compile or self.program_capture is not None):
            return None
        if not self.guarded_steps.skips_on_device or not update_policy:
            return None
        program = self._programs.get(update_policy)
        if program is None:
            program = GraphStep(
                self.optimizer,
                lambda b: self.update_terms(b, update_policy, set_to_none=False),
                ("loss", *self._grad_norm_names), batch,
                capture_for(self.agent.device, self.program_capture), owner=type(self).__name__)
            program.begin()
            self._programs[update_policy] = program
        return program

    def schedule_learning_rates(self, itr: int) -> None:
        """``linear_lr_schedule``: every group's rate is its configured one times the fraction
        of the run's sampler iterations still to come, ``(n_itr - itr) / n_itr`` (SB3's
        ``lin_<rate>`` schedules of rl-baselines3-zoo: zero at the end of the run)."""
        n_itr = max(int(self.n_itr), 1)
        fraction = min(max(n_itr - itr, 0) / n_itr, 1.0)
        for group, base_lr in zip(self.optimizer.param_groups, self._base_lrs):
            group["lr"] = base_lr * fraction

    def diagnostics(self, info: dict, norms: list, update_policy: bool) -> dict:
        """Named scalar tensors of one update (NaN for policy terms on critic-only updates)."""
        return info

    # ---- target helpers ------------------------------------------------------------------
    def bootstrap_factor(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(discount factor of the target value, valid mask or None)`` for a batch.

        With ``bootstrap_timelimit`` the factor is the buffer's ``bootstrap_discount``: a
        time-limit end bootstraps from the stored final observation. If no final observation
        is stored, time-limit windows are masked out instead of treated as terminal. Without
        ``bootstrap_timelimit`` every ``done`` is terminal: ``gamma ** n * (1 - done_n)``.
        """
        if not self.bootstrap_timelimit:
            factor = (self.discount ** self.n_step_return) * (1 - batch.done_n.float())
            return factor, None
        valid = (1 - batch.timeout_n.float()) if self._mask_timeouts else None
        return batch.bootstrap_discount, valid

    def weighted_mean(self, losses: torch.Tensor, batch: Any,
                      valid: torch.Tensor | None) -> torch.Tensor:
        """Mean over the batch with importance weights (prioritized) and the valid mask."""
        if self.prioritized_replay:
            losses = losses * batch.is_weights
        if valid is None:
            return losses.mean()
        return (losses * valid).sum() / valid.sum().clamp(min=1.0)


def qpg_base_arguments(arguments: dict) -> dict:
    """The :class:`QpgAlgoBase` constructor arguments picked from a subclass constructor's
    ``locals()``, so DDPG and TD3 keep their own documented signatures and defaults without
    repeating the list."""
    names = [n for n in inspect.signature(QpgAlgoBase.__init__).parameters if n != "self"]
    return {name: arguments[name] for name in names}
