"""Asynchronous runners: sampling and optimization in separate processes.

The master process runs the optimizer and does all logging. It forks one sampler process
(an ``Async*`` sampler, which may fork its own workers) that collects batches at full speed
into a shared-memory double buffer; each finished batch is appended to the algorithm's
shared-memory replay buffer, by the master between its updates (``copier="optimizer"``, the
default) or by a copier process (``copier="process"``, as rlpyt does). The optimizer is
throttled so that the replay ratio (training samples used / environment samples in replay,
counted from the first learning step) never exceeds the algorithm's ``replay_ratio``: it
waits for new batches when it is ahead, and never makes the sampler wait. Every
``updates_per_sync`` updates it publishes its parameters to shared CPU memory, and the sampler
copies them before its next batch when they changed (see ``rlfast.agents.shared_params``).

Each log row adds ``Diagnostics/ReplayRatio`` (achieved since the last row),
``Diagnostics/SamplerItrPerSecond``, ``Diagnostics/UpdatesPerSecond`` and
``Diagnostics/PolicyLag`` (updates made between the parameters a batch was sampled with and
its arrival, averaged over the row's batches).

Faults: a sampler, worker or copier that raises or dies ends the run at once with its
traceback (the children are watched on every wait); Ctrl-C stops every process; shutdown
terminates any sampler worker left behind, so no process or shared memory outlives the run.
"""
from __future__ import annotations

import dataclasses
import math
import time
from typing import Any

import numpy as np
import psutil

from rlfast.algos.replay_choice import close_replay
from rlfast.runners.async_processes import AsyncCtrl, async_child
from rlfast.runners.minibatch_rl import MinibatchRlBase, MinibatchRl, MinibatchRlEval
from rlfast.runners.snapshots import (restore_models_and_replay, restore_replay,
                                      restore_training_state, resume_start_itr)
from rlfast.utils.checks import check_int
from rlfast.utils.collections import AttrDict
from rlfast.utils.distributed import (DEFAULT_DIST_TIMEOUT_S, DistEnv, broadcast_int,
                                      check_dist_settings, choose_backend,
                                      destroy_process_group, free_port, init_process_group)
from rlfast.utils.logging import logger
from rlfast.utils.processes import ChildFailedError, Deadline, ProcessSupervisor, mp_context
from rlfast.utils.seed import make_seed, set_seed

__all__ = ["AsyncRlBase", "AsyncRl", "AsyncRlEval", "AsyncRunError", "async_affinity"]

COPIERS = ("optimizer", "process")
_STARTUP_S = 300.0


class AsyncRunError(ChildFailedError):
    """The sampler process (or one of its workers) or the replay copier failed; the message
    carries the failing process's traceback."""


def async_affinity(affinity: dict | None) -> AttrDict:
    """The ``optimizer`` / ``sampler`` affinity of an async run: a decoded ``ass`` code as
    is, None for defaults (optimizer on the CPU, sampler workers on every core). The
    ``optimizer`` list has one entry per optimizer rank (``gpr`` > 1: several GPUs training
    together through DistributedDataParallel)."""
    if affinity is None:
        return AttrDict(optimizer=[AttrDict(cuda_idx=None)], sampler=AttrDict())
    if "optimizer" not in affinity or "sampler" not in affinity:
        raise ValueError(f"an async runner needs an affinity with 'optimizer' and 'sampler' "
                         f"entries (an 'ass' affinity code); got keys {sorted(affinity)}")
    optimizer = affinity["optimizer"]
    optimizer = list(optimizer) if isinstance(optimizer, (list, tuple)) else [optimizer]
    if not optimizer:
        raise ValueError("the async affinity's 'optimizer' list is empty: it needs one entry "
                         "per optimizer rank")
    on_cuda = {o.get("cuda_idx") is not None for o in optimizer}
    if len(on_cuda) > 1:
        raise ValueError("the optimizer ranks must all be on GPUs or all on the CPU; got "
                         f"cuda_idx {[o.get('cuda_idx') for o in optimizer]}")
    return AttrDict(affinity, optimizer=[dict(o) for o in optimizer],
                    sampler=AttrDict(affinity["sampler"]))


class AsyncRlBase(MinibatchRlBase):
    """Startup, the throttled optimizer loop and shutdown shared by the async runners.

    ``affinity``: a decoded ``ass`` affinity (``optimizer`` list of one entry, ``sampler``
    dict) or None. ``copier``: ``"optimizer"`` (the master appends each batch between
    updates) or ``"process"`` (a copier process does). ``n_steps`` counts environment steps.

    Several optimizer ranks (an ``optimizer`` affinity list of N entries): the master is
    rank 0 and forks ranks 1..N-1, which join one process group (NCCL on GPUs, gloo on the
    CPU; ``backend`` overrides) and wrap the agent in DistributedDataParallel. Rank 0 alone
    copies batches, throttles, publishes parameters and logs; before each of its
    ``optimize_agent`` calls it broadcasts the iteration, and every rank then runs the same
    updates, each sampling ``batch_size / N`` from the shared replay buffer, with gradients
    all-reduced. ``dist_timeout``: seconds a collective may wait before the run fails.

    ``sampler_throttle`` (optimizer copier only): also hold the sampler back, so that the
    replay ratio never falls below ``replay_ratio`` either: a batch is appended only once the
    optimizer has made the updates the earlier ones allow, and the sampler, whose slots stay
    taken meanwhile, waits. The optimizer then trains on the same number of samples per
    environment step as the synchronous runner (learning per step matches it) while sampling
    and training still overlap. Off (default), the sampler runs at full speed and the replay
    ratio falls below ``replay_ratio`` whenever the optimizer cannot keep up.
    """

    def __init__(self, algo: Any, agent: Any, sampler: Any, n_steps: int,
                 seed: int | None = None, affinity: dict | None = None,
                 log_interval_steps: int = 100_000, copier: str = "optimizer",
                 sampler_throttle: bool = False, progress_bar: bool = True,
                 backend: str | None = None, dist_timeout: float = DEFAULT_DIST_TIMEOUT_S):
        if copier not in COPIERS:
            raise ValueError(f"copier must be one of {COPIERS}; got {copier!r}")
        if sampler_throttle and copier != "optimizer":
            raise ValueError("sampler_throttle=True needs copier='optimizer' (the optimizer "
                             "decides when a batch enters replay)")
        self.sampler_throttle = bool(sampler_throttle)
        if not getattr(sampler, "is_async", False):
            raise TypeError(f"{type(self).__name__} needs an asynchronous sampler "
                            f"(AsyncSerialSampler, AsyncCpuSampler, AsyncGpuSampler or "
                            f"AsyncAlternatingSampler); got {type(sampler).__name__}")
        self.async_affinity = async_affinity(affinity)
        super().__init__(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                         affinity=dict(self.async_affinity.optimizer[0]),
                         log_interval_steps=log_interval_steps, progress_bar=progress_bar)
        self.copier = copier
        self._supervisor: ProcessSupervisor | None = None
        self._grandchildren: list = []
        self.n_optimizers = len(self.async_affinity.optimizer)
        on_cuda = self.async_affinity.optimizer[0].get("cuda_idx") is not None
        self.backend, self.dist_timeout = check_dist_settings(
            backend, dist_timeout, type(self).__name__, on_cuda)
        self._opt_ranks: ProcessSupervisor | None = None

    @property
    def shares_replay(self) -> bool:
        """Whether the replay is shared between processes (on shared memory, behind a
        reader-writer lock): when a copier process appends to it, or several optimizer ranks
        sample from it. Otherwise the optimizer alone appends and samples, and keeps its
        replay where ``replay_device`` says (on its GPU, by default)."""
        return self.copier == "process" or self.n_optimizers > 1

    # ---- startup / shutdown ------------------------------------------------------------------
    def startup(self) -> int:
        """Seed, build the agent and double buffer (``sampler.async_initialize``) and the
        shared replay buffer (``algo.async_initialize``), fork the sampler process (and the
        copier), wait until the sampler is built, then move the agent to the optimizer's
        device and build the optimizer. Returns the sampler's number of iterations."""
        self._set_master_affinity(optimizer_only=True)
        if self.seed is None:
            self.seed = make_seed()
        set_seed(self.seed)
        sampler, algo, agent = self.sampler, self.algo, self.agent
        examples = sampler.async_initialize(agent, bootstrap_value=False,
                                            traj_info_kwargs=self.get_traj_info_kwargs(),
                                            seed=self.sampler_seed())
        self.itr_batch_size = sampler.batch_spec.size
        n_itr = self.get_n_itr()
        # With the optimizer as the copier and one optimizer rank, the replay is the
        # optimizer's own: built in optim_initialize on its device (a device replay on a GPU).
        self.replay_buffer = algo.async_initialize(
            agent, n_itr, sampler.batch_spec, sampler.mid_batch_reset, examples,
            world_size=self.n_optimizers, shared_replay=self.shares_replay)
        self._start_itr = 0
        self._replay_deferred = algo.replay_deferred
        if self._resume is not None:  # before the fork: the sampler acts with these parameters
            snapshot, snapshot_dir = self._resume
            self._start_itr = resume_start_itr(self, snapshot, n_itr)
            restore_models_and_replay(self, snapshot, snapshot_dir)
        ctx = mp_context()
        agent.async_share(ctx)
        self.ctrl = AsyncCtrl(ctx, copier_process=self.copier == "process")
        self._launch(n_itr)
        if self.n_optimizers > 1:
            self._launch_optimizer_ranks()
        else:
            agent.to_device(self.affinity.get("cuda_idx"))
        algo.optim_initialize(rank=0)
        self.replay_buffer = algo.replay_buffer
        if self._resume is not None and self._replay_deferred:
            restore_replay(self, *self._resume)
        algo.on_update = self._after_update
        self._published = algo.update_counter
        self.initialize_logging()
        if self._resume is not None:
            restore_training_state(self, self._resume[0])
            start = self._start_itr
            self._received = self._copied = start
            self._row.update(copied=start, received=start, updates=algo.update_counter)
            # Updates the replay ratio allows count from here: the steps already trained on
            # (replay restored), or the refill after which learning starts again.
            learn_from = max(algo.min_itr_learn, algo.learn_after_itr)
            self._allowance = (learn_from, 0 if learn_from == algo.min_itr_learn
                               else algo.update_counter)
            logger.log(f"Resumed from iteration {start - 1} ({start * self.itr_batch_size} "
                       f"steps); training to {self.n_steps} steps", console=True)
        return n_itr

    def eval_itrs(self) -> int:
        """Sampler iterations between evaluations in the sampler process (0: none)."""
        return 0

    # ---- optimizer ranks beyond the first ---------------------------------------------------
    def _launch_optimizer_ranks(self) -> None:
        """Fork optimizer ranks 1..N-1 (after the sampler, so it holds no process group),
        then join the group as rank 0 and wrap the agent in DistributedDataParallel."""
        n = self.n_optimizers
        envs = [DistEnv(rank=r, local_rank=r, world_size=n, local_world_size=n,
                        master_addr="127.0.0.1", master_port=free_port(), launcher="spawn")
                for r in range(n)]
        envs = [dataclasses.replace(e, master_port=envs[0].master_port) for e in envs]
        self._opt_ranks = ProcessSupervisor(label="Optimizer rank", error_cls=AsyncRunError,
                                            names=[f"Optimizer rank {r}" for r in range(1, n)])
        self._opt_ranks.start(_optimizer_rank_child,
                              [dict(runner=self, env=e) for e in envs[1:]],
                              name="rlfast-optimizer", owner=self, daemon=False)
        self._join_optimizer_group(envs[0])

    def _join_optimizer_group(self, env: DistEnv) -> None:
        cuda_idx = self.async_affinity.optimizer[env.rank].get("cuda_idx")
        backend = choose_backend(self.backend, cuda_idx is not None)
        if cuda_idx is not None:
            import torch
            torch.cuda.set_device(cuda_idx)
        # Rank 0 is the caller's process, which goes on after the run: leave its environment
        # as it was (the forked ranks exit with the run).
        init_process_group(env, backend, self.dist_timeout, keep_environ=env.rank > 0)
        self.agent.to_device(cuda_idx)
        self.agent.data_parallel()

    def run_optimizer_rank(self, env: DistEnv) -> None:
        """An optimizer rank beyond the first (in its own process): join the group, then run
        ``optimize_agent`` for every iteration rank 0 broadcasts, until it broadcasts -1.
        Rank 0 alone copies batches, publishes parameters and logs."""
        logger.set_muted(True)
        self.affinity = dict(self.async_affinity.optimizer[env.rank])
        self._set_master_affinity(optimizer_only=True)
        try:
            self._join_optimizer_group(env)
            self.algo.optim_initialize(rank=env.rank)
            if self._resume is not None:  # every rank continues from the same optimizer state
                self.algo.load_optim_state_dict(self._resume[0]["optimizer_state_dict"])
            self.algo.on_update = None
            while True:
                itr = broadcast_int(0)
                if itr < 0:
                    break
                self.agent.train_mode(itr)
                self.algo.optimize_agent(itr, samples=None)
        finally:
            self.agent.undo_data_parallel()
            destroy_process_group()

    def _command_optimizer_ranks(self, itr: int) -> None:
        """Rank 0: tell the other optimizer ranks to run ``optimize_agent(itr)`` (-1: stop)."""
        if self._opt_ranks is not None and self._opt_ranks.n:
            broadcast_int(itr)

    def _launch(self, n_itr: int) -> None:
        children = [dict(role="sampler", sampler=self.sampler, agent=self.agent,
                         affinity=dict(self.async_affinity.sampler), seed=self.sampler_seed(),
                         n_itr=n_itr, eval_itrs=self.eval_itrs(), ctrl=self.ctrl,
                         start_itr=self._start_itr)]
        names = ["Async sampler process"]
        if self.copier == "process":
            children.append(dict(role="copier", slots=self.sampler.double_buffer_pyt,
                                 samples_to_buffer=self.algo.samples_to_buffer,
                                 replay_buffer=self.replay_buffer, ctrl=self.ctrl,
                                 first_slot=self._start_itr % 2))
            names.append("Replay copier process")
        self._supervisor = ProcessSupervisor(label="Async child", error_cls=AsyncRunError,
                                             stop_flags=[self.ctrl.stop], names=names)
        self._supervisor.start(async_child, children, name="rlfast-async", owner=self,
                               daemon=False)
        timeout = self.sampler.worker_timeout
        deadline = Deadline(None if timeout is None else max(_STARTUP_S, float(
            timeout if isinstance(timeout, (int, float)) else 0)),
            "the sampler process's startup timeout (sampler.worker_timeout='off' waits forever)")
        self._early: list = []
        while True:
            messages = self._supervisor.receive(deadline.wait_s(1.0))
            ready = [m for m in messages if m[1] == "ready"]
            self._early.extend(m for m in messages if m[1] != "ready")
            if ready:
                pids = ready[0][2]
                self._grandchildren = [_process(pid) for pid in pids]
                return
            if deadline.expired():
                self._supervisor.fail_silent([0], "sent no 'ready'", deadline)

    def shutdown(self) -> None:
        """Stop the children (the copier and the sampler process, which stops its workers),
        terminate any sampler worker left behind (its parent was killed), restore the
        master's affinity. Runs on every exit path."""
        if self._pbar is not None:
            self._pbar.stop()
        if self._opt_ranks is not None:
            self.agent.undo_data_parallel()
            destroy_process_group()
            self._opt_ranks.stop()
        if self._supervisor is not None:
            self._supervisor.stop()
        for process in self._grandchildren:
            _end(process)
        self._grandchildren = []
        self.algo.on_update = None
        close_replay(self.algo)
        self._restore_master_affinity()

    # ---- the optimizer loop ------------------------------------------------------------------
    def initialize_logging(self) -> None:
        """Reset the shared diagnostics and the async counters (batches received and in
        replay, updates and time at the last row, policy lags)."""
        super().initialize_logging()
        self._received = self._copied = 0
        self._pending: list[int] = []  # received batches not yet in replay (optimizer copier)
        self._finished = False
        self._lags: list[int] = []
        self._row = dict(time=time.time(), copied=0, updates=0, received=0)

    def _after_update(self, update_counter: int) -> None:
        """After every single update: publish the parameters when ``updates_per_sync``
        updates passed, and take in any finished batch (appending it to replay when the
        optimizer is the copier), so the sampler never waits longer than one update for its
        slot to be freed."""
        if update_counter - self._published >= self.algo.updates_per_sync:
            self.agent.send_shared_memory(update_counter, wait=False)  # GPU: no host wait
            self._published = update_counter
        if not self.stop_requested:
            self._handle(self._supervisor.receive(0))

    def updates_allowed(self) -> int:
        """Updates the replay ratio allows so far: ``replay_ratio`` times the steps in replay
        since learning began, over the training batch size."""
        algo = self.algo
        learn_from, base = getattr(self, "_allowance", (algo.min_itr_learn, 0))
        learning = self._copied - learn_from
        if learning <= 0:
            return base
        return base + math.floor(algo.replay_ratio * learning * self.itr_batch_size
                                 / algo.batch_size + 1e-9)

    def _run_loop(self, n_itr: int) -> None:
        try:
            self._optimize_loop(n_itr)
        except Exception as error:  # a dead optimizer rank makes rank 0's collective err
            child_error = self._opt_ranks.failure(5.0) if self._opt_ranks is not None else None
            if child_error is not None:
                raise child_error from error
            raise

    def _optimize_loop(self, n_itr: int) -> None:
        messages, self._early = self._early, []
        self._handle(messages)
        algo = self.algo
        while not self.stop_requested:
            self._append_pending()
            can_update = self._owes_updates()
            if self._finished and self._copied == self._received and not can_update:
                break
            self._handle(self._supervisor.receive(0 if can_update else 1.0))
            if can_update:
                self.agent.train_mode(self._copied - 1)
                self._command_optimizer_ranks(self._copied - 1)
                opt_info = algo.optimize_agent(self._copied - 1, samples=None)
                for k, v in self._opt_infos.items():
                    new = getattr(opt_info, k, [])
                    v.extend(new if isinstance(new, list) else [new])
        self._command_optimizer_ranks(-1)
        if self._opt_ranks is not None:  # they finished the same updates: wait for them
            self._opt_ranks.gather("done", timeout=max(60.0, self.dist_timeout))
        if not self.stop_requested:
            self.agent.send_shared_memory(algo.update_counter)  # the final parameters
            self.finish(n_itr)

    def finish(self, n_itr: int) -> None:
        """After the last batch and the updates it allows: the final log row (and, in
        ``AsyncRlEval``, the final evaluation of the final parameters)."""

    def _handle(self, messages: list) -> None:
        for _, kind, payload in messages:
            if kind == "batch":
                itr, traj_infos, param_updates = payload
                self._received = itr + 1
                self._lags.append(self.algo.update_counter - param_updates)
                if self.copier == "optimizer":
                    self._pending.append(itr)
                self.on_batch(itr, traj_infos)
            elif kind == "copied":
                self._copied += 1
            elif kind == "eval":
                self.on_eval(*payload)
            elif kind == "finished":
                self._finished = True
        self._append_pending()
        self.itrs_done = self._copied

    def _owes_updates(self) -> bool:
        return self.algo.update_counter + self.algo.updates_per_optimize <= self.updates_allowed()

    def _append_pending(self) -> None:
        """Optimizer copier: append received batches to replay, in order, and free their
        slots; with ``sampler_throttle``, only while the optimizer owes no updates."""
        while self._pending and not self.stop_requested and not (
                self.sampler_throttle and self._owes_updates()):
            slot = self._pending.pop(0) % 2
            self.replay_buffer.append_samples(
                self.algo.samples_to_buffer(self.sampler.double_buffer_pyt[slot]))
            self.ctrl.free[slot].release()
            self._copied += 1

    def on_batch(self, itr: int, traj_infos: list) -> None:
        """A batch arrived: keep its trajectories (and, in subclasses, log on interval)."""
        self.store_diagnostics(itr, traj_infos, None)

    def on_eval(self, itr: int, traj_infos: list, eval_time: float) -> None:
        """An evaluation arrived from the sampler process (AsyncRlEval only)."""

    def record_async_diagnostics(self) -> None:
        """The async columns of the next log row (see the module docstring)."""
        now = time.time()
        elapsed = max(now - self._row["time"], 1e-9)
        steps = (self._copied - self._row["copied"]) * self.itr_batch_size
        updates = self.algo.update_counter - self._row["updates"]
        with logger.tabular_prefix("Diagnostics/"):
            logger.record_tabular("ReplayRatio", updates * self.algo.batch_size / steps
                                  if steps else float("nan"))
            logger.record_tabular("SamplerItrPerSecond",
                                  (self._received - self._row["received"]) / elapsed)
            logger.record_tabular("UpdatesPerSecond", updates / elapsed)
            logger.record_tabular("PolicyLag", float(np.mean(self._lags)) if self._lags
                                  else float("nan"))
        self._lags = []
        self._row = dict(time=now, copied=self._copied, updates=self.algo.update_counter,
                         received=self._received)


class AsyncRl(AsyncRlBase, MinibatchRl):
    """Asynchronous RL with online performance tracking: every ``log_interval_steps``
    sampler steps, the window of recent training trajectories is logged."""

    def __init__(self, *args: Any, log_traj_window: int = 100, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.log_traj_window = check_int(log_traj_window, "log_traj_window", minimum=1,
                                         owner=type(self).__name__)

    def on_batch(self, itr: int, traj_infos: list) -> None:
        """Add the batch's trajectories to the window; log at each interval."""
        self.store_diagnostics(itr, traj_infos, None)
        if (itr + 1) % self.log_interval_itrs == 0 and itr < self.n_itr - 1:
            with self._signals_held():
                self.record_async_diagnostics()
                self.log_and_snapshot(itr)

    def finish(self, n_itr: int) -> None:
        """The last row, once the optimizer has made its last updates."""
        self.record_async_diagnostics()
        self.log_and_snapshot(n_itr - 1)


class AsyncRlEval(AsyncRlBase, MinibatchRlEval):
    """Asynchronous RL with offline evaluation: the sampler process evaluates the agent
    (with the newest parameters) before training, every ``log_interval_steps`` and at the
    end; each evaluation makes one log row. ``stop_return`` ends training early as in
    ``MinibatchRlEval``."""

    def __init__(self, *args: Any, stop_return: float | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.stop_return = None if stop_return is None else float(stop_return)

    def eval_itrs(self) -> int:
        """Evaluate every log interval (in sampler iterations)."""
        return self.log_interval_itrs

    def before_loop(self) -> None:
        """Nothing: the sampler process evaluates the untrained agent itself."""

    def finish(self, n_itr: int) -> None:
        """Ask the sampler process to evaluate the final parameters (published after the
        last update) and log that row."""
        evaluations = len(self.eval_returns)
        self._supervisor.send_all(("final_eval",), indexes=[0])
        while len(self.eval_returns) == evaluations:
            self._handle(self._supervisor.receive(1.0))

    def on_eval(self, itr: int, traj_infos: list, eval_time: float) -> None:
        """Log the evaluation row (the first one, before training, with no steps) and
        request a stop once ``stop_return`` is reached."""
        returns = [t["Return"] for t in traj_infos]
        self.last_eval_return = float(np.mean(returns)) if returns else float("nan")
        first = not self.eval_returns
        steps = 0 if first else (itr + 1) * self.itr_batch_size
        self.eval_returns.append((steps, self.last_eval_return))
        logger.log(f"Evaluation: {len(traj_infos)} trajectories in {eval_time:.2f} s")
        if first:
            if self._pbar is not None:
                self._pbar.stop()
            self._log_eval_row(0, traj_infos, eval_time, steps_override=0)
            self._row["time"] = time.time()
            self._start_progress()
            return
        with self._signals_held():  # the row, then its snapshot (see MinibatchRl)
            self.record_async_diagnostics()
            self._log_eval_row(itr, traj_infos, eval_time)
            self.save_itr_snapshot(itr)
        if self.stop_return is not None and self.last_eval_return >= self.stop_return:
            logger.log(f"Evaluation return {self.last_eval_return:.2f} reached stop_return "
                       f"{self.stop_return}: stopping after {steps} steps")
            self.stop_requested = True

    def log_and_snapshot(self, itr: int) -> None:
        """Rows come from the sampler's evaluations (see :meth:`on_eval`)."""


def _optimizer_rank_child(conn: Any, runner: AsyncRlBase, env: DistEnv) -> None:
    """Entry point of optimizer rank ``env.rank`` (> 0), forked by rank 0."""
    runner.run_optimizer_rank(env)
    conn.send(("done", None))


def _process(pid: int) -> psutil.Process | None:
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _end(process: psutil.Process | None) -> None:
    """Terminate a sampler worker left behind (same pid and start time: never another
    process that reused the pid), then kill it if it does not exit."""
    if process is None:
        return
    try:
        if process.is_running():
            process.terminate()
            process.wait(2)
    except psutil.TimeoutExpired:
        try:
            process.kill()
        except psutil.Error:
            pass
    except psutil.Error:
        pass
