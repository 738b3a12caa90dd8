"""``Diagnostics/StepsPerSecond``: the steps of the iterations since the last row over the
time they took, for every row: a short last interval (``n_steps`` not a multiple of the log
interval), the rows after a resume and after the pre-training evaluation row included."""
from __future__ import annotations

import csv
import types

import pytest

from rlfast.runners import diagnostics as diagnostics_module
from rlfast.runners.cadence import LogCadence
from rlfast.runners.diagnostics import Diagnostics
from rlfast.runners.tracking import EvalReturns, TrainTrajWindow
from rlfast.utils.logging import logger_context

BATCH = 10
SECONDS_PER_ITR = 2.0  # so every row should read BATCH / SECONDS_PER_ITR = 5 steps/s


class _Clock:
    def __init__(self):
        self.now = 1000.0

    def time(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(diagnostics_module, "time", types.SimpleNamespace(time=clock.time))
    return clock


def _diagnostics(n_steps, tracking=None):
    # 20 steps between rows: rows after every second iteration and after the last.
    cadence = LogCadence.plan(n_steps=n_steps, log_interval_steps=20, itr_batch_size=BATCH)
    algo = types.SimpleNamespace(opt_info_fields=("loss",), update_counter=0)
    return Diagnostics(algo, cadence, tracking or TrainTrajWindow(10), progress_bar=False)


def _train(diagnostics, clock, itrs):
    """Run iterations ``itrs`` as a runner does: store each, write a row where the cadence
    says."""
    for itr in itrs:
        clock.now += SECONDS_PER_ITR
        diagnostics.store(itr, [], None)
        if diagnostics.cadence.logs_after(itr):
            diagnostics.log_row(itr, [])


def _speeds(log_dir):
    with open(log_dir / "progress.csv", newline="") as f:
        return [(int(r["Diagnostics/CumSteps"]), float(r["Diagnostics/StepsPerSecond"]))
                for r in csv.DictReader(f)]


def test_short_last_interval_counts_only_its_own_steps(tmp_path, clock):
    diagnostics = _diagnostics(n_steps=50)  # 5 iterations: rows after 1, 3 and 4
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True):
        _train(diagnostics, clock, range(5))
    assert _speeds(tmp_path) == [(20, 5.0), (40, 5.0), (50, 5.0)]


def test_rows_after_a_resume_count_from_the_resumed_iteration(tmp_path, clock):
    diagnostics = _diagnostics(n_steps=70)  # resumed after iteration 2 (an odd start)
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True):
        _train(diagnostics, clock, range(3, 7))
    assert _speeds(tmp_path) == [(40, 5.0), (60, 5.0), (70, 5.0)]


def test_rows_after_the_pre_training_evaluation(tmp_path, clock):
    diagnostics = _diagnostics(n_steps=30, tracking=EvalReturns())
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True):
        diagnostics.log_first_row([dict(Return=1.0)], eval_time=0.0)
        _train(diagnostics, clock, range(3))
    speeds = _speeds(tmp_path)
    assert speeds[0][0] == 0 and speeds[1:] == [(20, 5.0), (30, 5.0)]
