"""The log rows every runner writes (``Diagnostics``): what a row holds, what is gathered
between rows, the pre-training row, and the state a snapshot keeps."""
from __future__ import annotations

import csv
import math
import types

from rlfast.runners.cadence import LogCadence
from rlfast.runners.diagnostics import Diagnostics, nan_to_none, none_to_nan
from rlfast.runners.tracking import EvalReturns, TrainTrajWindow
from rlfast.runners.overlap import PolicyLag
from rlfast.utils.logging import logger_context


def _algo():
    return types.SimpleNamespace(opt_info_fields=("loss",), update_counter=0)


def _rows(path):
    with open(path / "progress.csv", newline="") as f:
        return list(csv.DictReader(f))


def _diagnostics(overlap=False, tracking=None):
    cadence = LogCadence.plan(n_steps=100, log_interval_steps=20, itr_batch_size=10)
    return Diagnostics(_algo(), cadence, tracking or TrainTrajWindow(10), overlap=overlap,
                       progress_bar=False)


def test_rows_hold_progress_trajectories_and_optimizer_infos(tmp_path):
    diagnostics = _diagnostics()
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True):
        diagnostics.store(0, [dict(Return=1.0, Length=3, _hidden=1)],
                          types.SimpleNamespace(loss=[0.5, 1.5]))
        diagnostics.store(1, [dict(Return=3.0, Length=5, _hidden=1)],
                          types.SimpleNamespace(loss=2.5))
        diagnostics.algo.update_counter = 3
        diagnostics.log_row(1, [dict(Return=1.0, Length=3), dict(Return=3.0, Length=5)])
    (row,) = _rows(tmp_path)
    assert row["Diagnostics/Iteration"] == "1" and row["Diagnostics/CumSteps"] == "20"
    assert row["Diagnostics/CumCompletedTrajs"] == "2"
    assert row["Diagnostics/CumUpdates"] == "3"
    assert float(row["ReturnAverage"]) == 2.0 and float(row["lossAverage"]) == 1.5
    assert "_hiddenAverage" not in row and "Diagnostics/PolicyLag" not in row
    assert diagnostics.opt_infos == {"loss": []}  # cleared by the row
    assert len(diagnostics.tracking.window) == 2  # handed to the tracking


def test_overlap_rows_average_the_policy_lags(tmp_path):
    diagnostics = _diagnostics(overlap=True)
    diagnostics.lags.extend([PolicyLag(0, 0), PolicyLag(iterations=1, gradient_steps=4)])
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True):
        diagnostics.log_row(1, [])
        diagnostics.log_row(3, [])
    first, second = _rows(tmp_path)
    assert float(first["Diagnostics/PolicyLag"]) == 0.5
    assert float(first["Diagnostics/PolicyLagGradientSteps"]) == 2.0
    assert float(second["Diagnostics/PolicyLag"]) == 0.0  # none since the last row
    assert diagnostics.lags == []


def test_first_row_has_no_steps_time_or_updates(tmp_path):
    diagnostics = _diagnostics(tracking=EvalReturns())
    with logger_context(str(tmp_path), 0, "d", {}, override_prefix=True):
        diagnostics.log_first_row([dict(Return=4.0)], eval_time=0.25)
    (row,) = _rows(tmp_path)
    assert row["Diagnostics/Iteration"] == "-1" and row["Diagnostics/CumSteps"] == "0"
    assert float(row["Diagnostics/EvalTime (s)"]) == 0.25
    assert math.isnan(float(row["Diagnostics/StepsPerSecond"]))


def test_state_round_trip_includes_the_tracking():
    diagnostics = _diagnostics()
    diagnostics.store(0, [dict(Return=1.0)], types.SimpleNamespace(loss=[float("nan"), 2.0]))
    state = diagnostics.state()
    assert state["opt_infos"] == {"loss": [None, 2.0]}
    assert state["cum_completed_trajs"] == 1 and len(state["traj_window"]) == 1
    restored = _diagnostics()
    restored.load_state(state)
    assert math.isnan(restored.opt_infos["loss"][0]) and restored.opt_infos["loss"][1] == 2.0
    assert restored.cum_completed_trajs == 1 and len(restored.tracking.window) == 1
    assert restored.result(itrs_done=1)["cum_steps"] == 100  # the window's: planned steps


def test_nan_survives_the_snapshot_as_none():
    assert nan_to_none(float("nan")) is None and nan_to_none(2) == 2.0
    assert math.isnan(none_to_nan(None)) and none_to_nan(3) == 3.0
