"""Parallel sampler base: worker processes over shared memory, one command pipe each.

The workers are started, watched and stopped by the process supervisor
(``rlfast.utils.processes``): the master sends each worker a command and blocks on the
workers' pipes *and* process sentinels together, so a worker that raises (its traceback
arrives on the pipe) or dies outright makes the master raise :class:`SamplerWorkerError` at
once. Samples travel through the shared buffer; only the small list of completed trajectory
infos travels through the pipe. A sampler whose agent runs in the master (the GPU samplers)
*has* an action server, which owns the step buffers and serves actions while the workers
step their environments.

A worker that is alive but silent (stopped, deadlocked, stuck in an environment) becomes a
:class:`SamplerWorkerError` too, once the sampler's ``worker_timeout`` passes (see
``rlfast.samplers.parallel.timeout``): every worker publishes what it is doing into a shared
status table (``rlfast.samplers.parallel.status``), and the error says what the silent one
was doing, e.g. "stepping environment 3 (env rank 11) at step 17 of 64 of the batch of
iteration 5".

With ``max_worker_restarts=N`` (``--set sampler.max_worker_restarts=N``) the first N such
faults of a run replace the worker instead: a new process rebuilds that worker's
environments, seeded afresh from the run's seed, and collects the failed batch's columns
again from their reset, so every column of the batch comes whole from a living worker and
no step of the dead one is trained on (its unfinished episodes are dropped). Evaluation is
redone the same way. Each restart is one console line naming the worker and the cause, and
the runners log the count (``WorkerRestarts``). The fault after the N-th ends the run with
the error it would have raised without restarts. Samplers whose workers take their actions
from the master's action server (gpu, alternating) restart all their workers instead: the
action server steps every worker in lockstep, so the whole batch is collected again.
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from rlfast.agents.base import BaseAgent
from rlfast.samplers.collections import Samples
from rlfast.utils.collections import AttrDict
from rlfast.samplers.base import (EVAL_ENV_SEED_OFFSET, WORKER_SEED_STRIDE, BaseSampler)
from rlfast.samplers.parallel.status import StatusTable
from rlfast.samplers.parallel.timeout import WorkerTimeout
from rlfast.samplers.parallel.worker import sampling_process
from rlfast.utils.logging import logger
from rlfast.utils.misc import available_cpus
from rlfast.utils.processes import Deadline, ProcessSupervisor, mp_context

# A restarted worker's seeds: its first ones plus this times the restart's number in the run
# (training environment seeds stay below the evaluation ones, EVAL_ENV_SEED_OFFSET).
RESTART_SEED_STRIDE = 65_537


class SamplerWorkerError(RuntimeError):
    """A sampler worker process failed (the message carries its traceback) or stayed silent
    past the sampler's ``worker_timeout`` (the message says what it was doing)."""


def split_envs(n_envs: int, n_workers: int) -> list[int]:
    """Spread ``n_envs`` over ``n_workers`` as evenly as possible (earlier workers get extra)."""
    base, extra = divmod(n_envs, n_workers)
    return [base + (1 if i < extra else 0) for i in range(n_workers)]


def default_workers_cpus(n_envs: int) -> list[list[int]]:
    """One worker per available CPU, at most one per environment."""
    cpus = available_cpus()
    return [[cpu] for cpu in cpus[: max(1, min(len(cpus), n_envs))]]


class ParallelSamplerBase(BaseSampler):
    """Starts one worker process per entry of ``affinity["workers_cpus"]``; each steps its
    share of the ``batch_B`` environments and writes straight into the shared samples buffer.

    ``ActionServerCls`` (None here and in the CPU sampler, whose workers run their own agent
    copy) names the action server class of the GPU samplers. Every wait on the workers gives
    up after ``worker_timeout`` (see :class:`~rlfast.samplers.parallel.timeout.WorkerTimeout`).
    """

    ActionServerCls: type | None = None

    def initialize(self, agent: BaseAgent, affinity: dict | None = None,
                   seed: int | None = None, bootstrap_value: bool = False,
                   traj_info_kwargs: dict | None = None, rank: int = 0,
                   world_size: int = 1) -> AttrDict:
        """Build the agent's model (in shared memory when the workers run it), the shared
        samples buffer and, for the GPU samplers, the action server; then start the workers
        (pinned to ``affinity["workers_cpus"]``) and wait until each has built its
        environments. Returns the example outputs that size replay buffers."""
        affinity = dict(affinity or {})
        B = self.batch_spec.B  # columns: environments times agents per environment
        n_envs, width = self.n_envs, self.n_agents
        workers_cpus = affinity.get("workers_cpus") or default_workers_cpus(n_envs)
        workers_cpus = [c if isinstance(c, (list, tuple)) else [c] for c in workers_cpus]
        n_workers = len(workers_cpus)
        if n_workers > n_envs:
            raise ValueError(f"batch_B={n_envs} environments cannot be split over {n_workers} "
                             "workers (affinity['workers_cpus']); use batch_B >= number of "
                             "workers")
        global_B = B * world_size
        self.n_envs_list = split_envs(n_envs, n_workers)
        self.world_size, self.rank = world_size, rank
        env_ranks = list(range(rank * B, (rank + 1) * B))
        self.env_offset = rank * B
        agent_in_workers = self.ActionServerCls is None

        def init_agent(spaces):
            self.initialize_agent(agent, spaces, share_memory=agent_in_workers,
                                  global_B=global_B, env_ranks=env_ranks)

        self.samples_pyt, self.samples_np, examples = self.build_buffers(
            agent, seed, bootstrap_value, shared=True, init_agent=init_agent)
        self.apply_traj_info_kwargs(traj_info_kwargs)
        self.agent = agent
        self.n_workers = n_workers
        eval_split = (split_envs(self.eval_n_envs, n_workers) if self.eval_n_envs
                      else [0] * n_workers)
        self.eval_n_envs_list = eval_split
        ctx = mp_context()
        self._eval_max_T = self.eval_max_T(sum(eval_split)) if any(eval_split) else 0
        starts = [sum(self.n_envs_list[:i]) for i in range(n_workers)]
        self._status = StatusTable(  # the rank of each environment's first column
            ctx, [env_ranks[s * width:(s + n) * width:width]
                  for s, n in zip(starts, self.n_envs_list)],
            [sum(eval_split[:i]) for i in range(n_workers)], self.batch_spec.T,
            self._eval_max_T)
        self._timeouts = WorkerTimeout(self.batch_spec.T)
        self.action_server = None
        if not agent_in_workers:
            self.action_server = self.ActionServerCls(  # its step buffer rows are columns
                agent, self.batch_spec, [n * width for n in self.n_envs_list],
                [n * width for n in eval_split], self.samples_np, examples, ctx)
        self._supervisor = ProcessSupervisor(
            label="Sampler worker", error_cls=SamplerWorkerError,
            stop_flags=self.action_server.stop_flags if self.action_server else ())
        if self.action_server is not None:
            self.action_server.supervisor = self._supervisor
            self.action_server.describe_worker = self._status.describe
        # Only workers that have eval envs share the trajectory budget.
        evaluating = [i for i in range(n_workers) if eval_split[i] > 0]
        eval_traj_split = [None] * n_workers
        if self.eval_max_trajectories and evaluating:
            for i, n in zip(evaluating, split_envs(self.eval_max_trajectories, len(evaluating))):
                eval_traj_split[i] = n
        common = dict(
            EnvCls=self.EnvCls, env_kwargs=self.env_kwargs, eval_env_kwargs=self.eval_env_kwargs,
            batch_T=self.batch_spec.T, CollectorCls=self.CollectorCls,
            eval_CollectorCls=self.eval_CollectorCls, TrajInfoCls=self.TrajInfoCls,
            agent=agent if agent_in_workers else None, global_B=global_B,
            max_decorrelation_steps=self.max_decorrelation_steps,
            eval_max_T=self._eval_max_T, status_table=self._status)
        workers_kwargs = []
        start = 0
        for i, n in enumerate(self.n_envs_list):
            cols = slice(start * width, (start + n) * width)
            w = dict(
                rank=i, env_ranks=env_ranks[cols], n_envs=n, cpus=workers_cpus[i],
                first_env=rank * n_envs + start,
                torch_threads=affinity.get("worker_torch_threads", 1),
                seed=(0 if seed is None else int(seed)) + WORKER_SEED_STRIDE * (i + 1),
                env_seed=None if seed is None else int(seed),
                eval_env_seed=(None if seed is None
                               else int(seed) + EVAL_ENV_SEED_OFFSET + sum(eval_split[:i])),
                eval_n_envs=eval_split[i],
                eval_max_trajectories=(None if eval_traj_split[i] is None
                                       else max(1, eval_traj_split[i])),
                samples_np=self.samples_np[:, cols],
                slots_np=(None if self.double_buffer_np is None else
                          [slot[:, cols] for slot in self.double_buffer_np]))
            if self.action_server is not None:
                w.update(self.action_server.worker_kwargs(i))
            workers_kwargs.append(dict(common_kwargs=common, worker_kwargs=w))
            start += n
        self._workers_kwargs = workers_kwargs  # what a restarted worker is built from
        # Nothing the supervisor holds refers back to this sampler, so its finalizer stops
        # the workers when the sampler is dropped without shutdown().
        self._supervisor.start(sampling_process, workers_kwargs, name="rlfast-sampler",
                               owner=self)
        # Workers finished initializing (a silent one raises after the startup timeout).
        startup = functools.partial(self._timeouts.startup, self.worker_timeout)
        recover = None  # a worker that dies while starting is replaced too (cpu sampler)
        if self.max_worker_restarts and self.action_server is None:
            recover = functools.partial(self._restart_worker, message=None,
                                        new_deadline=startup)
        self._supervisor.gather("ready", startup(), self._status.describe, recover)
        return examples

    @property
    def workers(self) -> list:
        """The worker processes (empty once the sampler is shut down)."""
        supervisor = getattr(self, "_supervisor", None)
        return supervisor.processes if supervisor is not None else []

    def worker_status(self, i: int) -> str:
        """What worker ``i`` is doing now, in words (from its row of the shared status table),
        e.g. "stepping environment 0 (env rank 2) at step 3 of 64 of the batch of iteration
        7"; the same text a timeout error gives."""
        return self._status.describe(i)

    def _send(self, command: str, itr: int, db_idx: int | None = None) -> tuple:
        # The agent's algorithm-given sampling settings travel with each command (see
        # BaseAgent.sampling_state): the workers' agent copies were forked before they were set.
        message = (command, itr, self.agent.sampling_state(), db_idx)
        self._supervisor.send_all(message)
        return message

    def _gather_traj_infos(self, deadline, message: tuple | None = None,
                           new_deadline: Callable[[], Deadline] | None = None) -> list:
        """The trajectory infos of every worker's reply to ``message``; with restarts allowed
        (and ``message``), a failed worker is replaced and sent ``message`` again, and the
        wait goes on until ``new_deadline()``."""
        recover = None
        if self.max_worker_restarts and message is not None and self.action_server is None:
            recover = functools.partial(self._restart_worker, message=message,
                                        new_deadline=new_deadline)
        replies = self._supervisor.gather("done", deadline, self._status.describe, recover)
        return [info for infos in replies for info in infos]

    def _restart_worker(self, i: int, cause: str, message: tuple | None,
                        new_deadline: Callable[[], Deadline]) -> Deadline:
        """Replace failed worker ``i`` (see the module docstring) and send it ``message``
        again (None: the worker was starting, and the new one reports ready by itself);
        returns the deadline to wait on from then on. With every restart used up, stop all
        workers and raise the worker's error, saying so."""
        if self.worker_restarts >= self.max_worker_restarts:
            self._supervisor.fail(f"{cause}\n(All {self.max_worker_restarts} worker restarts "
                                  f"that sampler.max_worker_restarts allows were used.)")
        self.worker_restarts += 1
        n = self.worker_restarts
        redo = "while starting" if message is None else \
            f"iteration {message[1]} collected again"
        logger.log(f"Sampler worker {i} restarted ({n} of {self.max_worker_restarts} "
                   f"allowed), {redo}: {_cause_line(cause)}", console=True)
        self._supervisor.restart(i, sampling_process,
                                 self._restarted_kwargs(self._workers_kwargs[i], n),
                                 name="rlfast-sampler")
        if message is not None:
            self._supervisor.gather("ready", self._timeouts.startup(self.worker_timeout),
                                    self._status.describe, indexes=[i])
            self._supervisor.send_all(message, indexes=[i])
        return new_deadline()

    def _before_batch(self) -> None:
        """Hook: make the latest parameters visible to the workers (CPU sampler)."""

    def use_slot(self, db_idx: int | None) -> None:
        """Async: the next batch goes to slot ``db_idx`` (the workers are told with the
        command; the action server writes its bootstrap values there)."""
        super().use_slot(db_idx)
        if db_idx is not None and self.action_server is not None:
            self.action_server.samples_np = self.samples_np

    def obtain_samples(self, itr: int, db_idx: int | None = None) -> tuple[Samples, list]:
        """Have every worker collect its share of the batch (the action server serving their
        actions meanwhile, for the GPU samplers), into double-buffer slot ``db_idx`` for the
        async samplers; returns (samples, completed trajectory infos). A failed worker raises
        :class:`SamplerWorkerError` with its traceback, a silent one (past
        ``worker_timeout``) with what it was doing."""
        self.use_slot(db_idx)
        self._before_batch()
        return self._restarting_all(lambda i: self._sample_once(i, db_idx), itr)

    def _sample_once(self, itr: int, db_idx: int | None) -> tuple[Samples, list]:
        deadline = self._timeouts.batch(self.worker_timeout)  # shared by this batch's waits
        start = time.monotonic()
        message = self._send("sample", itr, db_idx)
        if self.action_server is not None:
            self.action_server.serve_actions(itr, deadline)
        traj_infos = self._gather_traj_infos(
            deadline, message, lambda: self._timeouts.batch(self.worker_timeout))
        self._timeouts.record_batch(time.monotonic() - start)
        self.check_batch(self.samples_np, itr, self.env_offset)
        return self.samples_pyt, traj_infos

    def evaluate_agent(self, itr: int) -> list:
        """Run every worker's evaluation environments; returns the completed trajectory
        infos. Needs ``eval_n_envs > 0``."""
        if self.eval_n_envs == 0:
            raise ValueError("evaluate_agent() needs eval_n_envs > 0 in the sampler")
        self._before_batch()
        return self._restarting_all(self._evaluate_once, itr)

    def _evaluate_once(self, itr: int) -> list:
        if self.action_server is not None:
            self.action_server.prepare_evaluation()

        def eval_deadline() -> Deadline:
            return self._timeouts.evaluation(self.worker_timeout, self._eval_max_T)

        deadline = eval_deadline()
        start = time.monotonic()
        message = self._send("eval", itr)
        if self.action_server is not None:
            self.action_server.serve_actions_evaluation(itr, deadline)
        traj_infos = self._gather_traj_infos(deadline, message, eval_deadline)
        self._timeouts.record_evaluation(time.monotonic() - start)
        return traj_infos

    def _restarting_all(self, run: Callable[[int], Any], itr: int) -> Any:
        """``run(itr)``; for a sampler with an action server and restarts left, a worker fault
        (which has stopped every worker) restarts them all and runs it again. The action
        server steps every worker in lockstep, so the whole batch is collected again by the
        new workers, each from its environments' reset."""
        while True:
            try:
                return run(itr)
            except SamplerWorkerError as error:
                if self.action_server is None or not self.max_worker_restarts:
                    raise
                if self.worker_restarts >= self.max_worker_restarts:
                    raise SamplerWorkerError(
                        f"{error}\n(All {self.max_worker_restarts} worker restarts that "
                        f"sampler.max_worker_restarts allows were used.)") from error
                self._restart_all_workers(str(error), itr)

    def _restart_all_workers(self, cause: str, itr: int) -> None:
        """After a worker fault stopped every worker: clear the action server's semaphores
        and flags, start every worker again with fresh seeds, and wait until they are ready."""
        self.worker_restarts += 1
        n = self.worker_restarts
        logger.log(f"Sampler workers restarted ({n} of {self.max_worker_restarts} allowed; the "
                   f"action server needs all of them), iteration {itr} collected again: "
                   f"{_cause_line(cause)}", console=True)
        self.action_server.reset_sync()
        self._supervisor.start(sampling_process,
                               [self._restarted_kwargs(kwargs, n)
                                for kwargs in self._workers_kwargs],
                               name="rlfast-sampler", owner=self)
        self._supervisor.gather("ready", self._timeouts.startup(self.worker_timeout),
                                self._status.describe)
        self.agent.reset()  # every environment starts a new episode

    @staticmethod
    def _restarted_kwargs(kwargs: dict, n: int) -> dict:
        """A worker's start-up arguments for the ``n``-th restart of the run: its seeds moved
        by ``n * RESTART_SEED_STRIDE``."""
        worker = dict(kwargs["worker_kwargs"])
        offset = RESTART_SEED_STRIDE * n
        worker["seed"] = worker["seed"] + offset
        for key in ("env_seed", "eval_env_seed"):
            if worker.get(key) is not None:
                worker[key] = worker[key] + offset
        return dict(common_kwargs=kwargs["common_kwargs"], worker_kwargs=worker)

    def shutdown(self) -> None:
        """Stop and join every worker (terminating any that do not exit), on every path; then
        release what the action server holds (page-locked step buffers, device staging)."""
        supervisor = getattr(self, "_supervisor", None)
        if supervisor is not None:
            supervisor.stop()
        action_server = getattr(self, "action_server", None)
        if action_server is not None:
            action_server.close()


def _cause_line(cause: str) -> str:
    """The last line of a worker's error text: the exception of a traceback, or the whole
    text of a death or a timeout's first line."""
    lines = [line.strip() for line in cause.strip().splitlines() if line.strip()]
    if not lines:
        return "unknown cause"
    if "Traceback" in cause:
        return f"{lines[0].rstrip(':')}: {lines[-1]}"
    return lines[0]
