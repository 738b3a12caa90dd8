"""The wall-clock snapshot cadence (``--snapshot-every MINUTES``): its check, the clock, when
``Snapshots`` says a snapshot is due, and short runs of both runner families that snapshot on
it (at the end of an iteration, between the log rows), resume exactly from such a snapshot,
and are not changed by it."""
from __future__ import annotations

import csv
import math
import shutil

import pytest

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.runners import AsyncRl, MinibatchRlEval
from rlfast.runners.cadence import SnapshotClock, check_snapshot_minutes
from rlfast.runners.snapshots import Snapshots, check_resumable
from rlfast.samplers import SerialSampler
from rlfast.utils.logging import load_snapshot, logger_context
from tests.integration._async_helpers import small_dqn_runner
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture


class FakeClock:
    """A clock that moves ``step`` seconds at every reading."""

    def __init__(self, step: float):
        self.now, self.step = 0.0, step

    def __call__(self) -> float:
        self.now += self.step
        return self.now


# ---- the check and the clock -----------------------------------------------------------------
@pytest.mark.parametrize("minutes", [30, 0.5, 1e-6, 10**6])
def test_positive_finite_minutes_are_taken(minutes):
    assert check_snapshot_minutes(minutes) == float(minutes)
    assert check_snapshot_minutes(None) is None


@pytest.mark.parametrize("minutes, error", [(0, ValueError), (-5, ValueError),
                                            (math.nan, ValueError), (math.inf, ValueError),
                                            (True, TypeError), ("5", TypeError)])
def test_other_values_are_refused_by_name(minutes, error):
    with pytest.raises(error) as caught:
        check_snapshot_minutes(minutes, "--snapshot-every")
    assert "--snapshot-every" in str(caught.value) and repr(minutes) in str(caught.value)
    with pytest.raises(error):
        Snapshots().every_minutes = minutes


def test_clock_is_due_once_its_minutes_passed_since_restart():
    clock = SnapshotClock(1.0, clock=FakeClock(25.0))  # constructed at 25 s
    assert [clock.due() for _ in range(3)] == [False, False, True]  # 50, 75, 100 s
    clock.restart()  # 125 s: the next minute counts from here
    assert [clock.due() for _ in range(3)] == [False, False, True]  # 150, 175, 200 s
    assert SnapshotClock(None, clock=FakeClock(1e9)).due() is False  # no cadence


@pytest.mark.parametrize("mode, gap, itr, due", [
    ("last", 1, 5, True), ("all", 1, 5, True), ("gap", 3, 6, True),
    ("gap", 3, 5, False),  # the gap keeps no snapshot of iteration 5: wait for 6
    ("none", 1, 5, False),  # the logger keeps nothing
    ("last", 1, 3, False),  # a snapshot covers iteration 3 already
])
def test_time_due_follows_the_snapshot_mode(tmp_path, mode, gap, itr, due):
    snapshots = Snapshots()
    snapshots.clock = SnapshotClock(0.5, clock=FakeClock(60.0))
    snapshots.start(4)  # iterations 0-3 covered; the clock starts
    with logger_context(str(tmp_path), 0, "s", {}, override_prefix=True, snapshot_mode=mode,
                        snapshot_gap=gap):
        assert snapshots.time_due(itr) is due
    assert snapshots.time_due(itr) is False  # no snapshot directory outside a run


def test_only_a_written_snapshot_restarts_the_clock(tmp_path):
    """A snapshot the logger does not keep (mode "gap" off the gap) leaves the clock due, so
    the next iteration the gap keeps is snapshotted."""
    from tests.runners.test_snapshots import _Runner

    snapshots = Snapshots()
    snapshots.clock = SnapshotClock(1.0, clock=FakeClock(60.0))
    snapshots.start(0)
    with logger_context(str(tmp_path), 0, "s", {}, override_prefix=True, snapshot_mode="gap",
                        snapshot_gap=2):
        snapshots.save(_Runner(), 1)  # not kept: itr 1 is off the gap
        assert snapshots.time_due(2) is True
        snapshots.save(_Runner(), 2)  # kept: the clock restarts
        assert snapshots.time_due(3) is False
    assert sorted(p.name for p in tmp_path.glob("itr_*.pkl")) == ["itr_2.pkl"]


# ---- a synchronous run -----------------------------------------------------------------------
BATCH = 64  # steps per iteration: 16 x 4
N_ITR = 8


def _sync_runner(every_minutes=None, n_steps=N_ITR * BATCH):
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=16,
                            batch_B=4, max_decorrelation_steps=10, eval_n_envs=1,
                            eval_max_steps=200, eval_max_trajectories=1)
    runner = MinibatchRlEval(algo=PPO(learning_rate=1e-3, minibatches=2, epochs=2),
                             agent=CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[16])),
                             sampler=sampler, n_steps=n_steps, seed=7,
                             log_interval_steps=4 * BATCH, progress_bar=False)
    runner.snapshots.every_minutes = every_minutes
    return runner


def _rows(run_dir):
    with open(run_dir / "progress.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    keys = [k for k in rows[0] if k.startswith(("Return", "loss", "Diagnostics/CumSteps"))]
    return [[r[k] for k in keys] for r in rows]


def _itrs(run_dir):
    return sorted(int(p.stem.split("_")[1]) for p in run_dir.glob("itr_*.pkl"))


def test_sync_run_snapshots_on_the_clock_and_resumes_exactly(tmp_path):
    """Rows every 4 iterations; the wall clock (60 s per reading, a snapshot every 2
    minutes) adds snapshots between them, at the end of iterations. The run's rows equal
    those of the run without the clock, and a run resumed from a snapshot between two rows
    logs exactly the uninterrupted run's rows."""
    plain = tmp_path / "plain"
    with logger_context(str(plain), 0, "p", {}, override_prefix=True, snapshot_mode="all"):
        _sync_runner().train()
    assert _itrs(plain) == [3, 7]  # the rows' snapshots only

    timed = tmp_path / "timed"
    runner = _sync_runner(2.0)
    runner.snapshots.clock.clock = FakeClock(60.0)
    with logger_context(str(timed), 0, "t", {}, override_prefix=True, snapshot_mode="all"):
        runner.train()
    # Clock readings: the start 60 s; after itr 0: 120 (1 min since the start); itr 1: 180
    # -> saved, restart 240; itr 2: 300; itr 3's row saves (restart 360), then 420; itr 4:
    # 480 -> saved, 540; itr 5: 600; itr 6: 660 -> saved, 720; itr 7: the last row.
    assert _itrs(timed) == [1, 3, 4, 6, 7]
    assert _rows(timed) == _rows(plain)

    resumed = tmp_path / "resumed"
    shutil.copytree(timed, resumed)
    snapshot = load_snapshot(resumed / "itr_4.pkl")
    check_resumable(snapshot)
    assert (snapshot["itr"], snapshot["cum_steps"]) == (4, 5 * BATCH)
    for later in (6, 7):  # as if the run had been killed after its snapshot of iteration 4
        (resumed / f"itr_{later}.pkl").unlink()
    runner = _sync_runner()
    runner.resume_from(snapshot, str(resumed))
    with logger_context(str(resumed), 0, "r", {}, override_prefix=True, snapshot_mode="all",
                        resume=dict(itr=4, cum_steps=5 * BATCH)):
        result = runner.train()
    assert result["cum_steps"] == N_ITR * BATCH
    assert _rows(resumed) == _rows(plain)  # bit for bit: the serial sampler resumes exactly


# ---- an asynchronous run ---------------------------------------------------------------------
def test_async_run_snapshots_on_the_clock(tmp_path, watchdog):  # noqa: F811
    """AsyncRl (rows at the interval ends and after the last batch) with a cadence that is
    always due: every batch that arrives is snapshotted, each snapshot resumable."""
    watchdog(120)
    runner = small_dqn_runner("serial", n_steps=20 * 32, log_interval_steps=10 * 32,
                              RunnerCls=AsyncRl)
    runner.snapshots.every_minutes = 1e-9
    with logger_context(str(tmp_path), 0, "a", {}, override_prefix=True, snapshot_mode="all"):
        result = runner.train()
    assert result["cum_steps"] == 20 * 32
    assert _itrs(tmp_path) == list(range(20))  # rows alone would give [9, 19]
    snapshot = load_snapshot(tmp_path / "itr_4.pkl")
    check_resumable(snapshot)
    assert (snapshot["itr"], snapshot["cum_steps"]) == (4, 5 * 32)
    assert live_children() == []
