"""The ranks of a synchronous run: one (:class:`SingleProcess`) or a process group
(:class:`RankGroup`), a component of the minibatch runner.

A multi-rank run gives every rank its own sampler, its own copy of the agent wrapped in
DistributedDataParallel and the same algorithm; gradients are all-reduced every update, so
every rank holds the same parameters. The ranks come from a launcher (``torchrun``, Slurm
``srun``; see :func:`rlfast.utils.distributed.launch_env`) or are spawned by the run (see
``rlfast.runners.rank_spawning``); either way every rank runs the same code through
``env://``. Rank 0 alone evaluates, logs and saves snapshots: the others' completed
trajectories are gathered to it at each log row, and its decision to stop early reaches
every rank.

torchrun's elastic agent (``--max-restarts N``) restarts every rank when one dies, with
``TORCHELASTIC_RESTART_COUNT`` counting the restarts and ``TORCHELASTIC_RUN_ID`` naming the
rendezvous (:func:`elastic_restart` reads both); ``rlfast train`` then resumes the run from
its newest snapshot (see ``rlfast.experiments.resume``). Every rank must resume the same
snapshot, which :meth:`RankGroup.after_startup` checks.
"""
from __future__ import annotations

import contextlib
import gc
import os
import time
from collections.abc import Iterator, Mapping
from typing import Any

import torch

from rlfast.agents.param_sharing import sync_shared_model, unwrap_data_parallel, wrap_data_parallel
from rlfast.runners.diagnostics import TrajInfos
from rlfast.runners.master_affinity import set_cuda_device
from rlfast.runners.rank_spawning import spawn_ranks
from rlfast.runners.snapshots import fresh_episode_seed
from rlfast.utils import distributed
from rlfast.utils.checks import check_int
from rlfast.utils.distributed import DistEnv
from rlfast.utils.logging import logger
from rlfast.utils.seed import make_seed, set_seed

__all__ = ["RankGroup", "SingleProcess", "rank_affinity", "RANK_SEED_STRIDE", "elastic_restart",
           "RESTART_COUNT_VAR", "RUN_ID_VAR", "AGENT_STORE_VAR"]

RANK_SEED_STRIDE = 10_007  # rank r samples with seed + r * stride (model init: the same seed)
_SEED_MODULUS = 2 ** 32 - 1
RESTART_COUNT_VAR = "TORCHELASTIC_RESTART_COUNT"  # set by torchrun's agent on every rank
RUN_ID_VAR = "TORCHELASTIC_RUN_ID"  # the rendezvous id: --rdzv-id, a fresh uuid with --standalone
AGENT_STORE_VAR = "TORCHELASTIC_USE_AGENT_STORE"  # "True": the agent's store outlives restarts


def elastic_restart(environ: Mapping[str, str] | None = None) -> tuple[int, str | None]:
    """``(restarts, run id)`` of this rank under torchrun's elastic agent: how many times the
    agent restarted the rank group (0 on its first start, and outside torchrun) and the
    rendezvous id of the torchrun invocation (None outside torchrun). A restarted rank group
    resumes its run from the newest snapshot instead of starting over."""
    environ = os.environ if environ is None else environ
    run_id = environ.get(RUN_ID_VAR) or None
    value = environ.get(RESTART_COUNT_VAR, "0")
    try:
        count = int(value)
    except ValueError:
        count = -1
    if count < 0:
        raise ValueError(f"{RESTART_COUNT_VAR}={value!r} is not a restart count (an integer "
                         f">= 0, as torchrun sets it)")
    return count, run_id


class SingleProcess:
    """The one rank of a single-process run: it logs, and there is nothing to join, gather
    or agree on."""

    rank = 0
    world_size = 1

    def spawns(self) -> bool:
        """False: this process trains as the one rank."""
        return False

    def spawn(self, runner: Any) -> dict:
        """Refused: a single-process run has no ranks to fork (see :meth:`spawns`)."""
        raise RuntimeError(f"{type(runner).__name__} runs in a single process: there are no "
                           f"ranks to spawn (SyncRl and SyncRlEval spawn them)")

    @contextlib.contextmanager
    def as_rank(self, runner: Any) -> Iterator[None]:
        """Train as the one rank: it logs, and there is no failure to time."""
        yield

    def join(self, runner: Any) -> None:
        """Nothing to join."""

    def sampler_seed(self, seed: int, resume_count: int) -> int:
        """``seed + 1``, plus ``RESUME_SEED_STRIDE`` per resume (see
        :func:`~rlfast.runners.snapshots.fresh_episode_seed`)."""
        return fresh_episode_seed(seed, resume_count)

    def before_algo(self, agent: Any) -> None:
        """Nothing to wrap."""

    def after_startup(self, runner: Any) -> None:
        """Nothing to synchronize."""

    def keep_trajs(self, traj_infos: TrajInfos) -> TrajInfos:
        """This rank's trajectories are the run's: counted at once."""
        return traj_infos

    def gather_trajs(self) -> list:
        """Nothing kept back."""
        return []

    def agree(self, stop: bool) -> bool:
        """This rank's decision is the run's."""
        return stop

    def leave(self, agent: Any) -> None:
        """Nothing to leave."""


class RankGroup:
    """The ranks of a multi-process synchronous run (see the module docstring).

    ``affinities``: one dict shared by the ranks of a node, or one per rank (see
    :func:`rank_affinity`). ``world_size``: ranks to spawn on this machine when no launcher
    set the variables (default: the affinity list's length, else 1); ignored under a
    launcher, whose ``WORLD_SIZE`` rules. ``backend``: ``"nccl"`` or ``"gloo"`` (default:
    NCCL when the agent is on CUDA, gloo on CPU). ``dist_timeout``: seconds any collective
    (and the rendezvous) may wait before the rank raises, so that a hung rank ends the run;
    it must exceed rank 0's evaluation time, during which the other ranks wait.
    """

    def __init__(self, affinities: dict | list | None, world_size: int | None,
                 backend: str | None, dist_timeout: float, owner: str):
        if world_size is not None:
            world_size = check_int(world_size, "world_size", minimum=1, owner=owner)
        elif isinstance(affinities, (list, tuple)):
            world_size = len(affinities)
        self.requested_world_size = world_size or 1
        entries = affinities if isinstance(affinities, (list, tuple)) else [affinities or {}]
        on_cuda = all(e.get("cuda_idx") is not None for e in entries)
        self.backend, self.dist_timeout = distributed.check_dist_settings(
            backend, dist_timeout, owner, on_cuda)  # nccl without CUDA: refused before any file
        self.affinities = affinities
        self.env: DistEnv | None = None  # this rank's, once training
        self.spawned = False  # a rank forked by rank_spawning (not the caller's process)
        self.rank, self.world_size = 0, 1
        self.backend_used: str | None = None
        self.failed_at: float | None = None  # when this rank's failure began
        self._local_trajs: list = []

    def spawns(self) -> bool:
        """Whether this process forks the ranks and supervises them instead of training as
        one: ``world_size`` > 1 and no launcher set the variables (a rank it forked trains).
        Reads the launcher's variables (or picks a free port) once per runner."""
        env = self._env()
        return env.launcher == "spawn" and env.world_size > 1 and not self.spawned

    def spawn(self, runner: Any) -> dict:
        """Fork every rank (each trains a copy of ``runner`` as its rank), supervise them and
        return rank 0's ``final_result()`` (see ``rlfast.runners.rank_spawning``)."""
        return spawn_ranks(runner, self._env(), self.dist_timeout)

    @contextlib.contextmanager
    def as_rank(self, runner: Any) -> Iterator[None]:
        """Train as this rank inside the block: the ranks but rank 0 log nothing and draw no
        progress bar (the logger speaks again when the rank leaves the group, at shutdown).
        A failure's time is recorded before the runner's shutdown (which the interrupt guard
        around this block runs): the spawning process reports the rank that failed first."""
        if self._env().rank != 0:
            logger.set_muted(True)
            runner.progress_bar = False
        try:
            yield
        except BaseException:
            if self.failed_at is None:
                self.failed_at = time.time()
            raise

    def _env(self) -> DistEnv:
        """This rank's place in the run, resolved on first use and kept: the launcher's
        variables, or (none set) rank 0 of the ranks this process spawns."""
        if self.env is None:
            env = distributed.launch_env()
            if env is None:
                n = self.requested_world_size
                env = DistEnv(rank=0, local_rank=0, world_size=n, local_world_size=n,
                              master_addr="127.0.0.1",
                              master_port=distributed.free_port() if n > 1 else 0,
                              launcher="spawn")
            self.env = env
        return self.env

    def join(self, runner: Any) -> None:
        """Before the runner starts: take this rank's affinity (``runner.affinity``) and
        GPU, join the process group, and take rank 0's seed when none was given (the ranks
        must build the same model)."""
        env = self._env()
        self.rank, self.world_size = env.rank, env.world_size
        runner.affinity = rank_affinity(self.affinities, env)
        cuda_idx = runner.affinity.get("cuda_idx")
        self.backend_used = distributed.choose_backend(self.backend, cuda_idx is not None)
        set_cuda_device(cuda_idx)  # NCCL's object collectives use the current GPU
        # A rank in the caller's own process (a world of one, not spawned, no launcher)
        # leaves the caller's environment as it was.
        in_caller = env.launcher == "spawn" and not self.spawned
        distributed.init_process_group(env, self.backend_used, self.dist_timeout,
                                       keep_environ=not in_caller,
                                       key_prefix=_restart_key_prefix(env))
        if runner.seed is None:
            runner.seed = distributed.broadcast_object(make_seed())

    def sampler_seed(self, seed: int, resume_count: int) -> int:
        """``seed + 1 + rank * RANK_SEED_STRIDE``: every rank's environments and workers
        draw differently (rank 0's as a single process would)."""
        return (seed + 1 + RANK_SEED_STRIDE * self.rank) % _SEED_MODULUS

    def before_algo(self, agent: Any) -> None:
        """Wrap the trained models in DistributedDataParallel (several ranks), before the
        algorithm builds its optimizer."""
        if self.world_size > 1:
            wrap_data_parallel(agent)

    def after_startup(self, runner: Any) -> None:
        """Once the runner started: the ranks check that they start alike (all fresh, or
        all from the snapshot of one iteration), a world of one trains through DDP too
        (its overhead shows), every rank takes rank 0's agent state, and the ranks but rank
        0 reseed (actions and exploration differ by rank; the model started equal)."""
        resume = runner.snapshots.resume  # (snapshot, its directory) or None
        self._check_same_start(-1 if resume is None else int(resume[0]["itr"]))
        if self.world_size == 1:
            wrap_data_parallel(runner.agent)
        self._broadcast_agent_state(runner.agent)
        if self.rank > 0:
            set_seed((runner.seed + RANK_SEED_STRIDE * self.rank) % _SEED_MODULUS)
        if self.rank == 0:
            restarts, _ = elastic_restart() if self.env.launcher == "torchrun" else (0, None)
            launcher = f"{self.env.launcher} restart {restarts}" if restarts else self.env.launcher
            logger.log(f"{type(runner).__name__}: rank 0 of {self.world_size} "
                       f"({launcher}, backend {self.backend_used})", console=True)

    def _check_same_start(self, snapshot_itr: int) -> None:
        """Raise on every rank when the ranks resumed different snapshots (``snapshot_itr``:
        this rank's snapshot iteration, -1 for a fresh start), for example one resumed a
        snapshot another did not see; their loops would otherwise disagree on every
        collective."""
        if not distributed.is_distributed() or self.world_size == 1:
            return
        itrs = distributed.broadcast_object(distributed.gather_objects(snapshot_itr))
        if len(set(itrs)) > 1:
            listed = ", ".join(f"rank {r}: {'a fresh start' if i < 0 else f'iteration {i}'}"
                               for r, i in enumerate(itrs))
            raise RuntimeError(f"the ranks resumed different snapshots ({listed}): each "
                               f"rank resumes the snapshot it finds in the log directory, so "
                               f"every rank must read the same directory (a shared "
                               f"filesystem)")

    def _broadcast_agent_state(self, agent: Any) -> None:
        """Every rank takes rank 0's full agent state (targets included; DDP broadcasts only
        the wrapped models' parameters)."""
        if not distributed.is_distributed():
            return
        with torch.no_grad():
            for tensor in _tensors(agent.state_dict()):
                distributed.broadcast_(tensor, src=0)
        sync_shared_model(agent)

    def keep_trajs(self, traj_infos: TrajInfos) -> TrajInfos:
        """Keep this rank's completed trajectories until the next row (where they are
        gathered); none is counted now."""
        self._local_trajs.extend(traj_infos)
        return []

    def gather_trajs(self) -> list:
        """Every rank's kept trajectories, on rank 0 (the others get none)."""
        gathered = distributed.gather_objects(self._local_trajs)
        self._local_trajs = []
        return [] if gathered is None else [t for rank_trajs in gathered for t in rank_trajs]

    def agree(self, stop: bool) -> bool:
        """Rank 0's decision to stop, on every rank."""
        return bool(distributed.broadcast_object(stop))

    def leave(self, agent: Any) -> None:
        """Unwrap the agent's DDP models, then leave the process group."""
        try:
            unwrap_data_parallel(agent)
            gc.collect()  # the DDP reducers go now, while the process group exists
        finally:
            distributed.destroy_process_group()
            if self.rank != 0:
                logger.set_muted(False)


def _restart_key_prefix(env: DistEnv) -> str | None:
    """The store prefix of a rank group that torchrun restarted while its agent hosts the
    store (``TORCHELASTIC_USE_AGENT_STORE``): that store keeps the keys of the attempt
    that failed, which the new group must not read; None otherwise (the group joins as
    before)."""
    if env.launcher != "torchrun" or os.environ.get(AGENT_STORE_VAR) != "True":
        return None
    restarts, _ = elastic_restart()
    return f"rlfast/restart_{restarts}" if restarts else None


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


def _tensors(state: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a (nested) state dict, in a fixed order."""
    if isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for key in sorted(state, key=str):
            yield from _tensors(state[key])
    elif isinstance(state, (list, tuple)):
        for item in state:
            yield from _tensors(item)
