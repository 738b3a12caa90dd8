"""Asynchronous runs with several optimizer ranks (rlpyt's AsyncRl with several optimizer
GPUs, here on the CPU with gloo): rank 0 (this process) copies batches, throttles, publishes
and logs; rank 1, forked, joins the DistributedDataParallel group and runs the same updates
on its share of each replayed batch. Both end with the same parameters; a failing rank ends
the run with its traceback; nothing is left behind."""
from __future__ import annotations

import os
import pickle

import pytest
import torch

from rlfast.algos import DQN
from rlfast.runners import AsyncRlEval, AsyncRunError
from tests.integration._async_helpers import (SMALL_DQN, new_shm_entries, read_progress,
                                              shm_entries, small_dqn_runner)
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.learning._configs import train

HANG_GUARD_S = 180
TWO_RANKS = dict(optimizer=[dict(cuda_idx=None), dict(cuda_idx=None)], sampler=dict())


class _RecordingRanks(AsyncRlEval):
    """Rank 1 writes its final parameters (and update count, replay batch share) to a file."""

    record_dir = None

    def run_optimizer_rank(self, env):
        super().run_optimizer_rank(env)
        state = {k: v.detach().cpu().clone() for k, v in self.agent.state_dict()["model"].items()}
        with open(os.path.join(self.record_dir, f"rank{env.rank}.pkl"), "wb") as f:
            pickle.dump(dict(state=state, updates=self.algo.update_counter,
                             share=self.algo.replay_batch_size), f)


class _FailingRank(AsyncRlEval):
    """Rank 1 raises after a few updates."""

    def run_optimizer_rank(self, env):
        original = self.algo.optimize_agent

        def failing(itr, samples=None, sampler_itr=None):
            if self.algo.update_counter >= 8:
                raise RuntimeError("optimizer rank 1 broke on purpose")
            return original(itr, samples, sampler_itr)

        self.algo.optimize_agent = failing
        super().run_optimizer_rank(env)


def _runner(RunnerCls, **kwargs):
    runner = small_dqn_runner("serial", n_steps=1_600, log_interval_steps=800,
                              algo=DQN(**dict(SMALL_DQN, batch_size=32)), RunnerCls=RunnerCls,
                              **kwargs)
    runner.async_affinity.optimizer = [dict(cuda_idx=None), dict(cuda_idx=None)]
    runner.n_optimizers = 2
    return runner


def test_two_optimizer_ranks_train_in_lockstep(tmp_path, watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    before = shm_entries()
    runner = _runner(_RecordingRanks)
    runner.record_dir = str(tmp_path)
    train(runner, tmp_path / "log", "async_ranks")
    rank1 = pickle.loads((tmp_path / "rank1.pkl").read_bytes())
    assert runner.algo.update_counter > 0
    assert rank1["updates"] == runner.algo.update_counter  # the same updates, in lockstep
    assert rank1["share"] == runner.algo.replay_batch_size == 16  # batch_size 32 over 2 ranks
    rank0 = runner.agent.state_dict()["model"]
    assert set(rank0) == set(rank1["state"])
    for name, value in rank0.items():
        torch.testing.assert_close(value.cpu(), rank1["state"][name], rtol=0, atol=0)
    rows = read_progress(tmp_path / "log")
    assert rows[-1]["Diagnostics/CumUpdates"] == runner.algo.update_counter
    assert not live_children()
    assert not new_shm_entries(before)


def test_a_failing_optimizer_rank_ends_the_run_with_its_traceback(tmp_path, watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    before = shm_entries()
    runner = _runner(_FailingRank)
    runner.n_steps = 100_000
    with pytest.raises(AsyncRunError, match="Optimizer rank 1") as caught:
        train(runner, tmp_path / "log", "async_rank_fails")
    assert "optimizer rank 1 broke on purpose" in str(caught.value)
    assert not live_children()
    assert not new_shm_entries(before)


def test_the_callers_environment_is_left_as_it_was(tmp_path, watchdog):  # noqa: F811
    """Rank 0 joins the process group in this process; the launcher variables env:// reads
    must not stay behind, or the next run here would think torchrun started it."""
    watchdog(HANG_GUARD_S)
    names = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
             "MASTER_PORT")
    before = {k: os.environ.get(k) for k in names}
    runner = _runner(_RecordingRanks)
    runner.record_dir = str(tmp_path)
    train(runner, tmp_path / "log", "async_ranks_env")
    assert {k: os.environ.get(k) for k in names} == before
