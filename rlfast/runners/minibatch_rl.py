"""Single-process runners: alternate ``sampler.obtain_samples`` and ``algo.optimize_agent``."""
from __future__ import annotations

import abc
import contextlib
import math
import queue
import signal
import sys
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import psutil
import torch

from rlfast.algos.replay_choice import close_replay
from rlfast.utils.interrupts import SigtermGuard, TrainingInterrupted, signal_name
from rlfast.runners.snapshots import (RESUME_SEED_STRIDE, build_snapshot, check_resumable,
                                      replay_sidecars, restore_snapshot,
                                      resume_start_itr)
from rlfast.utils.checks import check_int
from rlfast.utils.launching.affinity import validate_affinity
from rlfast.utils.buffer import buffer_copy_, buffer_method
from rlfast.utils.logging import logger
from rlfast.utils.misc import available_cpus
from rlfast.utils.prog_bar import ProgBarCounter
from rlfast.utils.seed import make_seed, set_seed

if TYPE_CHECKING:
    from rlfast.agents import BaseAgent
    from rlfast.algos import RLAlgorithm
    from rlfast.samplers.base import BaseSampler

TrajInfos = Sequence[Mapping[str, Any]]


class MinibatchRlBase(abc.ABC):
    """Startup, logging and snapshots shared by the minibatch runners.

    ``affinity`` (dict) may hold ``master_cpus``, ``master_torch_threads``,
    ``sample_torch_threads``, ``cuda_idx``, ``workers_cpus`` and ``set_affinity``; the sampler
    reads the worker entries. ``shutdown`` runs on every exit path, so no worker process
    outlives the run. Subclasses decide how performance is tracked (``before_loop``,
    ``log_and_snapshot``, ``final_result``).

    Threads follow the work. On the CPU the master runs ``sample_torch_threads`` torch threads
    (default 1) while the sampler collects a batch (its workers need the cores) and
    ``master_torch_threads`` while the algorithm optimizes (0: every core of ``master_cpus``,
    or of the machine when none are given). By default a convolutional model optimizes on
    every core, because the synchronous samplers' workers are idle then, and other models on
    the sampling count (see ``_choose_optimize_threads`` for the measurements). With the agent
    on a GPU the master's threads are left as they are unless given.

    ``overlap=True`` (on-policy algorithms: PPO, A2C) overlaps sampling with learning: while
    the learner trains on batch k, the sampler collects batch k+1 in a background thread with
    the parameters published after update k-1, so every batch but the first is one update
    stale (PPO's ratio and clipping are taken against the policy that acted, which its stored
    agent infos record). The learner trains a private copy of the agent
    (``agent.training_twin()``), published to the sampling agent between batches; the
    iterations' policy lag is logged as ``PolicyLag`` (updates of ``optimize_agent``) and
    ``PolicyLagGradientSteps``. One torch thread count serves the whole overlapped loop (it
    is a process-wide setting): the optimizing one.
    The default, False, keeps the exact synchronous schedule.

    Snapshots hold everything a continued run needs (see ``rlfast.runners.snapshots``);
    ``snapshot_replay=True`` also saves the replay buffer beside each. ``resume_from``
    makes the next ``train()`` continue from a snapshot instead of starting afresh.
    """

    def __init__(self, algo: RLAlgorithm, agent: BaseAgent, sampler: BaseSampler,
                 n_steps: int, seed: int | None = None, affinity: dict | None = None,
                 log_interval_steps: int = 100_000, progress_bar: bool = True,
                 overlap: bool = False, snapshot_replay: bool = False):
        owner = type(self).__name__
        if not isinstance(overlap, bool):
            raise TypeError(f"{owner}: overlap must be True or False; got {overlap!r}")
        n_steps = check_int(n_steps, "n_steps", minimum=1, owner=owner)
        log_interval_steps = check_int(log_interval_steps, "log_interval_steps", minimum=1,
                                       owner=owner)
        self.algo, self.agent, self.sampler = algo, agent, sampler
        self.n_steps = n_steps
        self.seed = seed
        self.affinity = dict(affinity or {})
        self.log_interval_steps = log_interval_steps
        self.progress_bar = progress_bar
        self.overlap = overlap
        self.snapshot_replay = bool(snapshot_replay)  # replay buffer saved beside snapshots
        self.resume_count = 0  # how many times this run was resumed (0: a fresh run)
        self._resume: tuple[Mapping, str | None] | None = None
        self._start_itr = 0
        self.sampling_agent = agent  # the agent the sampler acts with (a twin trains: overlap)
        self.rank, self.world_size = 0, 1
        self.stop_requested = False
        self.itrs_done = 0
        self._snapshot_itrs_done = 0  # iterations covered by the last snapshot handed over
        self._pbar: ProgBarCounter | None = None

    # ---- startup / shutdown ------------------------------------------------------------------
    def startup(self) -> int:
        """Prepare a run and return its number of iterations.

        Pins the master process, seeds every RNG (a fresh seed when none was given),
        starts the sampler (workers get ``seed + 1``), moves the agent to its device and
        initializes the algorithm with the sampler's examples, then the logging state.
        The order is fixed: seeded runs depend on it.
        """
        self._check_overlap()
        self.agent = self.sampling_agent  # a run again: the twin of the last run is dropped
        self._set_master_affinity()
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        examples = self.sampler.initialize(
            agent=self.agent, affinity=self.affinity, seed=self.sampler_seed(),
            bootstrap_value=getattr(self.algo, "bootstrap_value", False),
            traj_info_kwargs=self.get_traj_info_kwargs(), rank=self.rank,
            world_size=self.world_size)
        self.itr_batch_size = self.sampler.batch_spec.size * self.world_size
        self._choose_optimize_threads()
        n_itr = self.get_n_itr()
        self.agent.to_device(self.affinity.get("cuda_idx"))
        if self.overlap:  # the learner trains a private copy; the sampler keeps this agent
            self.sampling_agent = self.agent
            self.agent = self.agent.training_twin()
        if self.world_size > 1:
            self.agent.data_parallel()
        self.algo.initialize(agent=self.agent, n_itr=n_itr, batch_spec=self.sampler.batch_spec,
                             mid_batch_reset=self.sampler.mid_batch_reset, examples=examples,
                             world_size=self.world_size, rank=self.rank)
        self.initialize_logging()
        self._start_itr = 0
        if self._resume is not None:
            snapshot, snapshot_dir = self._resume
            start = resume_start_itr(self, snapshot, n_itr)
            self._start_itr = restore_snapshot(self, snapshot, snapshot_dir)
            logger.log(f"Resumed from iteration {start - 1} ({start * self.itr_batch_size} "
                       f"steps); training to {self.n_steps} steps", console=True)
        return n_itr

    def _check_overlap(self) -> None:
        if not self.overlap:
            return
        owner = type(self).__name__
        if not getattr(self.algo, "on_policy", False):
            raise ValueError(
                f"{owner}: overlap=True overlaps on-policy sampling with learning (PPO, A2C); "
                f"{type(self.algo).__name__} learns from replay, where AsyncRl (--runner async) "
                f"runs sampling and learning concurrently")
        if getattr(self.sampler, "is_async", False):
            raise ValueError(f"{owner}: overlap=True needs a synchronous sampler, not "
                             f"{type(self.sampler).__name__}")

    def sampler_seed(self) -> int:
        """The seed the sampler gets: ``seed + 1`` (a resumed run whose environments start
        afresh adds ``RESUME_SEED_STRIDE`` per resume, so as not to replay the first
        episodes)."""
        return self.seed + 1 + RESUME_SEED_STRIDE * self.resume_count

    @property
    def sampler_restores_state(self) -> bool:
        """Whether the sampler can continue its environments from a snapshot (the serial
        sampler); others start new episodes on resume."""
        return bool(getattr(self.sampler, "restores_state", False))

    def resume_from(self, snapshot: Mapping[str, Any], snapshot_dir: str | None = None) -> None:
        """Make the next ``train()`` continue the run ``snapshot`` was taken from (a dict from
        ``load_snapshot``; ``snapshot_dir``: where its sidecar files, such as the replay
        buffer, lie). The runner must be built as the run was (same algorithm, agent,
        sampler and batch shape); ``n_steps`` may be larger, to train on."""
        check_resumable(snapshot)
        self._resume = (snapshot, snapshot_dir)
        self.resume_count = int(snapshot.get("resume_count", 0)) + 1

    def _set_master_affinity(self, optimizer_only: bool = False) -> None:
        """Pin the master to ``master_cpus`` and set its torch threads (see the class
        docstring). ``optimizer_only``: a process that only optimizes while samplers run
        elsewhere (AsyncRl's optimizer) keeps ``master_torch_threads`` (default 1 on the CPU)
        all along."""
        validate_affinity(self.affinity)
        # What shutdown restores: a run started in-process (a notebook, a sweep script, a test)
        # must not leave its caller pinned to the run's cores or thread count.
        self._previous_threads = torch.get_num_threads()
        self._previous_cpus = None
        cpus = self.affinity.get("master_cpus")
        if cpus and self.affinity.get("set_affinity", True):
            proc = psutil.Process()
            if hasattr(proc, "cpu_affinity"):
                previous = proc.cpu_affinity()
                proc.cpu_affinity(list(cpus))  # validated above: these cores exist
                self._previous_cpus = previous
        # Threads follow the work (see the class docstring): one while the workers sample,
        # the optimizing count (for a convolutional model every core of the master's, see
        # _choose_optimize_threads) while they are idle and the algorithm optimizes.
        on_cpu = self.affinity.get("cuda_idx") is None
        sample = self.affinity.get("sample_torch_threads")
        if sample is None and on_cpu:
            sample = 1
        optimize = self.affinity.get("master_torch_threads")
        self._all_master_cores = len(cpus) if cpus else len(available_cpus())
        if optimizer_only:
            sample = optimize = optimize or (1 if on_cpu else None)
        elif optimize == 0:
            optimize = self._all_master_cores
        self._sample_threads = int(sample) if sample else torch.get_num_threads()
        # None on the CPU: decided once the model is built (_choose_optimize_threads).
        self._optimize_threads = (int(optimize) if optimize
                                  else None if on_cpu else self._sample_threads)
        if self._sample_threads != torch.get_num_threads():
            torch.set_num_threads(self._sample_threads)

    def _choose_optimize_threads(self) -> None:
        """The default optimizing thread count on the CPU (no ``master_torch_threads``):
        every core of the master's for a convolutional model, else the sampling count.

        Measured on 2 cores: a Nature CNN minibatch trains in 0.71x the one-thread time on
        two threads, and keeps most of that gain on a loaded machine (its operations are
        milliseconds long). MLPs of 64-400 units gain less on an idle machine (0.6x-0.9x)
        and lose badly on a loaded one: their operations take microseconds, and each waits
        at a barrier for a helper thread the OS may not schedule for a whole time slice (a
        PPO CartPole run took 30-50x longer with two threads while other jobs held the
        cores). Under overlap too: sampling is a small share of the work next to a
        convolutional learner (PPO on Pong on 2 cores: the overlapped learner on one thread
        kept 1.2 cores busy and ran at 0.67x the synchronous speed)."""
        if self._optimize_threads is not None:
            return
        convolutional = any(isinstance(m, torch.nn.modules.conv._ConvNd)
                            for m in _modules(self.agent))
        self._optimize_threads = (self._all_master_cores if convolutional
                                  else self._sample_threads)

    def shutdown(self) -> None:
        """Stop the progress bar and the sampler (joining its workers).

        Called by ``train`` on every exit path, success, error or Ctrl-C, so that no worker
        process or shared memory outlives the run.
        """
        if self._pbar is not None:
            self._pbar.stop()
        batches = getattr(self, "_overlap_batches", None)
        try:
            self.sampler.shutdown()  # a batch under way in the background thread ends too
        finally:
            if batches is not None:
                batches.stop()
                self._overlap_batches = None
            close_replay(self.algo)
            self._restore_master_affinity()

    def _restore_master_affinity(self) -> None:
        previous_cpus = getattr(self, "_previous_cpus", None)
        if previous_cpus:
            try:
                psutil.Process().cpu_affinity(previous_cpus)
            except (OSError, ValueError):
                pass  # e.g. the container's cpu set shrank meanwhile: keep the run's cores
            self._previous_cpus = None
        previous_threads = getattr(self, "_previous_threads", None)
        if previous_threads:
            torch.set_num_threads(previous_threads)
            self._previous_threads = None

    def get_traj_info_kwargs(self) -> dict:
        """Keyword arguments for the sampler's trajectory infos: the algorithm's discount,
        so that ``DiscountedReturn`` matches what the algorithm optimizes."""
        return dict(discount=getattr(self.algo, "discount", 1.0))

    def get_n_itr(self) -> int:
        """Iterations needed for ``n_steps`` (at least one); also sets ``log_interval_itrs``,
        the iterations between log rows (at least one)."""
        self.log_interval_itrs = max(self.log_interval_steps // self.itr_batch_size, 1)
        self.n_itr = max(math.ceil(self.n_steps / self.itr_batch_size), 1)
        return self.n_itr

    # ---- snapshots ---------------------------------------------------------------------------
    def get_itr_snapshot(self, itr: int) -> dict:
        """What a snapshot after iteration ``itr`` holds: iteration, environment steps so
        far, agent and optimizer state, and everything else a resumed run needs (see
        ``rlfast.runners.snapshots``)."""
        return build_snapshot(self, itr)

    def save_itr_snapshot(self, itr: int) -> None:
        """Hand the snapshot of iteration ``itr`` (and the replay buffer, with
        ``snapshot_replay``) to the logger, which saves it (or not) according to the run's
        snapshot mode."""
        if logger.get_snapshot_dir() is not None and logger.get_snapshot_mode() != "none":
            logger.log("saving snapshot...")
            logger.save_itr_params(itr, self.get_itr_snapshot(itr),
                                   sidecars=replay_sidecars(self))
        self._snapshot_itrs_done = itr + 1

    def runner_state(self) -> dict:
        """The runner's own counters, saved in snapshots: training time and completed
        trajectories (subclasses add what their log rows are computed from)."""
        return dict(cum_time=self._cum_time, cum_completed_trajs=self._cum_completed_trajs,
                    opt_infos={k: [_nan_to_none(float(x)) for x in v]
                               for k, v in self._opt_infos.items()})

    def load_runner_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`runner_state`'s output (after ``initialize_logging``)."""
        self._cum_time = float(state["cum_time"])
        self._cum_completed_trajs = int(state["cum_completed_trajs"])
        for key, values in state.get("opt_infos", {}).items():  # gathered since the last row
            if key in self._opt_infos:
                self._opt_infos[key].extend(_none_to_nan(x) for x in values)

    # ---- diagnostics -------------------------------------------------------------------------
    def initialize_logging(self) -> None:
        """Reset the running diagnostics (optimizer infos, timers, trajectory counts) at the
        start of a run."""
        self._opt_infos = {k: [] for k in self.algo.opt_info_fields}
        self._start_time = self._last_time = time.time()
        self._cum_time = 0.0
        self._cum_completed_trajs = 0
        self._last_update_counter = 0
        self._lags: list[tuple[int, int]] = []  # overlap: (iterations, gradient steps) per itr
        self._pbar = None

    def store_diagnostics(self, itr: int, traj_infos: TrajInfos, opt_info: Any) -> None:
        """Accumulate one iteration's completed trajectories and optimizer infos until the
        next log row, and advance the progress bar."""
        self.add_traj_infos(traj_infos)
        for k, v in self._opt_infos.items():
            new = getattr(opt_info, k, [])
            v.extend(new if isinstance(new, list) else [new])
        if self._pbar is not None:
            self._pbar.update((itr + 1) % self.log_interval_itrs)

    def add_traj_infos(self, traj_infos: TrajInfos) -> None:
        """Count completed training trajectories (subclasses also keep them)."""
        self._cum_completed_trajs += len(traj_infos)

    def log_diagnostics(self, itr: int, traj_infos: TrajInfos | None = None,
                        eval_time: float = 0.0, prefix: str = "Diagnostics/") -> None:
        """Write the log row of iteration ``itr``: progress and timing under ``prefix``,
        statistics of ``traj_infos`` (default: the runner's own choice, see
        ``_traj_infos_for_log``) and of the optimizer infos gathered since the last row.
        ``eval_time`` is left out of the training time and speed."""
        if self._pbar is not None:
            self._pbar.stop()
        now = time.time()
        itr_time = now - self._last_time - eval_time
        self._cum_time += itr_time
        steps = (itr + 1) * self.itr_batch_size
        steps_since = self.log_interval_itrs * self.itr_batch_size if itr > 0 else self.itr_batch_size
        with logger.tabular_prefix(prefix):
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("CumSteps", steps)
            logger.record_tabular("CumTime (s)", self._cum_time)
            logger.record_tabular("StepsPerSecond", steps_since / max(itr_time, 1e-9))
            logger.record_tabular("CumCompletedTrajs", self._cum_completed_trajs)
            logger.record_tabular("CumUpdates", getattr(self.algo, "update_counter", 0))
            logger.record_tabular("EvalTime (s)", eval_time)
            rate = steps / max(self._cum_time, 1e-9)
            logger.record_tabular("ETA (s)", max(self.n_itr * self.itr_batch_size - steps, 0)
                                  / max(rate, 1e-9))
            if self.overlap:
                lags = np.asarray(self._lags or [(0, 0)], dtype=np.float64)
                logger.record_tabular("PolicyLag", float(lags[:, 0].mean()))
                logger.record_tabular("PolicyLagGradientSteps", float(lags[:, 1].mean()))
                self._lags.clear()
        self._log_infos(traj_infos)
        logger.dump_tabular(with_prefix=False)
        self._last_time = time.time()
        if itr < self.n_itr - 1 and self._show_progress():
            self._pbar = ProgBarCounter(self.log_interval_itrs)

    def _log_infos(self, traj_infos: Iterable[Mapping[str, Any]] | None = None) -> None:
        traj_infos = list(self._traj_infos_for_log() if traj_infos is None else traj_infos)
        keys = ["Return", "Length", "NonzeroRewards", "DiscountedReturn"]
        if traj_infos:
            keys += [k for k in traj_infos[0] if not k.startswith("_") and k not in keys]
        for k in keys:
            values = [info[k] for info in traj_infos if k in info]
            logger.record_tabular_misc_stat(k, np.asarray(values, dtype=np.float64))
        for k, v in self._opt_infos.items():
            logger.record_tabular_misc_stat(k, np.asarray(v, dtype=np.float64))
            v.clear()

    def _traj_infos_for_log(self) -> Iterable[Mapping[str, Any]]:
        return []

    def _show_progress(self) -> bool:
        """The bar is drawn when asked for and stderr is a terminal (in a log file it would
        be noise)."""
        return bool(self.progress_bar) and _stderr_is_terminal()

    def _start_progress(self) -> None:
        if self._show_progress():
            self._pbar = ProgBarCounter(self.log_interval_itrs)

    def _run_loop(self, n_itr: int) -> None:
        if self.overlap:
            self._run_loop_overlapped(n_itr)
            return
        for itr in range(self._start_itr, n_itr):
            with logger.prefix(f"itr #{itr} "):
                self.agent.sample_mode(itr)
                samples, traj_infos = self.sampler.obtain_samples(itr)
                self.agent.train_mode(itr)
                opt_info = self.optimize(itr, samples)
                self.store_diagnostics(itr, traj_infos, opt_info)
                self.itrs_done = itr + 1
                if (itr + 1) % self.log_interval_itrs == 0 or itr == n_itr - 1:
                    with self._signals_held():  # the row and its snapshot go together
                        self.log_and_snapshot(itr)
                    if self.stop_requested:
                        break

    def optimize(self, itr: int, samples: Any) -> Any:
        """``algo.optimize_agent(itr, samples)`` with the master's optimizing threads (every
        core of its affinity by default; the sampling thread count is restored after)."""
        if self._optimize_threads == self._sample_threads:
            return self.algo.optimize_agent(itr, samples)
        torch.set_num_threads(self._optimize_threads)
        try:
            return self.algo.optimize_agent(itr, samples)
        finally:
            torch.set_num_threads(self._sample_threads)

    def _run_loop_overlapped(self, n_itr: int) -> None:
        """The overlapped schedule (``overlap=True``): batch itr+1 is collected in a
        background thread, by the sampling agent with the parameters published after update
        itr-1, while the learner trains on batch itr (a copy, so that the sampler may refill
        its buffer). The parameters are published and the log row (and evaluation) written
        between batches, when no sampling is under way."""
        sampling, learner = self.sampling_agent, self.agent
        batches = _BatchThread(self.sampler)
        self._overlap_batches = batches
        # Threads: torch's count is one setting for the whole process, so the learner's
        # holds all along (background batches and evaluations run under it too).
        torch.set_num_threads(self._optimize_threads)
        first = self._start_itr
        sampling.sample_mode(first)
        samples, traj_infos = self.sampler.obtain_samples(first)
        batch = buffer_method(samples, "clone")  # the learner's copy, refilled in place
        sampled_after = (first, getattr(self.algo, "update_counter", 0))  # the batch's params
        published = sampled_after
        for itr in range(first, n_itr):
            with logger.prefix(f"itr #{itr} "):
                if itr + 1 < n_itr:
                    sampling.sample_mode(itr + 1)
                    batches.start(itr + 1)
                learner.train_mode(itr)
                lag = (itr - sampled_after[0],
                       getattr(self.algo, "update_counter", 0) - sampled_after[1])
                opt_info = self.algo.optimize_agent(itr, batch)
                next_infos = []
                if itr + 1 < n_itr:
                    samples, next_infos = batches.result()
                    buffer_copy_(batch, samples)
                    sampled_after = published
                learner.publish_to(sampling)
                published = (itr + 1, getattr(self.algo, "update_counter", 0))
                self._lags.append(lag)
                self.store_diagnostics(itr, traj_infos, opt_info)
                traj_infos = next_infos
                self.itrs_done = itr + 1
                if (itr + 1) % self.log_interval_itrs == 0 or itr == n_itr - 1:
                    with self._signals_held():  # the row and its snapshot go together
                        self.log_and_snapshot(itr)
                    if self.stop_requested:
                        break
        batches.stop()
        self._overlap_batches = None

    def train(self) -> dict:
        """Run a whole experiment: startup, the training loop, shutdown; return
        ``final_result()``.

        ``shutdown`` also runs when the loop raises (an error or an interrupt), and the
        exception propagates; "Training complete." is logged only when the loop finished.
        In the main thread, SIGTERM (sent by Slurm, Kubernetes or ``timeout`` before they
        kill) raises ``TrainingInterrupted`` for the duration of ``train``, the previous
        handler being restored afterwards. On it, or on Ctrl-C (``KeyboardInterrupt``),
        the run logs that it was interrupted, saves a final snapshot when iterations
        finished since the last one (so a preempted run loses at most the iterations of
        one log interval), stops the sampler and re-raises.
        """
        self._pbar = None
        self.itrs_done = self._snapshot_itrs_done = 0
        with SigtermGuard() as sigterm:
            self._sigterm = sigterm
            try:
                n_itr = self.startup()
                self.itrs_done = self._snapshot_itrs_done = self._start_itr
                if self._start_itr == 0:  # a resumed run logged its first rows already
                    self.before_loop()
                self._start_progress()
                self._run_loop(n_itr)
                sigterm.defer()  # the loop is over: SIGTERM must not cut the shutdown short
            except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM as TrainingInterrupted
                sigterm.defer()
                self._stop_interrupted(interrupt)
                raise
            except BaseException:
                sigterm.defer()
                self.shutdown()
                raise
            logger.log("Training complete.")
            self.shutdown()
        if sigterm.received is not None:  # it came after the loop: pass it on to the caller
            logger.log(f"{signal_name(sigterm.received)} received after training completed.", console=True)
            raise TrainingInterrupted(sigterm.received)
        return self.final_result()

    def _signals_held(self) -> Any:
        """SIGTERM and Ctrl-C wait until the block ends (see ``SigtermGuard.held``): an
        interrupt never separates a log row from its snapshot."""
        guard = getattr(self, "_sigterm", None)
        return guard.held() if guard is not None else contextlib.nullcontext()

    def _stop_interrupted(self, interrupt: KeyboardInterrupt) -> None:
        """Log the interrupt, save the final snapshot when one is due, then shut down (also
        when saving fails: that error then propagates, chained to the interrupt)."""
        if self._pbar is not None:
            self._pbar.stop()
            self._pbar = None
        signum = getattr(interrupt, "signum", signal.SIGINT)
        how = "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal_name(signum)
        steps = self.itrs_done * getattr(self, "itr_batch_size", 0)
        logger.log(f"Training interrupted by {how} after {self.itrs_done} iterations "
                   f"({steps} steps); stopping.", with_prefix=False, console=True)
        try:
            if self._final_snapshot_due():
                self.save_itr_snapshot(self.itrs_done - 1)
        finally:
            self.shutdown()

    def _final_snapshot_due(self) -> bool:
        """Iterations finished since the last snapshot, and the logger keeps a snapshot of
        the last one (a snapshot directory is set; mode "last" or "all", or "gap" on an
        iteration the gap selects)."""
        itr = self.itrs_done - 1
        if itr < 0 or self._snapshot_itrs_done > itr or logger.get_snapshot_dir() is None:
            return False
        mode = logger.get_snapshot_mode()
        return mode in ("last", "all") or (mode == "gap" and itr % logger.get_snapshot_gap() == 0)

    # ---- what subclasses decide --------------------------------------------------------------
    @abc.abstractmethod
    def before_loop(self) -> None:
        """Work before the first iteration (e.g. the pre-training evaluation)."""

    @abc.abstractmethod
    def log_and_snapshot(self, itr: int) -> None:
        """At a log interval after iteration ``itr``: save the snapshot and write the log
        row; may set ``stop_requested`` to end training early."""

    @abc.abstractmethod
    def final_result(self) -> dict:
        """The summary ``train`` returns: at least ``final_return``, ``n_itr`` and
        ``cum_steps``."""


def _nan_to_none(value: float) -> float | None:
    return None if value != value else float(value)


def _none_to_nan(value: float | None) -> float:
    return float("nan") if value is None else float(value)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _modules(agent: Any) -> list:
    """Every submodule of the agent's models (its ``model`` and any other module it holds)."""
    found = []
    for value in vars(agent).values():
        if isinstance(value, torch.nn.Module):
            found.extend(value.modules())
    return found


class _BatchThread:
    """One background thread that collects batches for the overlapped schedule: ``start``
    hands it an iteration, ``result`` waits for that batch (re-raising, in the caller's
    thread, whatever the sampler raised), ``stop`` ends the thread. A daemon thread: it never
    keeps the interpreter alive."""

    def __init__(self, sampler: BaseSampler):
        self.sampler = sampler
        self._todo: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._busy = False
        self._thread = threading.Thread(target=self._serve, name="rlfast-overlap-sampler",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            itr = self._todo.get()
            if itr is None:
                return
            try:
                self._done.put((True, self.sampler.obtain_samples(itr)))
            except BaseException as error:  # handed to the caller's thread
                self._done.put((False, error))

    def start(self, itr: int) -> None:
        """Begin collecting the batch of iteration ``itr`` in the background."""
        if self._busy:
            raise RuntimeError("a batch is already being collected")
        self._busy = True
        self._todo.put(itr)

    def result(self) -> tuple:
        """Wait for the batch under way: ``(samples, traj_infos)``; the sampler's error is
        raised here."""
        ok, value = self._done.get()
        self._busy = False
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread (after the batch under way, if any, finished or failed: the
        sampler's shutdown ends its workers first)."""
        if self._thread.is_alive():
            self._todo.put(None)
            self._thread.join(timeout)


class MinibatchRl(MinibatchRlBase):
    """Tracks performance online: statistics of the last ``log_traj_window`` training
    trajectories are logged at each interval, which costs no extra environment steps."""

    def __init__(self, log_traj_window: int = 100, **kwargs: Any):
        super().__init__(**kwargs)
        self.log_traj_window = check_int(log_traj_window, "log_traj_window", minimum=1,
                                         owner=type(self).__name__)

    def initialize_logging(self) -> None:
        """Reset the shared diagnostics and the window of recent training trajectories."""
        super().initialize_logging()
        self._traj_window = deque(maxlen=self.log_traj_window)
        self._new_completed = 0
        self.last_return = float("nan")

    def add_traj_infos(self, traj_infos: TrajInfos) -> None:
        """Add completed training trajectories to the window and the counts."""
        self._traj_window.extend(traj_infos)
        self._new_completed += len(traj_infos)
        super().add_traj_infos(traj_infos)

    def _traj_infos_for_log(self) -> Iterable[Mapping[str, Any]]:
        return self._traj_window

    def runner_state(self) -> dict:
        """Also the window of recent training trajectories and the last logged return."""
        return dict(super().runner_state(), traj_window=[dict(t) for t in self._traj_window],
                    new_completed=self._new_completed, last_return=_nan_to_none(self.last_return))

    def load_runner_state(self, state: Mapping[str, Any]) -> None:
        super().load_runner_state(state)
        self._traj_window.clear()
        self._traj_window.extend(state["traj_window"])
        self._new_completed = int(state["new_completed"])
        self.last_return = _none_to_nan(state["last_return"])

    def before_loop(self) -> None:
        """Nothing: online tracking needs no evaluation before training."""

    def log_and_snapshot(self, itr: int) -> None:
        """Log the window of recent training trajectories, then save the snapshot (a run
        killed between the two resumes from the previous snapshot and redoes this row)."""
        logger.record_tabular("Diagnostics/NewCompletedTrajs", self._new_completed)
        self._new_completed = 0
        if self._traj_window:
            self.last_return = float(np.mean([t["Return"] for t in self._traj_window]))
        self.log_diagnostics(itr)
        self.save_itr_snapshot(itr)

    def final_result(self) -> dict:
        """``final_return`` (mean return of the window at the last log row), ``n_itr`` and
        ``cum_steps``."""
        return dict(final_return=self.last_return, n_itr=self.n_itr,
                    cum_steps=self.n_itr * self.itr_batch_size)


class MinibatchRlEval(MinibatchRlBase):
    """Tracks performance offline: at itr 0 and every log interval the agent runs in eval mode
    on separate environments, and those trajectories make the ``Return*`` columns.

    ``stop_return``: end training at the first evaluation (after training started) whose
    average return reaches it, e.g. for "reach score X within N steps" checks and sweeps.
    """

    def __init__(self, *args: Any, stop_return: float | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stop_return = None if stop_return is None else float(stop_return)

    def initialize_logging(self) -> None:
        """Reset the shared diagnostics and the record of evaluation returns."""
        super().initialize_logging()
        self.last_eval_return = float("nan")
        self.eval_returns: list[tuple[int, float]] = []
        self._train_returns: list[float] = []  # training episodes since the last row

    def add_traj_infos(self, traj_infos: TrajInfos) -> None:
        """Count completed training trajectories and keep their returns for the next row's
        ``TrainReturn``."""
        super().add_traj_infos(traj_infos)
        self._train_returns.extend(float(t["Return"]) for t in traj_infos)

    def runner_state(self) -> dict:
        """Also every evaluation so far and the last one's return."""
        # NaN (an evaluation that completed no episode) is saved as None: snapshots refuse
        # non-finite numbers, which elsewhere mean diverged weights.
        return dict(super().runner_state(),
                    eval_returns=[[steps, _nan_to_none(ret)] for steps, ret in self.eval_returns],
                    last_eval_return=_nan_to_none(self.last_eval_return),
                    train_returns=list(self._train_returns))

    def load_runner_state(self, state: Mapping[str, Any]) -> None:
        super().load_runner_state(state)
        self.eval_returns = [(int(steps), _none_to_nan(ret)) for steps, ret in state["eval_returns"]]
        self.last_eval_return = _none_to_nan(state["last_eval_return"])
        self._train_returns = [float(r) for r in state.get("train_returns", [])]

    def evaluate_agent(self, itr: int) -> tuple[list, float]:
        """Run the sampler's evaluation with the agent in eval mode; return the completed
        trajectory infos and the seconds it took.

        The average return (NaN when no episode completed) is kept as ``last_eval_return``
        and appended, with the environment steps so far, to ``eval_returns``.
        """
        if itr > 0 and self._pbar is not None:
            self._pbar.stop()
        logger.log("Evaluating agent...")
        self.sampling_agent.eval_mode(itr)
        start = time.time()
        traj_infos = self.sampler.evaluate_agent(itr)
        eval_time = time.time() - start
        logger.log(f"Evaluation: {len(traj_infos)} trajectories in {eval_time:.2f} s")
        self.last_eval_return = (float(np.mean([t["Return"] for t in traj_infos])) if traj_infos
                                 else float("nan"))  # no completed episode: no score
        steps = (itr + 1) * self.itr_batch_size if itr > 0 else 0
        self.eval_returns.append((steps, self.last_eval_return))
        return traj_infos, eval_time

    def before_loop(self) -> None:
        """Evaluate the untrained agent and log it as the first row (no steps yet)."""
        traj_infos, eval_time = self.evaluate_agent(0)
        self._log_eval_row(0, traj_infos, eval_time, steps_override=0)

    def _log_eval_row(self, itr: int, traj_infos: TrajInfos, eval_time: float,
                      steps_override: int | None = None) -> None:
        logger.record_tabular("Diagnostics/NumEvalTrajs", len(traj_infos))
        logger.record_tabular("Diagnostics/TrainReturn", float(np.mean(self._train_returns))
                              if self._train_returns else float("nan"))
        self._train_returns.clear()
        if steps_override is not None:
            # The pre-training evaluation: no steps or time have elapsed yet.
            logger.record_tabular("Diagnostics/Iteration", -1)
            logger.record_tabular("Diagnostics/CumSteps", 0)
            logger.record_tabular("Diagnostics/CumTime (s)", 0.0)
            logger.record_tabular("Diagnostics/StepsPerSecond", float("nan"))
            logger.record_tabular("Diagnostics/CumCompletedTrajs", 0)
            logger.record_tabular("Diagnostics/CumUpdates", 0)
            logger.record_tabular("Diagnostics/EvalTime (s)", eval_time)
            logger.record_tabular("Diagnostics/ETA (s)", float("nan"))
            self._log_infos(traj_infos)
            logger.dump_tabular(with_prefix=False)
            self._last_time = time.time()
        else:
            self.log_diagnostics(itr, traj_infos, eval_time)

    def log_and_snapshot(self, itr: int) -> None:
        """Evaluate, log the evaluation row, save the snapshot; request a stop once the
        evaluation return reaches ``stop_return``."""
        traj_infos, eval_time = self.evaluate_agent(itr)
        self._log_eval_row(itr, traj_infos, eval_time)
        self.save_itr_snapshot(itr)  # after the row: see MinibatchRl.log_and_snapshot
        if self.stop_return is not None and self.last_eval_return >= self.stop_return:
            logger.log(f"Evaluation return {self.last_eval_return:.2f} reached stop_return "
                       f"{self.stop_return}: stopping after {(itr + 1) * self.itr_batch_size} steps", console=True)
            self.stop_requested = True

    def final_result(self) -> dict:
        """``final_return`` (the last evaluation's average return), every
        ``(steps, return)`` in ``eval_returns``, ``n_itr`` and the ``cum_steps`` trained."""
        return dict(final_return=self.last_eval_return, eval_returns=list(self.eval_returns),
                    n_itr=self.n_itr, cum_steps=self.itrs_done * self.itr_batch_size)
