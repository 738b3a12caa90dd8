"""Asynchronous runners: sampling and optimization in separate processes.

The master process runs the optimizer and does all logging. It forks one sampler process
(an ``Async*`` sampler, which may fork its own workers) that collects batches at full speed
into a shared-memory double buffer; each finished batch is appended to the algorithm's
shared-memory replay buffer, by the master between its updates (``copier="optimizer"``, the
default) or by a copier process (``copier="process"``, as rlpyt does); see
``rlfast.runners.async_processes``. The optimizer is throttled so that the replay ratio
never exceeds the algorithm's ``replay_ratio`` (``rlfast.runners.replay_pace``, which also
writes the async columns of each log row). Every ``updates_per_sync`` updates it publishes
its parameters to shared CPU memory, and the sampler copies them before its next batch when
they changed (see ``rlfast.agents.param_sharing``).

The runner owns the loop and composes the rest (see ``rlfast.runners.minibatch_rl``); what
it has alike with the synchronous runners is written once in ``rlfast.runners.common``.
``AsyncRl`` and ``AsyncRlEval`` differ only in how they track performance.

Faults: a sampler, worker or copier that raises or dies ends the run at once with its
traceback (the children are watched on every wait); Ctrl-C stops every process; shutdown
terminates any sampler worker left behind, so no process or shared memory outlives the run.
"""
from __future__ import annotations

import abc
from typing import Any

from rlfast.agents.param_sharing import AsyncParams
from rlfast.algos.replay_choice import close_replay
from rlfast.runners import common
from rlfast.runners.async_processes import AsyncChildren, AsyncRunError
from rlfast.runners.cadence import LogCadence
from rlfast.runners.diagnostics import Diagnostics, TrajInfos
from rlfast.runners.interrupts import TrainingGuard
from rlfast.runners.master_affinity import MasterAffinity
from rlfast.runners.optimizer_ranks import OptimizerRanks, async_affinity, blame_failed_rank
from rlfast.runners.replay_pace import ReplayPace, check_copier
from rlfast.runners.snapshots import (Snapshots, fresh_episode_seed, log_resumed,
                                      restore_models_and_replay, restore_replay,
                                      restore_training_state, resume_start_itr)
from rlfast.runners.tracking import EvalReturns, TrainTrajWindow
from rlfast.utils.checks import check_int
from rlfast.utils.distributed import DEFAULT_DIST_TIMEOUT_S, DistEnv, check_dist_settings
from rlfast.utils.logging import logger
from rlfast.utils.processes import mp_context
from rlfast.utils.seed import make_seed, set_seed

__all__ = ["AsyncRlBase", "AsyncRl", "AsyncRlEval", "AsyncRunError", "async_affinity"]


class AsyncRlBase(abc.ABC):
    """The throttled optimizer loop of the async runners.

    ``affinity``: a decoded ``ass`` affinity (``optimizer`` list, ``sampler`` dict) or None.
    ``copier``: ``"optimizer"`` (the master appends each batch between updates) or
    ``"process"`` (a copier process does). ``n_steps`` counts environment steps. Several
    optimizer ranks (an ``optimizer`` list of N entries) train together (see
    ``rlfast.runners.optimizer_ranks``; ``backend``, ``dist_timeout``).

    ``sampler_throttle`` (optimizer copier only): also hold the sampler back, so that the
    replay ratio never falls below ``replay_ratio`` either (see ``rlfast.runners.replay_pace``):
    the optimizer then trains on the same number of samples per environment step as the
    synchronous runner while sampling and training still overlap. Off (default), the sampler
    runs at full speed and the replay ratio falls below ``replay_ratio`` whenever the
    optimizer cannot keep up.

    Subclasses decide how performance is tracked (``tracking_cls``, ``on_batch``,
    ``finish``); ``log_traj_window`` and ``stop_return`` are as in ``MinibatchRlBase``.
    """

    tracking_cls: type[TrainTrajWindow] | type[EvalReturns] | None = None  # a subclass's

    def __init__(self, algo: Any, agent: Any, sampler: Any, n_steps: int,
                 seed: int | None = None, affinity: dict | None = None,
                 log_interval_steps: int = 100_000, copier: str = "optimizer",
                 sampler_throttle: bool = False, progress_bar: bool = True,
                 backend: str | None = None, dist_timeout: float = DEFAULT_DIST_TIMEOUT_S, *,
                 log_traj_window: int = 100, stop_return: float | None = None):
        owner = type(self).__name__
        check_copier(copier, sampler_throttle)
        if not getattr(sampler, "is_async", False):
            raise TypeError(f"{owner} needs an asynchronous sampler "
                            f"(AsyncSerialSampler, AsyncCpuSampler, AsyncGpuSampler or "
                            f"AsyncAlternatingSampler); got {type(sampler).__name__}")
        self.async_affinity = async_affinity(affinity)
        self.n_steps = check_int(n_steps, "n_steps", minimum=1, owner=owner)
        self.log_interval_steps = check_int(log_interval_steps, "log_interval_steps",
                                            minimum=1, owner=owner)
        self.algo, self.agent, self.sampler = algo, agent, sampler
        self.sampling_agent = agent  # the sampler process acts with its copy of this agent
        self.seed = seed
        self.affinity = dict(self.async_affinity.optimizer[0])  # the master's: rank 0's
        self.progress_bar = progress_bar
        self.snapshot_replay = False  # replay buffer saved beside snapshots
        self.copier = copier
        self.sampler_throttle = bool(sampler_throttle)
        self.n_optimizers = len(self.async_affinity.optimizer)
        on_cuda = self.async_affinity.optimizer[0].get("cuda_idx") is not None
        self.backend, self.dist_timeout = check_dist_settings(backend, dist_timeout, owner,
                                                              on_cuda)
        self.rank = 0  # the master: the optimizer rank that logs and saves snapshots
        self.stop_requested = False
        self.itrs_done = 0
        self.snapshots = Snapshots()
        self.interrupts = TrainingGuard()
        self.children = AsyncChildren()
        self.master: MasterAffinity | None = None
        self.opt_ranks: OptimizerRanks | None = None
        self.cadence: LogCadence | None = None
        self.diagnostics: Diagnostics | None = None
        self.pace: ReplayPace | None = None
        self.tracking: Any = None  # new_tracking()'s, made at start-up
        self.async_params: AsyncParams | None = None  # the parameter board, made at start-up
        self.replay_buffer: Any = None
        self._start_itr = 0
        self._published = 0
        common.check_tracking_settings(self, log_traj_window, stop_return)

    @property
    def shares_replay(self) -> bool:
        """Whether the replay is shared between processes (on shared memory, behind a
        reader-writer lock): when a copier process appends to it, or several optimizer ranks
        sample from it. Otherwise the optimizer alone appends and samples, and keeps its
        replay where ``replay_device`` says (on its GPU, by default)."""
        return self.copier == "process" or self.n_optimizers > 1

    n_itr = common.n_itr
    itr_batch_size = common.itr_batch_size

    # ---- a run -------------------------------------------------------------------------------
    def train(self) -> dict:
        """Run a whole experiment: startup, the optimizer loop, shutdown (on every exit path,
        with SIGTERM and Ctrl-C handled as ``MinibatchRl.train`` does); return
        ``final_result()``. The loop is :meth:`_optimize_loop`: the optimizer's updates,
        paced by the batches the sampler process sends."""
        with self.interrupts.guarding(self):  # shutdown() on leaving
            n_itr = self.startup()
            self.itrs_done = self.snapshots.start(self._start_itr)
            self.diagnostics.start_progress()
            with blame_failed_rank(self.opt_ranks):  # an optimizer rank's failure named
                self._optimize_loop(n_itr)
        return self.final_result()

    def startup(self) -> int:
        """Seed, build the agent and double buffer (``sampler.async_initialize``) and the
        replay buffer (``algo.async_initialize``), fork the sampler process (and the copier,
        and the other optimizer ranks), wait until the sampler is built, then move the agent
        to the optimizer's device and build the optimizer. Returns the sampler's number of
        iterations."""
        self.opt_ranks = None
        self.master = MasterAffinity(self.affinity)
        self.master.pin(optimizer_only=True)
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        sampler, algo, agent = self.sampler, self.algo, self.agent
        examples = sampler.async_initialize(agent, bootstrap_value=False,
                                            traj_info_kwargs=self.get_traj_info_kwargs(),
                                            seed=self.sampler_seed())
        self.cadence = LogCadence.plan(self.n_steps, self.log_interval_steps,
                                       sampler.env_steps_per_batch)
        n_itr = self.n_itr
        # With the optimizer as the copier and one optimizer rank, the replay is the
        # optimizer's own: built in optim_initialize on its device (a device replay on a GPU).
        self.replay_buffer = algo.async_initialize(
            agent, n_itr, sampler.batch_spec, sampler.mid_batch_reset, examples,
            world_size=self.n_optimizers, shared_replay=self.shares_replay)
        self._start_itr = 0
        replay_deferred = algo.replay_deferred
        resume = self.snapshots.resume
        if resume is not None:  # before the fork: the sampler acts with these parameters
            self._start_itr = resume_start_itr(self, resume[0], n_itr)
            restore_models_and_replay(self, *resume)
        self._launch(n_itr)
        algo.optim_initialize(rank=0)
        self.replay_buffer = algo.replay_buffer
        if resume is not None and replay_deferred:
            restore_replay(self, *resume)
        algo.on_update = self._after_update
        self._published = algo.update_counter
        self.tracking = self.new_tracking()
        self.diagnostics = Diagnostics(algo, self.cadence, self.tracking,
                                       progress_bar=self.progress_bar, sampler=self.sampler)
        self.pace = ReplayPace(algo, self.itr_batch_size, self._append_slot,
                               self.sampler_throttle)
        if resume is not None:
            restore_training_state(self, resume[0])
            self.pace.resume(self._start_itr)
            log_resumed(self._start_itr, self.itr_batch_size, self.n_steps)
        return n_itr

    def _launch(self, n_itr: int) -> None:
        """Fork the children (see ``AsyncChildren.launch``), then the other optimizer ranks,
        which join rank 0's process group; one rank moves the agent to its device."""
        ctx = mp_context()
        self.async_params = AsyncParams(self.agent, ctx)
        copier = None
        if self.copier == "process":
            copier = dict(slots=self.sampler.double_buffer_pyt,
                          samples_to_buffer=self.algo.samples_to_buffer,
                          replay_buffer=self.replay_buffer, first_slot=self._start_itr % 2)
        self.children.launch(ctx, dict(
            sampler=self.sampler, agent=self.agent, params=self.async_params,
            affinity=dict(self.async_affinity.sampler), seed=self.sampler_seed(), n_itr=n_itr,
            eval_itrs=self.eval_itrs(), start_itr=self._start_itr), copier, owner=self)
        if self.n_optimizers > 1:
            self.opt_ranks = OptimizerRanks(self.async_affinity.optimizer, self.backend,
                                            self.dist_timeout, AsyncRunError)
            self.opt_ranks.launch(self)
        else:
            self.agent.to_device(self.affinity.get("cuda_idx"))

    def run_optimizer_rank(self, env: DistEnv) -> None:
        """An optimizer rank beyond the first (in its own process): pinned to its affinity,
        it runs the updates rank 0 commands (see ``OptimizerRanks.serve``)."""
        logger.set_muted(True)
        self.affinity = dict(self.async_affinity.optimizer[env.rank])
        self.master = MasterAffinity(self.affinity)
        self.master.pin(optimizer_only=True)
        resume = self.snapshots.resume  # every rank continues from the same optimizer state
        self.opt_ranks.serve(self.agent, self.algo, env,
                             None if resume is None else resume[0]["optimizer_state_dict"])

    def shutdown(self) -> None:
        """Stop the other optimizer ranks and the children (the copier and the sampler
        process, which stops its workers), terminate any sampler worker left behind (its
        parent was killed), restore the master's cores and threads. Runs on every exit
        path."""
        if self.diagnostics is not None:
            self.diagnostics.stop_progress()
        if self.opt_ranks is not None:
            self.opt_ranks.stop(self.agent)
        self.children.stop()
        self.algo.on_update = None
        close_replay(self.algo)
        if self.master is not None:
            self.master.restore()

    # ---- the optimizer loop ------------------------------------------------------------------
    def _optimize_loop(self, n_itr: int) -> None:
        messages, self.children.early = self.children.early, []
        self._handle(messages)
        algo, pace = self.algo, self.pace
        while not self.stop_requested:
            self._append_pending()
            can_update = pace.owes_updates()
            if pace.finished and pace.copied == pace.received and not can_update:
                break
            self._handle(self.children.receive(0 if can_update else 1.0))
            if can_update:
                itr = pace.copied - 1
                self.agent.train_mode(itr)
                if self.opt_ranks is not None:
                    self.opt_ranks.command(itr)
                self.diagnostics.add_opt_info(algo.optimize_agent(itr, samples=None))
        if self.opt_ranks is not None:  # they finished the same updates: wait for them
            self.opt_ranks.command(-1)
            self.opt_ranks.wait_done()
        if not self.stop_requested:
            self.async_params.send(self.agent, algo.update_counter)  # the final parameters
            self.finish(n_itr)

    def _after_update(self, update_counter: int) -> None:
        """After every single update: publish the parameters when ``updates_per_sync``
        updates passed, and take in any finished batch (appending it to replay when the
        optimizer is the copier), so the sampler never waits longer than one update for its
        slot to be freed."""
        if update_counter - self._published >= self.algo.updates_per_sync:
            self.async_params.send(self.agent, update_counter, wait=False)  # GPU: no host wait
            self._published = update_counter
        if not self.stop_requested:
            self._handle(self.children.receive(0))

    def _handle(self, messages: list) -> None:
        for _, kind, payload in messages:
            if kind == "batch":
                itr, traj_infos, param_updates, self.sampler.worker_restarts = payload
                self.pace.batch_arrived(itr, param_updates, self.copier == "optimizer")
                self.on_batch(itr, traj_infos)
                self.snapshot_if_due(itr)  # the wall-clock cadence (--snapshot-every)
            elif kind == "copied":
                self.pace.copied += 1
            elif kind == "eval":
                self.on_eval(*payload)
            elif kind == "finished":
                self.pace.finished = True
        self._append_pending()
        self.itrs_done = self.pace.copied

    def _append_pending(self) -> None:
        """Optimizer copier: append received batches to replay (see ``ReplayPace``)."""
        if not self.stop_requested:
            self.pace.append_pending()

    def _append_slot(self, slot: int) -> None:
        self.replay_buffer.append_samples(
            self.algo.samples_to_buffer(self.sampler.double_buffer_pyt[slot]))
        self.children.free_slot(slot)

    def updates_allowed(self) -> int:
        """Updates the replay ratio allows so far (see ``ReplayPace.updates_allowed``)."""
        return self.pace.updates_allowed()

    # ---- diagnostics, rows and snapshots -----------------------------------------------------
    get_traj_info_kwargs = common.get_traj_info_kwargs
    new_tracking = common.new_tracking
    save_itr_snapshot = common.save_itr_snapshot
    snapshot_if_due = common.snapshot_if_due
    resume_from = common.resume_from
    runner_state = common.runner_state
    load_runner_state = common.load_runner_state
    final_result = common.final_result

    def sampler_seed(self) -> int:
        """The seed the sampler process gets: ``seed + 1`` (plus ``RESUME_SEED_STRIDE`` per
        resume, so as not to replay the first episodes)."""
        return fresh_episode_seed(self.seed, self.snapshots.resume_count)

    def eval_itrs(self) -> int:
        """Sampler iterations between evaluations in the sampler process (0: none)."""
        return 0

    def store_diagnostics(self, itr: int, traj_infos: TrajInfos, opt_info: Any) -> None:
        """Keep a batch's completed trajectories (and optimizer infos, None: none) for the
        next row, and advance the progress bar."""
        self.diagnostics.store(itr, traj_infos, opt_info)

    def on_eval(self, itr: int, traj_infos: list, eval_time: float) -> None:
        """An evaluation arrived from the sampler process (``AsyncRlEval`` only)."""

    # ---- what subclasses decide --------------------------------------------------------------
    @abc.abstractmethod
    def on_batch(self, itr: int, traj_infos: list) -> None:
        """A batch arrived: keep its trajectories (and log on interval)."""

    @abc.abstractmethod
    def finish(self, n_itr: int) -> None:
        """After the last batch and the updates it allows: the final log row."""


class AsyncRl(AsyncRlBase):
    """Asynchronous RL with online performance tracking: every ``log_interval_steps``
    sampler steps, the window of recent training trajectories is logged."""

    tracking_cls = TrainTrajWindow
    log_and_snapshot = common.write_window_row

    def on_batch(self, itr: int, traj_infos: list) -> None:
        """Add the batch's trajectories to the window; log at each interval."""
        self.store_diagnostics(itr, traj_infos, None)
        if self.cadence.interval_ends(itr):
            with self.interrupts.held():
                self.pace.record_columns()
                self.log_and_snapshot(itr)

    def finish(self, n_itr: int) -> None:
        """The last row, once the optimizer has made its last updates."""
        self.pace.record_columns()
        self.log_and_snapshot(n_itr - 1)


class AsyncRlEval(AsyncRlBase):
    """Asynchronous RL with offline evaluation: the sampler process evaluates the agent
    (with the newest parameters) before training, every ``log_interval_steps`` and at the
    end; each evaluation makes one log row. ``stop_return`` ends training early as in
    ``MinibatchRlEval``."""

    tracking_cls = EvalReturns

    def eval_itrs(self) -> int:
        """Evaluate every log interval (in sampler iterations)."""
        return self.cadence.log_interval_itrs

    def on_batch(self, itr: int, traj_infos: list) -> None:
        """Keep the batch's trajectories (rows come from the evaluations)."""
        self.store_diagnostics(itr, traj_infos, None)

    def finish(self, n_itr: int) -> None:
        """Ask the sampler process to evaluate the final parameters (published after the
        last update) and log that row."""
        evaluations = len(self.tracking.eval_returns)
        self.children.request_final_eval()
        while len(self.tracking.eval_returns) == evaluations:
            self._handle(self.children.receive(1.0))

    def on_eval(self, itr: int, traj_infos: list, eval_time: float) -> None:
        """Log the evaluation row (the first one, before training, with no steps) and
        request a stop once ``stop_return`` is reached."""
        first = not self.tracking.eval_returns
        steps = 0 if first else self.cadence.steps_after(itr)
        self.tracking.record(steps, traj_infos)
        logger.log(f"Evaluation: {len(traj_infos)} trajectories in {eval_time:.2f} s")
        if first:
            self.diagnostics.stop_progress()
            self.tracking.record_columns(traj_infos)
            self.diagnostics.log_first_row(traj_infos, eval_time)
            self.pace.restart_row()
            self.diagnostics.start_progress()
            return
        with self.interrupts.held():  # the row, then its snapshot (see MinibatchRl)
            self.pace.record_columns()
            self.tracking.record_columns(traj_infos)
            self.diagnostics.log_row(itr, traj_infos, eval_time)
            self.save_itr_snapshot(itr)
        if self.tracking.stop_reached(self.stop_return, steps):
            self.stop_requested = True
