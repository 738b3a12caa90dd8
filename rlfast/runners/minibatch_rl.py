"""Synchronous runners: alternate ``sampler.obtain_samples`` and ``algo.optimize_agent``.

The runner owns the loop; what every runner needs lives in components it composes: the
master's cores and threads (``master_affinity``), the log schedule (``cadence``), the log
rows (``diagnostics``), performance tracking (``tracking``), snapshots and resume
(``snapshots``), SIGTERM and Ctrl-C (``interrupts``), sampling while learning (``overlap``)
and the ranks of a multi-process run (``rank_group``, which :class:`~rlfast.runners.SyncRl`
installs). What the asynchronous runners have alike with these is written once in
``rlfast.runners.common``. ``MinibatchRl`` and ``MinibatchRlEval`` differ only in how they
track performance.
"""
from __future__ import annotations

import abc
import time
from typing import TYPE_CHECKING, Any

from rlfast.agents.param_sharing import training_twin
from rlfast.algos.replay_choice import close_replay
from rlfast.runners import common
from rlfast.runners.cadence import LogCadence
from rlfast.runners.diagnostics import Diagnostics, TrajInfos
from rlfast.runners.interrupts import TrainingGuard
from rlfast.runners.master_affinity import MasterAffinity
from rlfast.runners.overlap import OverlappedBatches, SerialBatches, check_overlap
from rlfast.runners.rank_group import RankGroup, SingleProcess
from rlfast.runners.snapshots import (Snapshots, log_resumed, restore_snapshot,
                                      resume_start_itr)
from rlfast.runners.tracking import EvalReturns, TrainTrajWindow
from rlfast.utils.checks import check_int
from rlfast.utils.logging import logger
from rlfast.utils.seed import make_seed, set_seed

if TYPE_CHECKING:
    from rlfast.agents import BaseAgent
    from rlfast.algos import RLAlgorithm
    from rlfast.samplers.base import BaseSampler

__all__ = ["MinibatchRlBase", "MinibatchRl", "MinibatchRlEval"]


class MinibatchRlBase(abc.ABC):
    """The synchronous loop: sample a batch, optimize on it, log at intervals.

    ``affinity`` (dict) may hold ``master_cpus``, ``master_torch_threads``,
    ``sample_torch_threads``, ``cuda_idx``, ``workers_cpus`` and ``set_affinity``; the sampler
    reads the worker entries, :class:`~rlfast.runners.master_affinity.MasterAffinity` the
    master's (threads follow the work: one while the workers sample, the optimizing count
    while they are idle). ``shutdown`` runs on every exit path, so no worker process outlives
    the run. Subclasses decide how performance is tracked (``tracking_cls``, ``before_loop``,
    ``write_row``); ``log_traj_window`` training returns are kept for the rows, and
    ``stop_return`` (evaluating runners only) ends training at the first evaluation that
    reaches it.

    ``overlap=True`` (on-policy algorithms: PPO, A2C) samples batch k+1 in a background
    thread while the learner trains on batch k (see ``rlfast.runners.overlap``); the
    iterations' policy lag is logged as ``PolicyLag`` (updates of ``optimize_agent``) and
    ``PolicyLagGradientSteps``. The default, False, keeps the exact synchronous schedule.

    Snapshots hold everything a continued run needs (see ``rlfast.runners.snapshots``);
    ``snapshot_replay=True`` also saves the replay buffer beside each. ``resume_from``
    makes the next ``train()`` continue from a snapshot instead of starting afresh.
    """

    tracking_cls: type[TrainTrajWindow] | type[EvalReturns] | None = None  # a subclass's

    def __init__(self, algo: RLAlgorithm, agent: BaseAgent, sampler: BaseSampler,
                 n_steps: int, seed: int | None = None, affinity: dict | None = None,
                 log_interval_steps: int = 100_000, progress_bar: bool = True,
                 overlap: bool = False, snapshot_replay: bool = False, *,
                 log_traj_window: int = 100, stop_return: float | None = None):
        owner = type(self).__name__
        if not isinstance(overlap, bool):
            raise TypeError(f"{owner}: overlap must be True or False; got {overlap!r}")
        self.n_steps = check_int(n_steps, "n_steps", minimum=1, owner=owner)
        self.log_interval_steps = check_int(log_interval_steps, "log_interval_steps",
                                            minimum=1, owner=owner)
        self.algo, self.agent, self.sampler = algo, agent, sampler
        self.seed = seed
        self.affinity = dict(affinity or {})
        self.progress_bar = progress_bar
        self.overlap = overlap
        self.snapshot_replay = bool(snapshot_replay)  # replay buffer saved beside snapshots
        self.sampling_agent = agent  # the agent the sampler acts with (a twin trains: overlap)
        self.stop_requested = False
        self.itrs_done = 0
        self.ranks: SingleProcess | RankGroup = SingleProcess()
        self.snapshots = Snapshots()
        self.interrupts = TrainingGuard()
        self.master: MasterAffinity | None = None
        self.cadence: LogCadence | None = None
        self.diagnostics: Diagnostics | None = None
        self.tracking: Any = None  # new_tracking()'s, made at start-up
        self._start_itr = 0
        self._batches: SerialBatches | OverlappedBatches | None = None
        common.check_tracking_settings(self, log_traj_window, stop_return)

    # ---- what the components hold ------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank (0 in a single-process run)."""
        return self.ranks.rank

    @property
    def world_size(self) -> int:
        """The number of ranks training together (1 in a single-process run)."""
        return self.ranks.world_size

    n_itr = common.n_itr
    itr_batch_size = common.itr_batch_size

    # ---- a run -------------------------------------------------------------------------------
    def train(self) -> dict:
        """Run a whole experiment: start-up, the training loop, shutdown; return
        ``final_result()``.

        ``shutdown`` also runs when the loop raises (an error or an interrupt), and the
        exception propagates. SIGTERM raises ``TrainingInterrupted`` while training; on it,
        or on Ctrl-C, the run saves a final snapshot when iterations finished since the last
        one (so a preempted run loses at most the iterations of one log interval), stops the
        sampler and re-raises (see ``rlfast.runners.interrupts``). A multi-rank run with no
        launcher forks its ranks here and returns rank 0's result (see ``rank_group``).
        """
        if self.ranks.spawns():  # this process forks the ranks and supervises them
            return self.ranks.spawn(self)
        with self.interrupts.guarding(self), self.ranks.as_rank(self):  # shutdown() on leaving
            n_itr = self.startup()
            self.itrs_done = self.snapshots.start(self._start_itr)
            if self._start_itr == 0 and self.rank == 0:  # a resumed run logged it already
                self.before_loop()
            self.diagnostics.start_progress()
            batches = self._batches = self._new_batches()
            for itr in range(self._start_itr, n_itr):
                with logger.prefix(f"itr #{itr} "):
                    samples = batches.begin(itr, n_itr)
                    self.agent.train_mode(itr)
                    opt_info = self.optimize(itr, samples)
                    traj_infos = batches.end(itr, n_itr)
                    self.store_diagnostics(itr, traj_infos, opt_info)
                    self.itrs_done = itr + 1
                    if self.cadence.logs_after(itr):
                        with self.interrupts.held():  # the row and its snapshot go together
                            self.log_and_snapshot(itr)
                            self.stop_requested = self.ranks.agree(self.stop_requested)
                        if self.stop_requested:
                            break
                    self.snapshot_if_due(itr)  # the wall-clock cadence (--snapshot-every)
            batches.stop()
            self._batches = None
        return self.final_result()

    def startup(self) -> int:
        """Prepare a run and return its number of iterations.

        Joins the other ranks (a multi-rank run), pins the master process, seeds every RNG
        (a fresh seed when none was given), starts the sampler (workers get
        ``sampler_seed()``), moves the agent to its device and initializes the algorithm
        with the sampler's examples, then the logging state; continues a snapshot given to
        ``resume_from``. The order is fixed: seeded runs depend on it.
        """
        self.ranks.join(self)
        if self.overlap:
            check_overlap(type(self).__name__, self.algo, self.sampler)
        self.agent = self.sampling_agent  # a run again: the twin of the last run is dropped
        self.master = MasterAffinity(self.affinity)
        self.master.pin()
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        examples = self.sampler.initialize(
            agent=self.agent, affinity=self.affinity, seed=self.sampler_seed(),
            bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(), rank=self.rank,
            world_size=self.world_size)
        self.cadence = LogCadence.plan(self.n_steps, self.log_interval_steps,
                                       self.sampler.env_steps_per_batch * self.world_size)
        self.master.choose_optimize_threads(self.agent)
        n_itr = self.n_itr
        self.agent.to_device(self.affinity.get("cuda_idx"))
        if self.overlap:  # the learner trains a private copy; the sampler keeps this agent
            self.sampling_agent = self.agent
            self.agent = training_twin(self.agent)
        self.ranks.before_algo(self.agent)
        self.algo.initialize(agent=self.agent, n_itr=n_itr, batch_spec=self.sampler.batch_spec,
                             mid_batch_reset=self.sampler.mid_batch_reset, examples=examples,
                             world_size=self.world_size, rank=self.rank)
        self.tracking = self.new_tracking()
        self.diagnostics = Diagnostics(self.algo, self.cadence, self.tracking, self.overlap,
                                       self.progress_bar, sampler=self.sampler)
        self._start_itr = 0
        if self.snapshots.resume is not None:
            snapshot, snapshot_dir = self.snapshots.resume
            resume_start_itr(self, snapshot, n_itr)  # refuses a snapshot that covers the run
            self._start_itr = restore_snapshot(self, snapshot, snapshot_dir)
            log_resumed(self._start_itr, self.itr_batch_size, self.n_steps)
        self.ranks.after_startup(self)
        return n_itr

    def shutdown(self) -> None:
        """Stop the progress bar and the sampler (joining its workers), give the caller back
        its cores and threads, leave the process group of a multi-rank run. Runs on every
        exit path, so that no worker process or shared memory outlives the run."""
        try:
            if self.diagnostics is not None:
                self.diagnostics.stop_progress()
            try:
                self.sampler.shutdown()  # a batch under way in the background thread ends too
            finally:
                if self._batches is not None:
                    self._batches.stop()
                    self._batches = None
                close_replay(self.algo)
                if self.master is not None:
                    self.master.restore()
        finally:
            self.ranks.leave(self.agent)

    # ---- the loop's parts ------------------------------------------------------------------------
    def _new_batches(self) -> SerialBatches | OverlappedBatches:
        """Where the loop's batches come from (see ``rlfast.runners.overlap``). Overlapped,
        one thread count, the optimizing one, serves the whole loop: torch's count is a
        process-wide setting and batches are collected while the learner trains."""
        if not self.overlap:
            return SerialBatches(self.sampler, self.agent)
        self.master.hold_optimizing()
        return OverlappedBatches(self.sampler, self.sampling_agent, self.agent, self.algo,
                                 self.diagnostics.lags)

    def optimize(self, itr: int, samples: Any) -> Any:
        """``algo.optimize_agent(itr, samples)`` with the master's optimizing threads (the
        sampling thread count is restored after)."""
        with self.master.optimizing():
            return self.algo.optimize_agent(itr, samples)

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
        """The seed the sampler gets: ``seed + 1`` (a resumed run whose environments start
        afresh adds ``RESUME_SEED_STRIDE`` per resume; each rank of a multi-rank run its own
        stride, see ``rlfast.runners.rank_group``)."""
        return self.ranks.sampler_seed(self.seed, self.snapshots.resume_count)

    def store_diagnostics(self, itr: int, traj_infos: TrajInfos, opt_info: Any) -> None:
        """Accumulate one iteration's completed trajectories (this rank's, kept for the next
        row in a multi-rank run) and optimizer infos, and advance the progress bar."""
        self.diagnostics.store(itr, self.ranks.keep_trajs(traj_infos), opt_info)

    def log_and_snapshot(self, itr: int) -> None:
        """At a log interval after iteration ``itr``: every rank's trajectories to rank 0,
        which writes the row and saves the snapshot (``write_row``); may set
        ``stop_requested`` to end training early."""
        self.diagnostics.add_trajs(self.ranks.gather_trajs())
        if self.rank == 0:
            self.write_row(itr)

    # ---- what subclasses decide --------------------------------------------------------------
    @abc.abstractmethod
    def before_loop(self) -> None:
        """Work before the first iteration (e.g. the pre-training evaluation); rank 0 only."""

    @abc.abstractmethod
    def write_row(self, itr: int) -> None:
        """Rank 0 at a log interval after iteration ``itr``: write the log row and save the
        snapshot; may set ``stop_requested``."""


class MinibatchRl(MinibatchRlBase):
    """Tracks performance online: statistics of the last ``log_traj_window`` training
    trajectories are logged at each interval, which costs no extra environment steps."""

    tracking_cls = TrainTrajWindow
    write_row = common.write_window_row

    def before_loop(self) -> None:
        """Nothing: online tracking needs no evaluation before training."""


class MinibatchRlEval(MinibatchRlBase):
    """Tracks performance offline: at itr 0 and every log interval the agent runs in eval mode
    on separate environments, and those trajectories make the ``Return*`` columns.

    ``stop_return``: end training at the first evaluation (after training started) whose
    average return reaches it, e.g. for "reach score X within N steps" checks and sweeps.
    """

    tracking_cls = EvalReturns

    def evaluate_agent(self, itr: int, trained: bool = True) -> tuple[list, float]:
        """Run the sampler's evaluation with the agent in eval mode; return the completed
        trajectory infos and the seconds it took. The average return (NaN when no episode
        completed) is recorded, with the environment steps so far, in the tracking: those
        of iterations ``0..itr`` when ``trained``, none for the untrained agent (whose
        evaluation also has ``itr`` 0: iteration 0's own row is after its steps)."""
        if trained:
            self.diagnostics.stop_progress()
        logger.log("Evaluating agent...")
        self.sampling_agent.eval_mode(itr)
        start = time.time()
        traj_infos = self.sampler.evaluate_agent(itr)
        eval_time = time.time() - start
        logger.log(f"Evaluation: {len(traj_infos)} trajectories in {eval_time:.2f} s")
        self.tracking.record(self.cadence.steps_after(itr) if trained else 0, traj_infos)
        return traj_infos, eval_time

    def before_loop(self) -> None:
        """Evaluate the untrained agent and log it as the first row (no steps yet)."""
        traj_infos, eval_time = self.evaluate_agent(0, trained=False)
        self.tracking.record_columns(traj_infos)
        self.diagnostics.log_first_row(traj_infos, eval_time)

    def write_row(self, itr: int) -> None:
        """Evaluate, log the evaluation row, save the snapshot (see ``MinibatchRl``); request
        a stop once the evaluation return reaches ``stop_return``."""
        traj_infos, eval_time = self.evaluate_agent(itr)
        self.tracking.record_columns(traj_infos)
        self.diagnostics.log_row(itr, traj_infos, eval_time)
        self.save_itr_snapshot(itr)
        if self.tracking.stop_reached(self.stop_return, self.cadence.steps_after(itr)):
            self.stop_requested = True
