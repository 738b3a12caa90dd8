"""Synchronous multi-process training: one process per rank, each with its own sampler, its
own copy of the agent wrapped in DistributedDataParallel and the same algorithm; gradients
are all-reduced every update, so every rank holds the same parameters.

The ranks come from the launcher (``torchrun``, Slurm ``srun``; see
:func:`rlfast.utils.distributed.launch_env`) or, with ``world_size`` > 1 (or an affinity list
with one entry per rank) and no launcher, from this runner: the calling process becomes rank
0 and forks ranks 1..N-1 under a :class:`~rlfast.utils.processes.ProcessSupervisor`, on a
free port of 127.0.0.1. Either way every rank runs the same code through ``env://``.

Batch sizes: each rank's sampler runs its own ``batch_B`` environments (the global batch per
iteration is ``world_size * T * B``, as in rlpyt); replay-based algorithms keep one replay
buffer per rank and each samples ``batch_size / world_size`` of every update's batch, and
on-policy statistics (PPO's advantage normalization, observation normalization) are pooled
over all ranks, so the ranks optimize the objective one process with the global batch would.
"""
from __future__ import annotations

import gc
import threading
import time
import traceback
from typing import Any

import psutil
import torch

from rlfast.utils.interrupts import SigtermGuard
from rlfast.runners.minibatch_rl import MinibatchRl, MinibatchRlEval, TrajInfos
from rlfast.utils import distributed
from rlfast.utils.checks import check_int
from rlfast.utils.distributed import DEFAULT_DIST_TIMEOUT_S, DistEnv
from rlfast.utils.logging import logger
from rlfast.utils.processes import ChildFailedError, ProcessSupervisor, StopChild

__all__ = ["SyncRl", "SyncRlEval", "SyncRlMixin", "RankFailedError", "rank_affinity",
           "RANK_SEED_STRIDE"]

FAILURE_GRACE_S = 2.0  # after a rank fails, how long to collect the others' failures
SPAWNED_RANKS_JOIN_S = 5.0  # a stopping rank's time to save rank 0's snapshot and shut down
RANK_SEED_STRIDE = 10_007  # rank r samples with seed + r * stride (model init: the same seed)
_SEED_MODULUS = 2 ** 32 - 1


class RankFailedError(ChildFailedError):
    """A rank of a distributed run raised or died; the message carries its traceback."""


def rank_affinity(affinity: dict | list | None, env: DistEnv,
                  n_gpus: int | None = None) -> dict:
    """This rank's affinity dict.

    A list (one dict per local rank, as an affinity code with ``gpr`` > 1 decodes) gives the
    entry of ``env.local_rank``. One dict shared by every process of a node is split: the
    local rank takes every ``local_world_size``-th sampler worker (at least one), the master
    runs on those workers' cores, and a ``cuda_idx`` becomes ``local_rank`` (modulo the GPUs
    present), so that ranks launched with one command line do not pile onto one GPU or
    one core. Under Slurm the cores are not split: ``srun --cpus-per-task`` already bound
    each task to its own cores, which are all this process sees. None gives ``{}``
    (nothing pinned, the agent on the CPU).
    """
    if affinity is None:
        return {}
    if isinstance(affinity, (list, tuple)):
        if env.local_rank >= len(affinity):
            raise ValueError(f"the affinity lists {len(affinity)} ranks but this is local rank "
                             f"{env.local_rank}: give one affinity per rank on this node")
        return dict(affinity[env.local_rank])
    if "optimizer" in affinity:
        raise ValueError("an async affinity (with 'optimizer' and 'sampler') was given to a "
                         "synchronous multi-process runner")
    out = dict(affinity)
    n_local = max(env.local_world_size, 1)
    if n_local > 1 and env.launcher != "slurm":
        workers = out.get("workers_cpus")
        if workers:
            mine = (list(workers[env.local_rank::n_local])
                    or [workers[env.local_rank % len(workers)]])
            out["workers_cpus"] = mine
            out["master_cpus"] = sorted({c for cpus in mine for c in cpus})
        elif out.get("master_cpus"):
            cpus = list(out["master_cpus"])
            out["master_cpus"] = cpus[env.local_rank::n_local] or [cpus[env.local_rank % len(cpus)]]
    if out.get("cuda_idx") is not None:
        count = torch.cuda.device_count() if n_gpus is None else n_gpus
        out["cuda_idx"] = env.local_rank % count if count else env.local_rank
    return out


def _rank_child(conn: Any, runner: "SyncRlMixin", env: DistEnv) -> None:
    """Entry point of a rank forked by the spawning process: train as that rank, then send
    ``final_result()`` (rank 0's carries the logged returns). A failure is sent as
    ``("rank_error", (time it began, traceback))``: the spawning process reports the rank
    that failed first, not the ranks whose collectives failed because of it."""
    runner._dist_env = env
    runner._spawned = True
    try:
        result = runner.train()
    except StopChild:
        raise
    except BaseException:  # noqa: BLE001 - every failure must reach the spawning process
        failed_at = runner._failed_at if runner._failed_at is not None else time.time()
        conn.send(("rank_error", (failed_at, traceback.format_exc())))
        raise StopChild("failure reported") from None
    conn.send(("done", result))


class _DescendantWatch:
    """Remembers the descendants of the spawned ranks (their sampler workers), polling in a
    thread, so that those of a rank killed outright can be ended too."""

    def __init__(self, poll_s: float = 1.0):
        self.poll_s = poll_s
        self.seen: dict[int, psutil.Process] = {}
        self._done = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, pids: list[int]) -> None:
        """Watch the descendants of the processes ``pids``."""
        self._roots = []
        for pid in pids:
            try:
                self._roots.append(psutil.Process(pid))
            except psutil.Error:
                pass
        self._thread = threading.Thread(target=self._poll, name="rlfast-rank-watch",
                                        daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        while not self._done.is_set():
            self._record()
            self._done.wait(self.poll_s)

    def _record(self) -> None:
        for root in self._roots:
            try:
                for child in root.children(recursive=True):
                    self.seen.setdefault(child.pid, child)
            except psutil.Error:
                pass

    def end_survivors(self) -> None:
        """Stop polling; terminate (then kill) every remembered descendant still running
        (psutil checks the start time: a reused pid is never signalled)."""
        self._done.set()
        if self._thread is not None:
            self._thread.join()
        alive = [p for p in self.seen.values() if p.is_running()]
        for process in alive:
            try:
                process.terminate()
            except psutil.Error:
                pass
        _, still = psutil.wait_procs(alive, timeout=2.0)
        for process in still:
            try:
                process.kill()
            except psutil.Error:
                pass


class SyncRlMixin:
    """What :class:`SyncRl` and :class:`SyncRlEval` add to the single-process runners.

    ``world_size``: ranks to spawn on this machine when no launcher set the variables
    (default: the affinity list's length, else 1); ignored under a launcher, whose
    ``WORLD_SIZE`` rules. ``backend``: ``"nccl"`` or ``"gloo"`` (default: NCCL when the
    agent is on CUDA, gloo on CPU). ``dist_timeout``: seconds any collective (and the
    rendezvous) may wait before the rank raises, so that a hung rank ends the run; it must
    exceed rank 0's evaluation time, during which the other ranks wait.
    """

    def __init__(self, *args: Any, world_size: int | None = None, backend: str | None = None,
                 dist_timeout: float = DEFAULT_DIST_TIMEOUT_S, **kwargs: Any):
        affinity = kwargs.pop("affinity", None)
        self._affinities = affinity
        super().__init__(*args, **kwargs)
        owner = type(self).__name__
        if self.overlap:
            raise ValueError(f"{owner}: overlap=True is for the single-process runners "
                             f"(MinibatchRl, MinibatchRlEval); a multi-rank run samples and "
                             f"trains in step on every rank")
        if world_size is not None:
            world_size = check_int(world_size, "world_size", minimum=1, owner=owner)
        elif isinstance(affinity, (list, tuple)):
            world_size = len(affinity)
        self.requested_world_size = world_size or 1
        entries = affinity if isinstance(affinity, (list, tuple)) else [affinity or {}]
        on_cuda = all(e.get("cuda_idx") is not None for e in entries)
        self.backend, self.dist_timeout = distributed.check_dist_settings(
            backend, dist_timeout, owner, on_cuda)  # nccl without CUDA: refused before any file
        self._dist_env: DistEnv | None = None
        self._spawned = False
        self._ranks: ProcessSupervisor | None = None
        self._local_trajs: list = []
        self._failed_at: float | None = None

    # ---- launching --------------------------------------------------------------------
    def _resolve_env(self) -> DistEnv:
        if self._dist_env is not None:
            return self._dist_env
        env = distributed.launch_env()
        if env is None:
            n = self.requested_world_size
            env = DistEnv(rank=0, local_rank=0, world_size=n, local_world_size=n,
                          master_addr="127.0.0.1",
                          master_port=distributed.free_port() if n > 1 else 0,
                          launcher="spawn")
        return env

    def train(self) -> dict:
        """Train as this rank, or, when this process launches the ranks (``world_size`` > 1
        and no launcher), fork them all and supervise them (see ``_train_spawning``). Every
        rank returns ``final_result()``; rank 0's holds the logged returns.

        A rank that raises ends the run on every rank; a spawning process raises
        ``RankFailedError`` with the failing rank's traceback.
        """
        env = self._resolve_env()
        self._dist_env = env
        if env.launcher == "spawn" and env.world_size > 1 and not self._spawned:
            return self._train_spawning(env)
        if env.rank != 0:
            logger.set_muted(True)
            self.progress_bar = False
        return super().train()

    def _train_spawning(self, env: DistEnv) -> dict:
        """Fork every rank (0..N-1) and supervise them from this process, which joins no
        process group: it waits on their pipes and sentinels together, so a rank that
        raises or dies, before or after the rendezvous, stops every rank at once and raises
        its traceback here; a hung rank makes the others' collectives time out
        (``dist_timeout``), which ends the run the same way. SIGTERM here stops the ranks
        (rank 0 saves its final snapshot) and raises ``TrainingInterrupted``. Returns rank
        0's ``final_result()``."""
        envs = [DistEnv(rank=r, local_rank=r, world_size=env.world_size,
                        local_world_size=env.world_size, master_addr=env.master_addr,
                        master_port=env.master_port, launcher="spawn")
                for r in range(env.world_size)]
        self._ranks = ProcessSupervisor(label="Rank", error_cls=RankFailedError,
                                        names=[f"Rank {e.rank}" for e in envs],
                                        join_s=SPAWNED_RANKS_JOIN_S, terminate_first=True)
        watch = _DescendantWatch()
        with SigtermGuard():
            try:
                self._ranks.start(_rank_child, [dict(runner=self, env=e) for e in envs],
                                  name="rlfast-rank", owner=self, daemon=False)
                watch.start([p.pid for p in self._ranks.processes])
                return self._supervise_ranks(env.world_size)
            finally:  # on an error or interrupt: SIGTERM to every rank (rank 0 then saves
                self._ranks.stop()  # its final snapshot), SIGKILL after the grace period
                watch.end_survivors()  # the sampler workers of a rank that was killed

    def _supervise_ranks(self, n: int) -> dict:
        """Wait for every rank's result. On the first failure, keep listening for
        ``FAILURE_GRACE_S`` (the other ranks' collectives fail in turn) and raise
        ``RankFailedError`` naming the rank that failed first, with its traceback, the ranks
        that failed after it, and any rank still running (a rank stuck outside the
        collectives, e.g. in a hung environment, makes the others time out)."""
        results: dict[int, Any] = {}
        failures: dict[int, tuple[float, str]] = {}
        waiting = set(range(n))
        grace_end = None
        while waiting:
            timeout = None if grace_end is None else max(0.0, grace_end - time.monotonic())
            for i, kind, payload in self._ranks.poll(timeout, indexes=waiting):
                waiting.discard(i)
                if kind == "done":
                    results[i] = payload
                elif kind == "rank_error":
                    failures[i] = (float(payload[0]), f"{self._rank_label(i)} raised:\n"
                                                      f"{payload[1]}")
                elif kind == "error":
                    failures[i] = (time.time(), f"{self._rank_label(i)} raised:\n{payload}")
                else:  # "died", or an unexpected message
                    failures[i] = (time.time(), str(payload) if kind == "died" else
                                   f"{self._rank_label(i)} sent {kind!r}")
            if failures and grace_end is None:
                grace_end = time.monotonic() + FAILURE_GRACE_S
            if grace_end is not None and time.monotonic() >= grace_end:
                break
        if failures:
            raise RankFailedError(self._failure_report(failures, waiting))
        return results[0]

    def _rank_label(self, i: int) -> str:
        return f"Rank {i} (pid {self._ranks.processes[i].pid})"

    def _failure_report(self, failures: dict, running: set) -> str:
        order = sorted(failures, key=lambda i: failures[i][0])
        lines = [failures[order[0]][1].rstrip()]
        for i in order[1:]:
            last = failures[i][1].rstrip().splitlines()[-1]
            lines.append(f"Then rank {i} failed too: {last}")
        timed_out = "timed out" in lines[0].lower() or "timeout" in lines[0].lower()
        for i in sorted(running):
            process = self._ranks.processes[i]
            line = (f"{self._rank_label(i)} was still running (process status: "
                    f"{_status(process.pid)}) and was stopped.")
            if timed_out:
                line += (f" It sent nothing: a rank stuck outside the collectives (e.g. in an "
                         f"environment step) makes the others time out after "
                         f"dist_timeout={self.dist_timeout:g} s.")
            lines.append(line)
        return "\n".join(lines)

    # ---- startup / shutdown -----------------------------------------------------------
    def startup(self) -> int:
        """Join the process group, then start as the single-process runner does, as this
        rank: its share of the environments (distinct seeds), its affinity, its GPU, the
        agent wrapped in DistributedDataParallel, the same initial parameters everywhere."""
        try:
            return self._startup_rank()
        except BaseException:
            self._mark_failed()
            raise

    def _startup_rank(self) -> int:
        env = self._dist_env
        self.rank, self.world_size = env.rank, env.world_size
        self.affinity = rank_affinity(self._affinities, env)
        cuda_idx = self.affinity.get("cuda_idx")
        self.backend_used = distributed.choose_backend(self.backend, cuda_idx is not None)
        if cuda_idx is not None:
            torch.cuda.set_device(cuda_idx)  # NCCL's object collectives use the current GPU
        # A rank in the caller's own process (a world of one, not spawned, no launcher)
        # leaves the caller's environment as it was.
        in_caller = env.launcher == "spawn" and not self._spawned
        distributed.init_process_group(env, self.backend_used, self.dist_timeout,
                                       keep_environ=not in_caller)
        if self.seed is None:  # one seed for all: the ranks must build the same model
            from rlfast.utils.seed import make_seed
            self.seed = distributed.broadcast_object(make_seed())
        n_itr = super().startup()
        if self.world_size == 1:  # a world of one trains through DDP too (its overhead shows)
            self.agent.data_parallel()
        self._broadcast_agent_state()
        if self.rank > 0:  # actions and exploration differ by rank; the model started equal
            from rlfast.utils.seed import set_seed
            set_seed((self.seed + RANK_SEED_STRIDE * self.rank) % _SEED_MODULUS)
        if self.rank == 0:
            logger.log(f"{type(self).__name__}: rank 0 of {self.world_size} "
                       f"({env.launcher}, backend {self.backend_used})", console=True)
        return n_itr

    def _run_loop(self, n_itr: int) -> None:
        try:
            super()._run_loop(n_itr)
        except BaseException:
            self._mark_failed()
            raise

    def _mark_failed(self) -> None:
        if self._failed_at is None:  # when this rank's failure began (before its shutdown)
            self._failed_at = time.time()

    def sampler_seed(self) -> int:
        """``seed + 1 + rank * RANK_SEED_STRIDE``: every rank's environments and workers
        draw differently (rank 0's as a single process would)."""
        return (self.seed + 1 + RANK_SEED_STRIDE * self.rank) % _SEED_MODULUS

    def _broadcast_agent_state(self) -> None:
        """Every rank takes rank 0's full agent state (targets included; DDP broadcasts only
        the wrapped models' parameters)."""
        if not distributed.is_distributed():
            return
        with torch.no_grad():
            for tensor in _tensors(self.agent.state_dict()):
                distributed.broadcast_(tensor, src=0)
        self.agent.sync_shared_memory()

    def shutdown(self) -> None:
        """Stop the sampler, unwrap the agent's DDP models, then leave the process group."""
        try:
            super().shutdown()
        finally:
            try:
                self.agent.undo_data_parallel()
                gc.collect()  # the DDP reducers go now, while the process group exists
            finally:
                distributed.destroy_process_group()
                if self.rank != 0:
                    logger.set_muted(False)

    # ---- diagnostics: gathered on rank 0 ------------------------------------------------
    def store_diagnostics(self, itr: int, traj_infos: TrajInfos, opt_info: Any) -> None:
        """Keep this rank's completed trajectories until the next log row (where they are
        gathered), and accumulate the optimizer infos."""
        self._local_trajs.extend(traj_infos)
        super().store_diagnostics(itr, [], opt_info)

    def _gather_trajs(self) -> None:
        gathered = distributed.gather_objects(self._local_trajs)
        self._local_trajs = []
        if gathered is not None:
            self.add_traj_infos([t for rank_trajs in gathered for t in rank_trajs])

    def log_and_snapshot(self, itr: int) -> None:
        """Gather every rank's trajectories to rank 0, which logs (and evaluates, and saves
        the snapshot); then every rank takes rank 0's decision to stop early."""
        self._gather_trajs()
        if self.rank == 0:
            super().log_and_snapshot(itr)
        self.stop_requested = bool(distributed.broadcast_object(self.stop_requested))

    def before_loop(self) -> None:
        """Rank 0 alone evaluates before training (SyncRlEval)."""
        if self.rank == 0:
            super().before_loop()

    def save_itr_snapshot(self, itr: int) -> None:
        """Rank 0 alone saves snapshots (every rank holds the same parameters)."""
        if self.rank == 0:
            super().save_itr_snapshot(itr)


def _status(pid: int) -> str:
    try:
        return str(psutil.Process(pid).status())
    except psutil.Error:
        return "gone"


def _tensors(state: Any):
    """Every tensor of a (nested) state dict, in a fixed order."""
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for key in sorted(state, key=str):
            yield from _tensors(state[key])
    elif isinstance(state, (list, tuple)):
        for item in state:
            yield from _tensors(item)


class SyncRl(SyncRlMixin, MinibatchRl):
    """:class:`MinibatchRl` on several ranks: the logged window holds every rank's recent
    training trajectories, and ``CumSteps`` counts every rank's steps."""


class SyncRlEval(SyncRlMixin, MinibatchRlEval):
    """:class:`MinibatchRlEval` on several ranks: rank 0 alone evaluates (its own evaluation
    environments) and logs; ``stop_return`` stops every rank at once."""
