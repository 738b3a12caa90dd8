"""Helpers for test_sync_rl.py: small multi-rank (SyncRlEval) CartPole runs built by
``build_experiment``, and a runner subclass that records, per rank, what the log cannot show
(each rank's own trajectory count, its parameters, its replay buffer), or fails on one rank.

The ranks are forked from the test process, so the subclass needs no pickling; what a rank
records is written at shutdown to ``<record_dir>/rank<r>.pkl`` as plain numpy / Python data.
"""
from __future__ import annotations

import csv
import os
import pickle

from rlfast.experiments.presets import build_experiment, get_preset
from rlfast.runners import SyncRlEval
from rlfast.utils.logging import logger_context
from tests._leaks import new_shm_entries, shm_entries  # noqa: F401 (for the tests)

FAIL_MESSAGE = "rank failure injected by tests.runners._sync_runners"
# Variables through which a launcher (torchrun, Slurm) describes a rank: with any of them
# set, SyncRl would join that job instead of spawning its own ranks.
LAUNCHER_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                 "MASTER_PORT", "SLURM_PROCID")


def numpy_state(state) -> dict:
    """A (nested) agent state dict as flat ``{key: float64 ndarray}``."""
    out = {}

    def walk(prefix, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}{k}" + ("." if isinstance(v, dict) else ""), v)
        else:
            out[prefix] = value.detach().cpu().double().numpy().copy()

    walk("", state)
    return out


class RecordingSyncRlEval(SyncRlEval):
    """SyncRlEval that writes a record per rank at shutdown (``record_dir``), and raises
    ``RuntimeError(FAIL_MESSAGE)`` on rank ``fail_rank`` in ``fail_at`` (``"startup"``,
    before the rendezvous, or ``"log_and_snapshot"``, after the first iteration)."""

    record_dir: str | None = None
    fail_rank: int | None = None
    fail_at: str | None = None

    def startup(self) -> int:
        if self.fail_at == "startup" and self.ranks.env.rank == self.fail_rank:
            raise RuntimeError(FAIL_MESSAGE)
        n_itr = super().startup()
        self._record = dict(rank=self.rank, world_size=self.world_size,
                            initial=numpy_state(self.agent.state_dict()), trajs=0,
                            pid=os.getpid())
        return n_itr

    def store_diagnostics(self, itr, traj_infos, opt_info) -> None:
        self._record["trajs"] += len(traj_infos)  # this rank's own completed trajectories
        super().store_diagnostics(itr, traj_infos, opt_info)

    def log_and_snapshot(self, itr: int) -> None:
        if self.fail_at == "log_and_snapshot" and self.rank == self.fail_rank:
            raise RuntimeError(FAIL_MESSAGE)
        super().log_and_snapshot(itr)

    def shutdown(self) -> None:
        try:
            record = getattr(self, "_record", None)
            if self.record_dir is not None and record is not None:
                record.update(final=numpy_state(self.agent.state_dict()),
                              itrs_done=self.itrs_done,
                              update_counter=getattr(self.algo, "update_counter", 0))
                replay = getattr(self.algo, "replay_buffer", None)
                if replay is not None:
                    record.update(rank_replay_size=self.algo.rank_replay_size,
                                  replay_capacity=int(replay.size),
                                  replay_batch_size=self.algo.replay_batch_size,
                                  updates_per_optimize=self.algo.updates_per_optimize,
                                  min_itr_learn=self.algo.min_itr_learn)
                path = os.path.join(self.record_dir, f"rank{self.rank}.pkl")
                with open(path + ".tmp", "wb") as f:
                    pickle.dump(record, f)
                os.replace(path + ".tmp", path)
        finally:
            super().shutdown()


def small_config(algo: str, n_steps: int, log_interval_steps: int, **runner) -> dict:
    """The CartPole preset of ``algo``, cut down: 4 environments of 32 steps (PPO) or 4 of
    4 (DQN) per rank and iteration, 2 evaluation episodes of at most 200 steps each."""
    config = get_preset(algo, "CartPole-v1")
    sampler = config["sampler"]
    sampler.update(batch_B=4, eval_n_envs=2, eval_max_trajectories=2, eval_max_steps=400,
                   max_decorrelation_steps=0)
    if algo == "ppo":
        sampler["batch_T"] = 32
        config["agent"]["model_kwargs"]["hidden_sizes"] = [16]
        config["algo"].update(minibatches=2, epochs=1)
    else:
        sampler["batch_T"] = 4
        config["agent"]["model_kwargs"]["hidden_sizes"] = [16]
        config["algo"].update(batch_size=16, min_steps_learn=64, replay_size=1000,
                              replay_ratio=8, target_update_interval=20, eps_steps=200)
    config["runner"].update(n_steps=n_steps, log_interval_steps=log_interval_steps, **runner)
    config["distributed"]["dist_timeout"] = 60.0  # a rank left waiting errs, not hangs
    return config


def build(algo: str, config: dict, seed: int, record_dir=None, sampler: str = "serial",
          world_size: int = 2, fail_rank: int | None = None, fail_at: str | None = None):
    """``build_experiment`` (on CartPole-v1, single-core affinity per rank unless the CPU
    sampler is asked for) as a :class:`RecordingSyncRlEval`."""
    runner = build_experiment(algo, "CartPole-v1", config, sampler=sampler, seed=seed,
                              world_size=world_size)
    assert type(runner) is SyncRlEval, type(runner)
    runner.__class__ = RecordingSyncRlEval
    runner.record_dir = None if record_dir is None else str(record_dir)
    runner.fail_rank, runner.fail_at = fail_rank, fail_at
    runner.progress_bar = False
    return runner


def train(runner, log_dir) -> dict:
    """``runner.train()`` logging into ``log_dir`` (snapshot mode "last")."""
    with logger_context(str(log_dir), 0, "sync", {}, snapshot_mode="last",
                        override_prefix=True):
        return runner.train()


def read_progress(path) -> list:
    """The rows of a progress.csv, each a dict of column -> float."""
    with open(path, newline="") as f:
        return [{k: float(v) for k, v in row.items()} for row in csv.DictReader(f)]


def read_records(record_dir, world_size: int = 2) -> list:
    out = []
    for r in range(world_size):
        with open(os.path.join(str(record_dir), f"rank{r}.pkl"), "rb") as f:
            out.append(pickle.load(f))
    return out


