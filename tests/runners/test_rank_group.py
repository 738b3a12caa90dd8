"""The ranks of a synchronous run as a component: the single process's (nothing to join,
gather or agree on) and a process group's settings and bookkeeping, checked without starting
one (the multi-rank runs are in test_sync_rl.py)."""
from __future__ import annotations

import types

import pytest

from rlfast.runners import SyncRl, SyncRlEval
from rlfast.runners.rank_group import RANK_SEED_STRIDE, RankGroup, SingleProcess
from rlfast.runners.snapshots import RESUME_SEED_STRIDE
from rlfast.utils.distributed import DistEnv
from rlfast.utils.logging import logger

# Variables through which a launcher describes a rank; unset, a group spawns its own ranks.
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "SLURM_PROCID")


def _env(rank: int, world_size: int = 2, launcher: str = "spawn") -> DistEnv:
    return DistEnv(rank=rank, local_rank=rank, world_size=world_size,
                   local_world_size=world_size, master_addr="127.0.0.1", master_port=0,
                   launcher=launcher)


def test_single_process_is_its_own_run():
    ranks = SingleProcess()
    assert (ranks.rank, ranks.world_size) == (0, 1)
    trajs = [dict(Return=1.0)]
    assert ranks.keep_trajs(trajs) is trajs
    assert ranks.gather_trajs() == []
    assert ranks.agree(True) is True and ranks.agree(False) is False
    assert ranks.sampler_seed(10, 0) == 11
    assert ranks.sampler_seed(10, 2) == 11 + 2 * RESUME_SEED_STRIDE
    assert ranks.spawns() is False
    runner = types.SimpleNamespace(progress_bar=True)
    with ranks.as_rank(runner):
        pass
    assert runner.progress_bar is True
    with pytest.raises(RuntimeError, match="SimpleNamespace runs in a single process"):
        ranks.spawn(runner)


def test_group_settings_from_the_arguments_and_the_affinity():
    assert RankGroup(None, None, None, 60.0, "X").requested_world_size == 1
    group = RankGroup([dict(cuda_idx=None)] * 3, None, None, 60.0, "X")
    assert group.requested_world_size == 3  # one rank per affinity entry
    group = RankGroup({}, 2, "gloo", 7, "X")
    assert (group.requested_world_size, group.backend, group.dist_timeout) == (2, "gloo", 7.0)
    with pytest.raises(ValueError, match="world_size"):
        RankGroup(None, 0, None, 60.0, "X")
    with pytest.raises(ValueError, match="X: backend must be one of"):
        RankGroup(None, 2, "mpi", 60.0, "X")
    with pytest.raises(ValueError, match="dist_timeout"):
        RankGroup(None, 2, None, 0, "X")


def test_group_keeps_trajectories_for_the_row_and_seeds_by_rank():
    group = RankGroup(None, 2, None, 60.0, "X")
    assert group.keep_trajs([dict(Return=1.0)]) == []  # counted when gathered
    assert group._local_trajs == [dict(Return=1.0)]
    group.rank = 1
    assert group.sampler_seed(10, 3) == 11 + RANK_SEED_STRIDE  # resumes do not change it


def test_as_rank_records_when_the_first_failure_began():
    group = RankGroup(None, 2, None, 60.0, "X")
    group.env = _env(0)
    runner = types.SimpleNamespace(progress_bar=True)
    with group.as_rank(runner):
        pass
    assert group.failed_at is None and runner.progress_bar is True  # rank 0 logs
    with pytest.raises(RuntimeError):
        with group.as_rank(runner):
            raise RuntimeError("planted")
    first = group.failed_at
    assert first is not None
    with pytest.raises(RuntimeError):
        with group.as_rank(runner):
            raise RuntimeError("planted again")
    assert group.failed_at == first  # the first failure's time is kept


def test_as_rank_mutes_the_ranks_but_rank_0():
    group = RankGroup(None, 2, None, 60.0, "X")
    group.env = _env(1)
    runner = types.SimpleNamespace(progress_bar=True)
    assert not logger.get_muted()
    try:
        with group.as_rank(runner):
            assert logger.get_muted()  # unmuted when the rank leaves the group
        assert runner.progress_bar is False
    finally:
        logger.set_muted(False)


@pytest.mark.parametrize("world_size, spawned, spawns", [(2, False, True), (2, True, False),
                                                         (1, False, False)])
def test_group_spawns_its_ranks_only_without_a_launcher(monkeypatch, world_size, spawned,
                                                        spawns):
    for name in LAUNCHER_VARS:
        monkeypatch.delenv(name, raising=False)
    group = RankGroup(None, world_size, None, 60.0, "X")
    group.spawned = spawned
    assert group.spawns() is spawns
    assert (group.env.launcher, group.env.world_size, group.env.rank) == ("spawn", world_size, 0)
    group = RankGroup(None, 2, None, 60.0, "X")
    group.env = _env(1, launcher="torchrun")  # a launcher's rank trains; it forks nothing
    assert group.spawns() is False


@pytest.mark.parametrize("RunnerCls", [SyncRl, SyncRlEval])
def test_sync_runners_are_minibatch_runners_with_a_rank_group(RunnerCls):
    runner = RunnerCls(algo=None, agent=None, sampler=None, n_steps=10, world_size=2,
                       backend="gloo", dist_timeout=9.0, affinity=[{}, {}])
    assert isinstance(runner.ranks, RankGroup)
    assert (runner.requested_world_size, runner.backend, runner.dist_timeout) == (2, "gloo", 9.0)
    assert runner.ranks.affinities == [{}, {}]
    with pytest.raises(ValueError, match="overlap=True is for the single-process runners"):
        RunnerCls(algo=None, agent=None, sampler=None, n_steps=10, overlap=True)
