"""Parallel sampler base: worker processes over shared memory, synchronized with barriers.

The master never polls: it blocks on ``multiprocessing.Barrier``s; a watcher thread blocks on
the workers' process sentinels, and if a worker dies the watcher aborts the barriers so the
master raises :class:`SamplerWorkerError` (carrying the worker's traceback) immediately.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import queue
import sys
import threading
from multiprocessing.connection import wait as wait_connections

from rlfast.samplers.base import BaseSampler
from rlfast.samplers.buffer import build_samples_buffer
from rlfast.samplers.parallel.worker import sampling_process
from rlfast.utils.collections import AttrDict
from rlfast.utils.synchronize import drain_queue


class SamplerWorkerError(RuntimeError):
    """A sampler worker process failed; the message carries its traceback."""


def _mp_context():
    methods = mp.get_all_start_methods()
    return mp.get_context("fork" if "fork" in methods else methods[0])


def split_envs(n_envs: int, n_workers: int) -> list[int]:
    """Spread ``n_envs`` over ``n_workers`` as evenly as possible (earlier workers get extra)."""
    base, extra = divmod(n_envs, n_workers)
    return [base + (1 if i < extra else 0) for i in range(n_workers)]


def default_workers_cpus(n_envs: int) -> list:
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cpus = list(range(os.cpu_count() or 1))
    return [[cpu] for cpu in cpus[: max(1, min(len(cpus), n_envs))]]


class ParallelSamplerBase(BaseSampler):
    """Forks one worker process per entry of ``affinity["workers_cpus"]``; each steps its share
    of the ``batch_B`` environments and writes straight into the shared samples buffer."""

    gpu = False

    def initialize(self, agent, affinity=None, seed=None, bootstrap_value=False,
                   traj_info_kwargs=None, world_size=1, rank=0, worker_process=None):
        affinity = dict(affinity or {})
        B = self.batch_spec.B
        workers_cpus = affinity.get("workers_cpus") or default_workers_cpus(B)
        workers_cpus = [c if isinstance(c, (list, tuple)) else [c] for c in workers_cpus]
        n_workers = len(workers_cpus)
        if n_workers > B:
            raise ValueError(f"batch_B={B} environments cannot be split over {n_workers} workers "
                             "(affinity['workers_cpus']); use batch_B >= number of workers")
        global_B = B * world_size
        self.n_envs_list = split_envs(B, n_workers)
        self.world_size, self.rank = world_size, rank
        env_ranks = list(range(rank * B, (rank + 1) * B))
        example_env = self.EnvCls(**self.env_kwargs)
        if seed is not None and hasattr(example_env, "seed"):
            example_env.seed(int(seed) + 10_000_019)
        try:
            self._agent_init(agent, example_env, global_B, env_ranks)
            self.samples_pyt, self.samples_np, examples = build_samples_buffer(
                agent, example_env, self.batch_spec, bootstrap_value,
                agent_shared=True, env_shared=True)
        finally:
            example_env.close()
        self.apply_traj_info_kwargs(traj_info_kwargs)
        self.agent = agent
        self._build_parallel_ctrl(n_workers)
        eval_split = split_envs(self.eval_n_envs, n_workers) if self.eval_n_envs else [0] * n_workers
        eval_traj_split = (split_envs(self.eval_max_trajectories, n_workers)
                           if self.eval_max_trajectories else [None] * n_workers)
        self.eval_n_envs_list = eval_split
        common = self._common_kwargs(global_B, eval_split)
        workers_kwargs = []
        start = 0
        for i, n in enumerate(self.n_envs_list):
            w_env_ranks = env_ranks[start:start + n]
            workers_kwargs.append(dict(
                rank=i, env_ranks=w_env_ranks, n_envs=n, cpus=workers_cpus[i],
                torch_threads=affinity.get("worker_torch_threads", 1),
                seed=(0 if seed is None else int(seed)) + 7919 * (i + 1),
                env_seed=None if seed is None else int(seed),
                eval_env_seed=None if seed is None else int(seed) + 1_000_003 + sum(eval_split[:i]),
                eval_n_envs=eval_split[i],
                eval_max_trajectories=(None if eval_traj_split[i] is None
                                       else max(1, eval_traj_split[i])),
                samples_np=self.samples_np[:, start:start + n],
                **self._worker_extra_kwargs(i, start, n)))
            start += n
        self._start_workers(common, workers_kwargs)
        return examples

    # ---- hooks for the GPU samplers -------------------------------------------------------
    def _agent_init(self, agent, env, global_B, env_ranks) -> None:
        agent.initialize(env.spaces, share_memory=True, global_B=global_B, env_ranks=env_ranks)

    def _worker_extra_kwargs(self, i: int, start: int, n: int) -> dict:
        return {}

    def _common_kwargs(self, global_B: int, eval_split: list) -> dict:
        n_eval = max(eval_split) if eval_split else 0
        return dict(
            ctrl=self.ctrl, make_envs=self.make_envs, EnvCls=self.EnvCls,
            env_kwargs=self.env_kwargs, eval_env_kwargs=self.eval_env_kwargs,
            batch_T=self.batch_spec.T, CollectorCls=self.CollectorCls,
            eval_CollectorCls=self.eval_CollectorCls, TrajInfoCls=self.TrajInfoCls,
            agent=self.agent, global_B=global_B,
            max_decorrelation_steps=self.max_decorrelation_steps,
            eval_max_T=self.eval_max_T(sum(eval_split)) if n_eval else 0,
            traj_infos_queue=self.traj_infos_queue,
            eval_traj_infos_queue=self.eval_traj_infos_queue, error_queue=self.error_queue)

    # ---- process management -------------------------------------------------------------------
    def _build_parallel_ctrl(self, n_workers: int) -> None:
        ctx = _mp_context()
        self._ctx = ctx
        self.n_workers = n_workers
        self.ctrl = AttrDict(
            quit=ctx.RawValue("b", False), do_eval=ctx.RawValue("b", False),
            itr=ctx.RawValue("l", 0),
            barrier_in=ctx.Barrier(n_workers + 1), barrier_out=ctx.Barrier(n_workers + 1))
        self.traj_infos_queue = ctx.Queue()
        self.eval_traj_infos_queue = ctx.Queue()
        self.error_queue = ctx.Queue()

    def _start_workers(self, common: dict, workers_kwargs: list) -> None:
        self.workers = []
        self._closing = False
        self._failed = False
        for w in workers_kwargs:
            p = self._ctx.Process(target=sampling_process, name=f"rlfast-sampler-{w['rank']}",
                                  kwargs=dict(common_kwargs=common, worker_kwargs=w), daemon=True)
            p.start()
            self.workers.append(p)
        self._wake_r, self._wake_w = self._ctx.Pipe(duplex=False)
        self._watcher = threading.Thread(target=self._watch_workers, name="rlfast-sampler-watch",
                                         daemon=True)
        self._watcher.start()
        self._barrier_wait(self.ctrl.barrier_out)  # workers finished initializing

    def _watch_workers(self) -> None:
        """Block on worker sentinels; an exit outside shutdown aborts the barriers."""
        pending = {p.sentinel: p for p in self.workers}
        while pending:
            ready = wait_connections(list(pending) + [self._wake_r])
            if self._wake_r in ready:
                return
            for sentinel in ready:
                pending.pop(sentinel, None)
            if not self._closing:
                self._failed = True
                self.ctrl.barrier_in.abort()
                self.ctrl.barrier_out.abort()
                return

    def _barrier_wait(self, barrier) -> None:
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            self._raise_worker_error()

    def _raise_worker_error(self) -> None:
        try:
            rank, pid, tb = self.error_queue.get(timeout=10)
            message = f"Sampler worker {rank} (pid {pid}) raised:\n{tb}"
        except queue.Empty:
            codes = {p.name: p.exitcode for p in self.workers}
            message = f"A sampler worker died without a Python traceback; exit codes: {codes}"
        self.shutdown()
        raise SamplerWorkerError(message)

    def _run_workers(self, itr: int, do_eval: bool) -> None:
        self.ctrl.itr.value = itr
        self.ctrl.do_eval.value = do_eval
        self._barrier_wait(self.ctrl.barrier_in)
        self._barrier_wait(self.ctrl.barrier_out)

    # ---- public ----------------------------------------------------------------------------
    def obtain_samples(self, itr: int):
        self._run_workers(itr, do_eval=False)
        traj_infos = drain_queue(self.traj_infos_queue, n_sentinel=self.n_workers)
        return self.samples_pyt, traj_infos

    def evaluate_agent(self, itr: int) -> list:
        if self.eval_n_envs == 0:
            raise ValueError("evaluate_agent() needs eval_n_envs > 0 in the sampler")
        self._run_workers(itr, do_eval=True)
        return drain_queue(self.eval_traj_infos_queue, n_sentinel=self.n_workers)

    def shutdown(self) -> None:
        """Stop and join every worker (terminating any that do not exit), on every path."""
        workers = getattr(self, "workers", None)
        if not workers or self._closing:
            return
        self._closing = True
        self.ctrl.quit.value = True
        try:
            self.ctrl.barrier_in.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass
        for p in workers:
            p.join(timeout=5)
        for p in workers:
            if p.is_alive():
                p.terminate()
                p.join(timeout=2)
            if p.is_alive():
                p.kill()
                p.join()
        try:
            self._wake_w.send(None)
        except (OSError, ValueError):
            pass
        self._watcher.join(timeout=5)
        for q in (self.traj_infos_queue, self.eval_traj_infos_queue, self.error_queue):
            q.cancel_join_thread()
            q.close()
        for p in workers:
            p.close()
        self.workers = []

    def __del__(self):
        if getattr(self, "workers", None) and not sys.is_finalizing():
            self.shutdown()
