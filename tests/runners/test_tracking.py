"""Performance tracking: the window of training trajectories (online) and the record of
evaluations (offline), their results, stop_return and their snapshot state."""
from __future__ import annotations

import math

from rlfast.runners.tracking import EvalReturns, TrainTrajWindow
from rlfast.utils.logging import logger_context


def _trajs(*returns):
    return [dict(Return=r, Length=10) for r in returns]


def test_window_keeps_the_last_trajectories_and_counts_new_ones(tmp_path):
    window = TrainTrajWindow(log_traj_window=3)
    assert math.isnan(window.last_return)
    window.add(_trajs(1.0, 2.0))
    window.add(_trajs(3.0, 4.0))
    assert [t["Return"] for t in window.window] == [2.0, 3.0, 4.0]
    with logger_context(str(tmp_path), 0, "t", {}, override_prefix=True):
        row = window.row_trajs()
    assert list(row) == list(window.window)
    assert window.last_return == 3.0
    assert window.new_completed == 0  # restarted by the row
    result = window.result(n_itr=5, itrs_done=2, itr_batch_size=8)
    assert result == dict(final_return=3.0, n_itr=5, cum_steps=40)  # the planned steps


def test_an_empty_window_keeps_the_last_return(tmp_path):
    window = TrainTrajWindow(2)
    with logger_context(str(tmp_path), 0, "t", {}, override_prefix=True):
        window.row_trajs()
    assert math.isnan(window.last_return)


def test_window_state_round_trip():
    window = TrainTrajWindow(2)
    window.add(_trajs(1.0, 5.0, 7.0))
    state = window.state()
    assert state["last_return"] is None  # NaN is saved as None
    restored = TrainTrajWindow(2)
    restored.load_state(state)
    assert list(restored.window) == list(window.window)
    assert restored.new_completed == 3 and math.isnan(restored.last_return)


def test_evaluations_are_recorded_with_their_steps():
    record = EvalReturns()
    assert record.record(0, _trajs(1.0, 3.0)) == 2.0
    assert math.isnan(record.record(64, []))  # no episode completed: no score
    assert record.eval_returns[0] == (0, 2.0)
    assert record.eval_returns[1][0] == 64 and math.isnan(record.eval_returns[1][1])
    result = record.result(n_itr=10, itrs_done=4, itr_batch_size=16)
    assert result["cum_steps"] == 64  # the iterations done (an early stop trains fewer)
    assert result["n_itr"] == 10 and len(result["eval_returns"]) == 2


def test_stop_return(tmp_path):
    record = EvalReturns()
    with logger_context(str(tmp_path), 0, "t", {}, override_prefix=True):
        record.record(32, _trajs(10.0))
        assert not record.stop_reached(None, 32)
        assert not record.stop_reached(10.5, 32)
        assert record.stop_reached(10.0, 32)
        record.record(64, [])
        assert not record.stop_reached(-1e9, 64)  # NaN never reaches it
    assert "reached stop_return 10.0: stopping after 32 steps" in (
        tmp_path / "debug.log").read_text()


def test_train_returns_make_the_next_rows_column_and_restart(tmp_path):
    record = EvalReturns()
    record.add(_trajs(1.0, 2.0))
    with logger_context(str(tmp_path), 0, "t", {}, override_prefix=True):
        record.record_columns(_trajs(5.0))
    assert record.train_returns == []


def test_eval_state_round_trip():
    record = EvalReturns()
    record.record(0, [])
    record.record(8, _trajs(4.0))
    record.add(_trajs(2.0))
    restored = EvalReturns()
    restored.load_state(record.state())
    assert restored.eval_returns[1] == (8, 4.0) and math.isnan(restored.eval_returns[0][1])
    assert restored.last_eval_return == 4.0 and restored.train_returns == [2.0]
