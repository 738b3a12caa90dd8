"""Synchronous multi-process training: the minibatch runners with a
:class:`~rlfast.runners.rank_group.RankGroup` for their ranks.

Each rank has its own sampler, its own copy of the agent wrapped in DistributedDataParallel
and the same algorithm; gradients are all-reduced every update, so every rank holds the same
parameters. The ranks come from the launcher (``torchrun``, Slurm ``srun``; see
:func:`rlfast.utils.distributed.launch_env`) or, with ``world_size`` > 1 (or an affinity list
with one entry per rank) and no launcher, from the run itself: the calling process forks
ranks 0..N-1 and supervises them (``rlfast.runners.rank_spawning``), on a free port of
127.0.0.1. Either way every rank runs the same code through ``env://``.

Batch sizes: each rank's sampler runs its own ``batch_B`` environments (the global batch per
iteration is ``world_size * T * B``, as in rlpyt); replay-based algorithms keep one replay
buffer per rank and each samples ``batch_size / world_size`` of every update's batch, and
on-policy statistics (PPO's advantage normalization, observation normalization) are pooled
over all ranks, so the ranks optimize the objective one process with the global batch would.
"""
from __future__ import annotations

from typing import Any

from rlfast.runners.minibatch_rl import MinibatchRl, MinibatchRlBase, MinibatchRlEval
from rlfast.runners.rank_group import RANK_SEED_STRIDE, RankGroup, rank_affinity
from rlfast.runners.rank_spawning import FAILURE_GRACE_S, SPAWNED_RANKS_JOIN_S, RankFailedError
from rlfast.utils.distributed import DEFAULT_DIST_TIMEOUT_S

__all__ = ["SyncRl", "SyncRlEval", "RankFailedError", "rank_affinity", "RANK_SEED_STRIDE",
           "FAILURE_GRACE_S", "SPAWNED_RANKS_JOIN_S"]


def _distribute(runner: MinibatchRlBase, affinity: dict | list | None, world_size: int | None,
                backend: str | None, dist_timeout: float) -> None:
    """Give ``runner`` the ranks of a multi-process run (see :class:`RankGroup` for the
    arguments); its settings stay readable as ``requested_world_size``, ``backend`` and
    ``dist_timeout``."""
    owner = type(runner).__name__
    if runner.overlap:
        raise ValueError(f"{owner}: overlap=True is for the single-process runners "
                         f"(MinibatchRl, MinibatchRlEval); a multi-rank run samples and "
                         f"trains in step on every rank")
    runner.ranks = RankGroup(affinity, world_size, backend, dist_timeout, owner)
    runner.requested_world_size = runner.ranks.requested_world_size
    runner.backend, runner.dist_timeout = runner.ranks.backend, runner.ranks.dist_timeout


class SyncRl(MinibatchRl):
    """:class:`MinibatchRl` on several ranks: the logged window holds every rank's recent
    training trajectories, and ``CumSteps`` counts every rank's steps.

    ``world_size``: ranks to spawn on this machine when no launcher set the variables
    (default: the affinity list's length, else 1); ignored under a launcher, whose
    ``WORLD_SIZE`` rules. ``backend``: ``"nccl"`` or ``"gloo"`` (default: NCCL when the
    agent is on CUDA, gloo on CPU). ``dist_timeout``: seconds any collective (and the
    rendezvous) may wait before the rank raises, so that a hung rank ends the run; it must
    exceed rank 0's evaluation time, during which the other ranks wait. ``affinity``: one
    dict for the node's ranks or one per rank (see :func:`rank_affinity`).
    """

    def __init__(self, *args: Any, world_size: int | None = None, backend: str | None = None,
                 dist_timeout: float = DEFAULT_DIST_TIMEOUT_S, **kwargs: Any):
        affinity = kwargs.pop("affinity", None)
        super().__init__(*args, **kwargs)
        _distribute(self, affinity, world_size, backend, dist_timeout)


class SyncRlEval(MinibatchRlEval):
    """:class:`MinibatchRlEval` on several ranks: rank 0 alone evaluates (its own evaluation
    environments) and logs; ``stop_return`` stops every rank at once. The distributed
    arguments are :class:`SyncRl`'s."""

    def __init__(self, *args: Any, world_size: int | None = None, backend: str | None = None,
                 dist_timeout: float = DEFAULT_DIST_TIMEOUT_S, **kwargs: Any):
        affinity = kwargs.pop("affinity", None)
        super().__init__(*args, **kwargs)
        _distribute(self, affinity, world_size, backend, dist_timeout)
