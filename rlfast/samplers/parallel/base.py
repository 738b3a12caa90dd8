"""Parallel sampler base: worker processes over shared memory, one command pipe each.

The master never polls: it sends each worker a command and blocks in
``multiprocessing.connection.wait`` on the workers' pipes *and* process sentinels, so a worker
that raises (its traceback arrives on the pipe) or dies outright (its sentinel fires) makes
the master raise :class:`SamplerWorkerError` at once. Samples travel through the shared
buffer; only the small list of completed trajectory infos travels through the pipe.
"""
from __future__ import annotations

import multiprocessing as mp
import os
import weakref
from multiprocessing.connection import wait as wait_connections

from rlfast.samplers.base import BaseSampler
from rlfast.samplers.buffer import build_samples_buffer
from rlfast.samplers.parallel.worker import sampling_process


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


def _stop_workers(workers: list, conns: list, stop_flags: list) -> None:
    """Ask workers to quit, then join; terminate / kill stragglers. Safe to call twice.

    ``stop_flags`` (shared values) also stop workers blocked waiting for an action server.
    """
    for flag in stop_flags:
        flag.value = True
    for conn in conns:
        try:
            conn.send(("quit",))
        except (OSError, ValueError):
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
    for conn in conns:
        conn.close()
    workers.clear()
    conns.clear()


class ParallelSamplerBase(BaseSampler):
    """Forks one worker process per entry of ``affinity["workers_cpus"]``; each steps its share
    of the ``batch_B`` environments and writes straight into the shared samples buffer."""

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
        self.n_workers = n_workers
        eval_split = split_envs(self.eval_n_envs, n_workers) if self.eval_n_envs else [0] * n_workers
        self.eval_n_envs_list = eval_split
        self._build_step_buffers(examples)
        # Only workers that have eval envs share the trajectory budget.
        evaluating = [i for i in range(n_workers) if eval_split[i] > 0]
        eval_traj_split = [None] * n_workers
        if self.eval_max_trajectories and evaluating:
            for i, n in zip(evaluating, split_envs(self.eval_max_trajectories, len(evaluating))):
                eval_traj_split[i] = n
        workers_kwargs = []
        start = 0
        for i, n in enumerate(self.n_envs_list):
            workers_kwargs.append(dict(
                rank=i, env_ranks=env_ranks[start:start + n], n_envs=n, cpus=workers_cpus[i],
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
        self._start_workers(self._common_kwargs(global_B, eval_split), workers_kwargs)
        return examples

    # ---- hooks for the GPU samplers -------------------------------------------------------
    def _agent_init(self, agent, env, global_B, env_ranks) -> None:
        agent.initialize(env.spaces, share_memory=True, global_B=global_B, env_ranks=env_ranks)

    def _build_step_buffers(self, examples) -> None:
        pass  # the GPU samplers allocate the shared step buffer here

    def _worker_extra_kwargs(self, i: int, start: int, n: int) -> dict:
        return {}

    def _stop_flags(self) -> list:
        return []  # GPU samplers: flags that release workers waiting on the action server

    def _common_kwargs(self, global_B: int, eval_split: list) -> dict:
        return dict(
            EnvCls=self.EnvCls, env_kwargs=self.env_kwargs, eval_env_kwargs=self.eval_env_kwargs,
            batch_T=self.batch_spec.T, CollectorCls=self.CollectorCls,
            eval_CollectorCls=self.eval_CollectorCls, TrajInfoCls=self.TrajInfoCls,
            agent=self.agent, global_B=global_B,
            max_decorrelation_steps=self.max_decorrelation_steps,
            eval_max_T=self.eval_max_T(sum(eval_split)) if any(eval_split) else 0)

    # ---- process management -------------------------------------------------------------------
    def _start_workers(self, common: dict, workers_kwargs: list) -> None:
        ctx = _mp_context()
        pipes = [ctx.Pipe(duplex=True) for _ in workers_kwargs]
        self._conns = [parent for parent, _ in pipes]
        self.workers = []
        # Nothing the Process objects hold refers back to this sampler, so the finalizer below
        # runs when the sampler is dropped without shutdown().
        self._finalizer = weakref.finalize(self, _stop_workers, self.workers, self._conns,
                                           self._stop_flags())
        common = dict(common, parent_conns=self._conns)
        try:
            for w, (_, child) in zip(workers_kwargs, pipes):
                p = ctx.Process(target=sampling_process, name=f"rlfast-sampler-{w['rank']}",
                                kwargs=dict(common_kwargs=common, worker_kwargs=dict(w, conn=child)),
                                daemon=True)
                p.start()
                self.workers.append(p)
        finally:
            for _, child in pipes:
                child.close()
        self._collect_replies("ready")  # workers finished initializing

    def _collect_replies(self, expected: str) -> list:
        """Block until every worker replied; raise SamplerWorkerError if any failed or died."""
        replies: dict[int, object] = {}
        pending = {conn: i for i, conn in enumerate(self._conns)}
        sentinels = {p.sentinel: i for i, p in enumerate(self.workers)}
        while pending:
            ready = wait_connections(list(pending) + [s for s, i in sentinels.items()
                                                      if i in pending.values()])
            for obj in ready:
                if obj in pending:  # read pipes first: a failing worker writes, then exits
                    i = pending.pop(obj)
                    try:
                        kind, payload = obj.recv()
                    except (EOFError, OSError):
                        self._fail(f"Sampler worker {i} died (exit code {self._exitcode(i)}) "
                                   "without a Python traceback")
                    if kind == "error":
                        self._fail(f"Sampler worker {i} (pid {self.workers[i].pid}) raised:\n{payload}")
                    if kind != expected:
                        self._fail(f"Sampler worker {i} replied {kind!r}, expected {expected!r}")
                    replies[i] = payload
            for obj in ready:
                i = sentinels.get(obj)
                if i is not None and i in pending.values() and not self._has_data(i):
                    self._fail(f"Sampler worker {i} died (exit code {self._exitcode(i)}) "
                               "without a Python traceback")
        return [replies[i] for i in range(len(self._conns))]

    def _has_data(self, i: int) -> bool:
        try:
            return self._conns[i].poll(0)
        except (OSError, EOFError):
            return False

    def _exitcode(self, i: int):
        p = self.workers[i]
        p.join(timeout=1)
        return p.exitcode

    def _fail(self, message: str):
        self.shutdown()
        raise SamplerWorkerError(message)

    def _send_all(self, command: str, itr: int) -> None:
        # The agent's algorithm-given sampling settings travel with each command (see
        # BaseAgent.sampling_state): the workers' agent copies were forked before they were set.
        state = self.agent.sampling_state() if hasattr(self.agent, "sampling_state") else {}
        for conn in self._conns:
            try:
                conn.send((command, itr, state))
            except (OSError, ValueError):
                pass  # a dead worker: reported by _collect_replies

    def _gather_traj_infos(self) -> list:
        return [info for infos in self._collect_replies("done") for info in infos]

    def _command(self, command: str, itr: int) -> list:
        self._send_all(command, itr)
        return self._gather_traj_infos()

    def _check_workers_alive(self) -> None:
        """Raise SamplerWorkerError (with the traceback, if one was sent) for a dead worker."""
        for i, p in enumerate(self.workers):
            if not p.is_alive():
                message = (f"Sampler worker {i} died (exit code {p.exitcode}) without a "
                           "Python traceback")
                if self._has_data(i):
                    try:
                        kind, payload = self._conns[i].recv()
                        if kind == "error":
                            message = f"Sampler worker {i} (pid {p.pid}) raised:\n{payload}"
                    except (EOFError, OSError):
                        pass
                self._fail(message)

    # ---- public ----------------------------------------------------------------------------
    def obtain_samples(self, itr: int):
        return self.samples_pyt, self._command("sample", itr)

    def evaluate_agent(self, itr: int) -> list:
        if self.eval_n_envs == 0:
            raise ValueError("evaluate_agent() needs eval_n_envs > 0 in the sampler")
        return self._command("eval", itr)

    def shutdown(self) -> None:
        """Stop and join every worker (terminating any that do not exit), on every path."""
        finalizer = getattr(self, "_finalizer", None)
        if finalizer is not None:
            finalizer()
