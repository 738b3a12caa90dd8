"""The optimizer side of an asynchronous run: its affinity, and several optimizer ranks (an
``optimizer`` affinity list of N entries).

The master is rank 0 and forks ranks 1..N-1, which join one process group (NCCL on GPUs,
gloo on the CPU; ``backend`` overrides) and wrap the agent in DistributedDataParallel. Rank 0
alone copies batches, throttles, publishes parameters and logs; before each of its
``optimize_agent`` calls it broadcasts the iteration, and every rank then runs the same
updates, each sampling ``batch_size / N`` from the shared replay buffer, with gradients
all-reduced. ``dist_timeout``: seconds a collective may wait before the run fails.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator, Mapping
from typing import Any

from rlfast.agents.param_sharing import unwrap_data_parallel, wrap_data_parallel
from rlfast.runners.master_affinity import set_cuda_device
from rlfast.utils.collections import AttrDict
from rlfast.utils.distributed import (DistEnv, broadcast_int, choose_backend,
                                      destroy_process_group, free_port, init_process_group)
from rlfast.utils.processes import ChildFailedError, ProcessSupervisor

__all__ = ["OptimizerRanks", "async_affinity", "blame_failed_rank"]


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


class OptimizerRanks:
    """The optimizer ranks of one run: ``affinities`` (one dict per rank, rank 0's first),
    the ``backend`` (None: by device) and ``dist_timeout``; ``error_cls``: the error a failing
    rank raises in rank 0."""

    def __init__(self, affinities: list[Mapping[str, Any]], backend: str | None,
                 dist_timeout: float, error_cls: type[ChildFailedError]):
        self.affinities = affinities
        self.backend = backend
        self.dist_timeout = dist_timeout
        self.error_cls = error_cls
        self.supervisor: ProcessSupervisor | None = None

    def launch(self, runner: Any) -> None:
        """Fork ranks 1..N-1 (after the sampler, so it holds no process group), each running
        ``runner.run_optimizer_rank(env)``, then join the group as rank 0 and wrap
        ``runner.agent`` in DistributedDataParallel."""
        n = len(self.affinities)
        envs = [DistEnv(rank=r, local_rank=r, world_size=n, local_world_size=n,
                        master_addr="127.0.0.1", master_port=free_port(), launcher="spawn")
                for r in range(n)]
        envs = [dataclasses.replace(e, master_port=envs[0].master_port) for e in envs]
        self.supervisor = ProcessSupervisor(label="Optimizer rank", error_cls=self.error_cls,
                                            names=[f"Optimizer rank {r}" for r in range(1, n)])
        self.supervisor.start(_optimizer_rank_child,
                              [dict(runner=runner, env=e) for e in envs[1:]],
                              name="rlfast-optimizer", owner=runner, daemon=False)
        self.join(runner.agent, envs[0])

    def join(self, agent: Any, env: DistEnv) -> None:
        """Join the process group as ``env.rank`` on that rank's device, and wrap ``agent``
        in DistributedDataParallel there."""
        cuda_idx = self.affinities[env.rank].get("cuda_idx")
        backend = choose_backend(self.backend, cuda_idx is not None)
        set_cuda_device(cuda_idx)
        # Rank 0 is the caller's process, which goes on after the run: leave its environment
        # as it was (the forked ranks exit with the run).
        init_process_group(env, backend, self.dist_timeout, keep_environ=env.rank > 0)
        agent.to_device(cuda_idx)
        wrap_data_parallel(agent)

    def serve(self, agent: Any, algo: Any, env: DistEnv,
              optim_state: Mapping[str, Any] | None = None) -> None:
        """The body of a rank beyond the first (in its own process): join the group, then
        run ``optimize_agent`` for every iteration rank 0 broadcasts, until it broadcasts -1.
        ``optim_state``: the optimizer state a resumed run continues from (every rank the
        same)."""
        try:
            self.join(agent, env)
            algo.optim_initialize(rank=env.rank)
            if optim_state is not None:
                algo.load_optim_state_dict(optim_state)
            algo.on_update = None
            while True:
                itr = broadcast_int(0)
                if itr < 0:
                    break
                agent.train_mode(itr)
                algo.optimize_agent(itr, samples=None)
        finally:
            unwrap_data_parallel(agent)
            destroy_process_group()

    def command(self, itr: int) -> None:
        """Rank 0: tell the other ranks to run ``optimize_agent(itr)`` (-1: stop)."""
        if self.supervisor is not None and self.supervisor.n:
            broadcast_int(itr)

    def wait_done(self) -> None:
        """Rank 0, after commanding the stop: wait until every rank finished the same
        updates."""
        self.supervisor.gather("done", timeout=max(60.0, self.dist_timeout))

    def failure(self, timeout: float) -> BaseException | None:
        """The error of a rank that failed (waiting up to ``timeout`` s for one), or None:
        a dead rank makes rank 0's collective err, and this names the cause."""
        return self.supervisor.failure(timeout) if self.supervisor is not None else None

    def stop(self, agent: Any) -> None:
        """Rank 0's shutdown: unwrap the agent, leave the group, stop the other ranks."""
        unwrap_data_parallel(agent)
        destroy_process_group()
        if self.supervisor is not None:
            self.supervisor.stop()


@contextlib.contextmanager
def blame_failed_rank(ranks: OptimizerRanks | None) -> Iterator[None]:
    """Rank 0's loop: an error there that a failed rank caused (a dead rank makes rank 0's
    collective err) is replaced by that rank's error, chained to it."""
    try:
        yield
    except Exception as error:
        child_error = ranks.failure(5.0) if ranks is not None else None
        if child_error is not None:
            raise child_error from error
        raise


def _optimizer_rank_child(conn: Any, runner: Any, env: DistEnv) -> None:
    """Entry point of optimizer rank ``env.rank`` (> 0), forked by rank 0."""
    runner.run_optimizer_rank(env)
    conn.send(("done", None))
