"""Deep Q-learning: replay, target network, Huber / MSE TD loss, double-Q, n-step returns and
prioritized replay, in one algorithm whose options select the variant."""
from __future__ import annotations

from collections import namedtuple
from typing import Any

import torch

from rlfast.algos.base import RLAlgorithm
from rlfast.algos.graph_step import GraphStep, capture_for, check_compile
from rlfast.algos.guarded_steps import GuardedSteps
from rlfast.algos.replay_choice import (REPLAY_DEVICES, finish_shared_replay, make_learner_replay,
                                        takes_device_priorities)
from rlfast.algos.utils import build_optimizer
from rlfast.replays.device_buffers import priority_alarm
from rlfast.utils.buffer import buffer_to
from rlfast.utils.checks import check_choice, check_fraction, check_int
from rlfast.utils.collections import namedarraytuple
from rlfast.utils.schedules import linear_schedule
from rlfast.utils.tensor import select_at_indexes

OptInfo = namedtuple("OptInfo", ["loss", "gradNorm", "tdAbsErr"])
SamplesToBuffer = namedarraytuple("SamplesToBuffer", ["observation", "action", "reward", "done"])


MASKED_ACTION = -1


def mark_masked_steps(action: Any, env_info: Any) -> Any:
    """``action`` with :data:`MASKED_ACTION` at the steps ``env_info.valid`` marks invalid (a
    multi-agent env's departed agent, :mod:`rlfast.envs.multiagent`), else ``action`` itself.

    Why in the action: the replay buffers (host, device, shared, prefetched, prioritized)
    hand back the stored action of every drawn transition, so the mark travels with the
    transition through all of them with no extra field, and the action of a masked step
    was never given to the environment anyway. A masked step has ``done`` set and reward 0,
    so no valid transition's n-step return or bootstrap reaches through it; only the masked
    transitions themselves must be kept out of the loss."""
    valid = getattr(env_info, "valid", None) if env_info is not None else None
    if valid is None:
        return action
    if action.dtype == torch.bool or not (action.dtype.is_signed or action.is_floating_point()):
        raise TypeError(f"multi-agent replay marks masked steps with action {MASKED_ACTION}; "
                        f"the action dtype {action.dtype} cannot hold it")
    valid = torch.as_tensor(valid, device=action.device).bool()
    return torch.where(valid, action, torch.full_like(action, MASKED_ACTION))


def masked_actions(action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``(action, weight)`` of a replayed batch: the actions with :data:`MASKED_ACTION`
    replaced by 0 (any index, for the gather) and a float weight, 0 for those transitions
    and 1 for the rest. On the device; nothing is read."""
    valid = action != MASKED_ACTION
    return action.clamp(min=0), valid.to(torch.float32)


def weighted_mean(losses: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``sum(losses * weight) / max(sum(weight), 1)``: the mean over the transitions that
    count (all of them for single-agent batches, where it equals ``losses.mean()``)."""
    return (losses * weight).sum() / weight.sum().clamp(min=1.0)


def huber(delta: torch.Tensor, delta_clip: float | None) -> torch.Tensor:
    """0.5 d^2 for |d| <= c, else c (|d| - c/2); plain 0.5 d^2 when ``delta_clip`` is None."""
    squared = 0.5 * delta ** 2
    if delta_clip is None:
        return squared
    abs_delta = delta.abs()
    return torch.where(abs_delta <= delta_clip, squared,
                       delta_clip * (abs_delta - 0.5 * delta_clip))


class DQN(RLAlgorithm):
    """DQN with the common extensions as options.

    Each iteration the sampler's batch is appended to the replay buffer; once
    ``min_steps_learn`` steps are stored, ``replay_ratio * batch_size_sampled / batch_size``
    gradient updates run on replayed minibatches (``replay_ratio`` = how many times each sampled
    step is replayed on average). The target network is updated every ``target_update_interval``
    updates, hard (``target_update_tau=1``) or soft (Polyak with ``tau``). The replay buffer
    is prioritized with ``prioritized_replay`` (its ``beta`` annealed from ``pri_beta_init``
    to ``pri_beta_final`` over ``pri_beta_steps`` once learning starts) and stores stacked
    frames once with ``frame_buffer``; ``ReplayBufferCls`` overrides the choice. Under an
    asynchronous runner the sampler gets new parameters every ``updates_per_sync`` updates.
    ``replay_device`` says where replay lives (``auto``: host on the CPU; on a GPU the device,
    or the host behind a prefetcher when memory is short; see
    :mod:`rlfast.algos.replay_choice`). ``compile=True`` compiles the loss and runs the whole
    update as one program, a CUDA graph on CUDA (:mod:`rlfast.algos.graph_step`).
    """

    opt_info_fields = tuple(OptInfo._fields)
    replay_sequences = False  # R2D1 replays sequences
    masked_steps = False  # multi-agent batches: set from the examples (replay_example)

    def __init__(self, discount: float = 0.99, batch_size: int = 32, min_steps_learn: int = 50_000,
                 delta_clip: float | None = 1.0, replay_size: int = 1_000_000,
                 replay_ratio: float = 8, target_update_tau: float = 1.0,
                 target_update_interval: int = 312, n_step_return: int = 1,
                 learning_rate: float = 2.5e-4, OptimCls: type = torch.optim.Adam,
                 optim_kwargs: dict | None = None, initial_optim_state_dict: dict | None = None,
                 clip_grad_norm: float = 10.0, eps_steps: int = 1_000_000,
                 double_dqn: bool = False, prioritized_replay: bool = False,
                 pri_alpha: float = 0.6, pri_beta_init: float = 0.4, pri_beta_final: float = 1.0,
                 pri_beta_steps: int = 50_000_000, default_priority: float | None = None,
                 ReplayBufferCls: type | None = None, frame_buffer: bool = False,
                 updates_per_sync: int = 1, replay_device: str = "auto", compile: bool = False):
        owner = type(self).__name__
        target_update_tau = check_fraction(target_update_tau, "target_update_tau",
                                           allow_zero=False, owner=owner)
        self.discount = check_fraction(discount, "discount", owner=owner)
        self.batch_size = check_int(batch_size, "batch_size", minimum=1, owner=owner)
        self.min_steps_learn = int(min_steps_learn)
        self.delta_clip = delta_clip
        self.replay_size = int(replay_size)
        self.replay_ratio = replay_ratio
        self.target_update_tau = target_update_tau
        self.target_update_interval = int(target_update_interval)
        self.n_step_return = check_int(n_step_return, "n_step_return", minimum=1, owner=owner)
        self.learning_rate = learning_rate
        self.OptimCls = OptimCls
        self.optim_kwargs = dict(optim_kwargs or {})
        self.initial_optim_state_dict = initial_optim_state_dict
        self.clip_grad_norm = clip_grad_norm
        self.eps_steps = int(eps_steps)
        self.double_dqn = double_dqn
        self.prioritized_replay = prioritized_replay
        self.pri_alpha, self.pri_beta_init = pri_alpha, pri_beta_init
        self.pri_beta_final, self.pri_beta_steps = pri_beta_final, int(pri_beta_steps)
        self.default_priority = default_priority
        self.ReplayBufferCls = ReplayBufferCls
        self.frame_buffer = frame_buffer
        self.updates_per_sync = check_int(updates_per_sync, "updates_per_sync", minimum=1,
                                          owner=owner)
        self.replay_device = check_choice(replay_device, "replay_device", REPLAY_DEVICES,
                                          owner=owner)
        self.replay_choice: str | None = None  # what replay_device resolved to
        self.compile = check_compile(compile, owner)
        self.program_capture = None  # how the step program captures (None: by device; tests)
        self._program: GraphStep | None = None
        self._compiled_loss = None
        self.update_counter = 0

    # ---- setup ---------------------------------------------------------------------------
    def initialize(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
                   examples: Any, world_size: int = 1, rank: int = 0) -> None:
        """Bind the agent, derive the update schedule from the sampler's batch size (updates
        per iteration, first learning iteration, epsilon and beta annealing), build the
        replay buffer from ``examples`` and the optimizer."""
        self.world_size = check_int(world_size, "world_size", minimum=1, owner=type(self).__name__)
        self._setup(agent, n_itr, batch_spec, mid_batch_reset, examples, async_=False)
        self.optim_initialize(rank)

    def async_initialize(self, agent: Any, sampler_n_itr: int, batch_spec: Any,
                         mid_batch_reset: bool, examples: Any, world_size: int = 1,
                         shared_replay: bool = True) -> Any:
        """Asynchronous runners, in the master before the sampler process forks: the same
        schedule as :meth:`initialize` (in sampler iterations) and a replay buffer in shared
        memory (an ``Async*`` buffer), which is returned; the optimizer is built later by
        :meth:`optim_initialize`, once the agent is on its device."""
        self.world_size = check_int(world_size, "world_size", minimum=1, owner=type(self).__name__)
        self._setup(agent, sampler_n_itr, batch_spec, mid_batch_reset, examples, async_=True,
                    shared_replay=shared_replay)
        return self.replay_buffer

    def _setup(self, agent: Any, n_itr: int, batch_spec: Any, mid_batch_reset: bool,
               examples: Any, async_: bool, shared_replay: bool = True) -> None:
        self.check_collector(mid_batch_reset)
        self.agent = agent
        self.n_itr = n_itr
        self.mid_batch_reset = mid_batch_reset
        # Under SyncRl every rank samples: the schedule counts the steps of all of them.
        self.sampler_bs = batch_spec.size * (1 if async_ else self.world_size)
        self.replay_ranks = 1 if async_ else self.world_size
        self.replay_batch_size  # noqa: B018 - checks that the batch divides over the ranks
        self.updates_per_optimize = max(1, round(self.replay_ratio * self.sampler_bs
                                                 / self.batch_size))
        self.min_itr_learn = int(self.min_steps_learn // self.sampler_bs)
        eps_itr_max = max(1, self.eps_steps // self.sampler_bs)
        if hasattr(agent, "set_epsilon_itr_min_max"):
            agent.set_epsilon_itr_min_max(self.min_itr_learn, self.min_itr_learn + eps_itr_max)
        self.pri_beta_itr = max(1, self.pri_beta_steps // self.sampler_bs)
        self._shared_replay = async_ and shared_replay
        if async_ and not shared_replay:  # the optimizer process builds it, on its device
            self._deferred_replay, self.replay_buffer = (examples, batch_spec), None
        else:
            self.initialize_replay_buffer(examples, batch_spec, async_=async_)

    def check_collector(self, mid_batch_reset: bool) -> None:
        """Refuse a collector that cannot feed this algorithm (here: one without resets in the
        middle of a batch, whose idle steps would be replayed as transitions)."""
        if not mid_batch_reset:
            raise ValueError(f"{type(self).__name__} replays single transitions: use a collector "
                             "that resets mid-batch (CpuResetCollector / GpuResetCollector)")

    @property
    def replay_batch_size(self) -> int:
        """What ``sample_batch`` is asked for (transitions here; sequences in R2D1): this
        rank's share of ``batch_size``."""
        return self.rank_share(self.batch_size, "batch_size")

    def optim_initialize(self, rank: int = 0) -> None:
        """Build the optimizer over the agent's parameters (restoring a given state); in an
        asynchronous run's optimizer process, also put a prefetcher in front of the shared
        replay where ``replay_device`` asks for one (see :mod:`rlfast.algos.replay_choice`)."""
        self.rank = rank
        self.build_deferred_replay()
        if getattr(self, "_shared_replay", False) and self.ReplayBufferCls is None:
            self.replay_buffer, self.replay_choice = finish_shared_replay(
                self.replay_buffer, self.replay_device, self.agent.device,
                self.replay_batch_size, owner=type(self).__name__)
        self.optimizer = build_optimizer(self.OptimCls, self.agent.parameters(),
                                         prefer_fused=True, lr=self.learning_rate,
                                         **self.optim_kwargs)
        if self.initial_optim_state_dict is not None:
            self.optimizer.load_state_dict(self.initial_optim_state_dict)
        self.guarded_steps = GuardedSteps(self.optimizer, self.check_finite)
        self._program = None  # built for this optimizer at the first update

    def replay_example(self, examples: dict) -> Any:
        """One sample of what the replay buffer stores, from the sampler's examples. Notes
        whether the batches are multi-agent ones whose masked steps the loss must skip
        (``masked_steps``: an ``env_info.valid`` field, see :meth:`samples_to_buffer`)."""
        env_info = examples.get("env_info") if hasattr(examples, "get") else None
        self.masked_steps = getattr(env_info, "valid", None) is not None
        return SamplesToBuffer(observation=examples["observation"], action=examples["action"],
                               reward=examples["reward"], done=examples["done"])

    def replay_kwargs(self) -> dict:
        """Constructor arguments of the replay buffer beyond example, size and B."""
        kwargs = dict(discount=self.discount, n_step_return=self.n_step_return)
        if self.prioritized_replay:
            kwargs.update(alpha=self.pri_alpha, beta=self.pri_beta_init)
            if self.default_priority is not None:
                kwargs["default_priority"] = self.default_priority
        return kwargs

    def initialize_replay_buffer(self, examples: dict, batch_spec: Any,
                                 async_: bool = False) -> None:
        """Build the replay buffer: ``ReplayBufferCls`` if given, else the one
        :func:`~rlfast.replays.make_replay_buffer` picks for these options, kept where
        ``replay_device`` says (:mod:`rlfast.algos.replay_choice`); with ``async_`` its
        ``Async*`` shared-memory variant."""
        kwargs = dict(example=self.replay_example(examples), size=self.rank_replay_size,
                      B=batch_spec.B, **self.replay_kwargs())
        if self.ReplayBufferCls is not None:
            self.replay_buffer = self.ReplayBufferCls(**kwargs)
            return
        self.replay_buffer, self.replay_choice = make_learner_replay(
            self.replay_device, getattr(self.agent, "device", None), self.replay_batch_size,
            async_=async_, owner=type(self).__name__, prioritized=self.prioritized_replay,
            frames=self.frame_buffer, sequence=self.replay_sequences, **kwargs)

    @property
    def device_priorities(self) -> bool:
        """Whether new priorities go to the replay as a device tensor, unread (a device
        replay or a prefetcher); else they are read on the host with the step's one read."""
        return takes_device_priorities(self.replay_buffer)

    def samples_to_buffer(self, samples: Any) -> Any:
        """The fields of a sampler batch that go into the replay buffer. Multi-agent batches
        (``env_info.valid``) store a departed agent's masked steps with the action
        :data:`MASKED_ACTION`, which the loss gives zero weight (see :func:`masked_actions`)."""
        return SamplesToBuffer(observation=samples.env.observation,
                               action=mark_masked_steps(samples.agent.action,
                                                        getattr(samples.env, "env_info", None)),
                               reward=samples.env.reward, done=samples.env.done)

    # ---- training ------------------------------------------------------------------------
    def optimize_agent(self, itr: int, samples: Any = None,
                       sampler_itr: int | None = None) -> OptInfo:
        """Append the batch to replay, then (once learning has started) run
        ``updates_per_optimize`` gradient steps on replayed batches, updating priorities and
        the target network as configured. A NaN / inf loss or gradient norm is never applied
        to the weights and raises ``NonFiniteError`` naming it (see
        :class:`~rlfast.algos.guarded_steps.GuardedSteps`); the call reads the host at most
        once per gradient step, and once in all when the optimizer refuses bad steps on the
        device and the priorities (if any) stay there too."""
        if samples is not None:
            self.replay_buffer.append_samples(self.samples_to_buffer(samples))
        if not self.learning(itr):
            return OptInfo(loss=[], gradNorm=[], tdAbsErr=[])
        guard = self.guarded_steps
        guard.begin(alarm=priority_alarm(self.replay_buffer))  # all-zero draws
        if self._program is not None:
            self._program.begin()
        counter_at_begin = self.update_counter
        host_priorities = self.prioritized_replay and not self.device_priorities
        noisy = bool(getattr(self.agent, "noisy", False))
        for _ in range(self.updates_per_optimize):
            batch = self.replay_buffer.sample_batch(self.replay_batch_size)
            if noisy:  # fresh noise in the online and the target network for every update
                self.agent.reset_noise()
            program = self.graph_step(batch)
            if program is not None:  # the whole step in one program (a CUDA graph on CUDA)
                names, row, priorities = program.step(batch)
                host = guard.record(itr, names, row, program.n_extra,
                                    read_now=priorities if host_priorities else None)
            else:
                scalars, extra, priorities = self.update_terms(batch)
                host = guard.step(itr, scalars, ("loss", "gradNorm"), extra=extra,
                                  read_now=priorities if host_priorities else None)
            if self.prioritized_replay:
                self.replay_buffer.update_batch_priorities(
                    host if host_priorities else priorities.detach())
            self.update_counter += 1
            if self.on_update is not None:
                self.on_update(self.update_counter)
            if self.update_counter % self.target_update_interval == 0:
                self.agent.update_target(tau=self.target_update_tau)
        records = guard.end_counted(itr, self, counter_at_begin)
        self.update_itr_hyperparams(itr)
        return OptInfo(loss=[r.scalars["loss"] for r in records],
                       gradNorm=[r.scalars["gradNorm"] for r in records],
                       tdAbsErr=[v for r in records for v in r.extra.tolist()])

    def update_terms(self, batch: Any, set_to_none: bool = True) -> tuple[dict, Any, Any]:
        """Forward, loss, backward and gradient clipping of one replayed batch (no optimizer
        step): ``(scalars, extra, priorities)``, the loss and gradient norm, every 8th
        |TD error| for the diagnostics, and the new priorities (|TD error|). Device tensors:
        nothing is read. ``set_to_none=False`` keeps the gradients' addresses (a program)."""
        loss, td_abs_errors = self.compiled_loss(batch)
        self.optimizer.zero_grad(set_to_none=set_to_none)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(self.agent.parameters(), self.clip_grad_norm)
        return dict(loss=loss.detach(), gradNorm=grad_norm), td_abs_errors.reshape(-1)[::8], \
            td_abs_errors

    def graph_step(self, batch: Any) -> GraphStep | None:
        """The step program for ``compile=True`` (or a test's ``program_capture``), built at
        the first batch; None for the plain step, also when the optimizer cannot refuse a
        step on the device (it has no fused kernel), which a program needs, and for noisy
        networks (each sampling step replaces their noise tensors, which a captured graph would
        not see: they train with the compiled loss, step by step)."""
        if not (self.compile or self.program_capture is not None):
            return None
        if not self.guarded_steps.skips_on_device or getattr(self.agent, "noisy", False):
            return None
        if self._program is None:
            self._program = GraphStep(
                self.optimizer, lambda b: self.update_terms(b, set_to_none=False),
                ("loss", "gradNorm"), batch,
                capture_for(self.agent.device, self.program_capture), owner=type(self).__name__)
            self._program.begin()
        return self._program

    def update_itr_hyperparams(self, itr: int) -> None:
        """Anneal the prioritized-replay ``beta`` linearly over ``pri_beta_steps`` from the
        first learning iteration."""
        if self.prioritized_replay:
            beta = linear_schedule(itr, self.min_itr_learn, self.min_itr_learn + self.pri_beta_itr,
                                   self.pri_beta_init, self.pri_beta_final)
            self.replay_buffer.set_beta(beta)

    def _to_device(self, batch: Any) -> Any:
        return buffer_to(batch, self.agent.device)

    def target_q(self, target_inputs: Any) -> torch.Tensor:
        """max_a' Q_target(s', a'), or Q_target(s', argmax_a' Q(s', a')) with double DQN."""
        with torch.no_grad():
            target_qs = self.agent.target(*target_inputs)
            if self.double_dqn:
                next_action = self.agent(*target_inputs).argmax(dim=-1)
                return select_at_indexes(next_action, target_qs)
            return target_qs.max(dim=-1).values

    def loss(self, batch: Any) -> tuple[torch.Tensor, torch.Tensor]:
        """``(loss, |TD error|)`` of a replayed batch; the errors become the new priorities.

        y = R^(n) + gamma^n (1 - done_n) Q_target(s_{t+n}); loss = Huber(y - Q(s, a)), weighted
        by the importance weights under prioritized replay.
        """
        batch = self._to_device(batch)
        action, weight = masked_actions(batch.action) if self.masked_steps else (batch.action,
                                                                                  None)
        q = select_at_indexes(action, self.agent(*batch.agent_inputs))
        not_done = 1.0 - batch.done_n.float()
        y = batch.return_ + ((self.discount ** self.n_step_return) * not_done
                             * self.target_q(batch.target_inputs))
        delta = y - q
        losses = huber(delta, self.delta_clip)
        if self.prioritized_replay:
            losses = losses * batch.is_weights
        td_abs_errors = delta.detach().abs()
        if self.delta_clip is not None:
            td_abs_errors = td_abs_errors.clamp(max=self.delta_clip)
        if weight is not None:  # masked steps: no loss, and priority 0 (never drawn again)
            return weighted_mean(losses, weight), td_abs_errors * weight
        return losses.mean(), td_abs_errors
