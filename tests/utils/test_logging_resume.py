"""Logging for resumed runs: TabularCsvFile in append mode, snapshot sidecar files,
logger_context(resume=...), and the console modes with their one-line summaries."""
import json
import math
import os
import re

import numpy as np
import pytest

from rlfast.utils.finite import NonFiniteError
from rlfast.utils.logging import load_snapshot, logger, logger_context
from rlfast.utils.logging.console import (HEADER_EVERY, format_duration, summary_header,
                                          summary_line)
from rlfast.utils.logging.context import ExistingRunError
from rlfast.utils.logging.tabular_csv import TabularCsvFile
from tests.utils._logging import clean_logger, read_csv  # noqa: F401 - autouse fixture




def write_rows(path, rows):
    out = TabularCsvFile(path)
    for row in rows:
        out.write_row(row)
    out.close()


# ----------------------------------------------------------------------- TabularCsvFile

def test_append_keeps_rows_drops_rejected_and_keeps_header(tmp_path):
    path = tmp_path / "progress.csv"
    write_rows(path, [dict(itr=i, loss=i * 0.5) for i in range(5)])
    out = TabularCsvFile(path, append=True, keep_row=lambda row: int(row["itr"]) <= 2)
    assert out.dropped_rows == 2
    assert out.fieldnames == ["itr", "loss"]
    assert read_csv(path) == (["itr", "loss"], [["0", "0.0"], ["1", "0.5"], ["2", "1.0"]])
    out.write_row(dict(loss=9.5, itr=3))  # other key order: aligned by the header
    out.write_row(dict(itr=4))  # a missing key: empty cell
    out.close()
    assert read_csv(path) == (["itr", "loss"], [["0", "0.0"], ["1", "0.5"], ["2", "1.0"],
                                                ["3", "9.5"], ["4", ""]])


def test_append_then_new_key_expands_header_over_old_and_new_rows(tmp_path):
    path = tmp_path / "progress.csv"
    write_rows(path, [dict(a=1, b=2), dict(a=3, b=4), dict(a=5, b=6)])
    out = TabularCsvFile(path, append=True, keep_row=lambda row: row["a"] != "3")
    assert out.dropped_rows == 1
    out.write_row(dict(a=7, b=8))
    out.write_row(dict(c=0.25, a=9, b=10))
    out.write_row(dict(b=12, c=0.5))
    out.close()
    header, rows = read_csv(path)
    assert header == ["a", "b", "c"]
    assert rows == [["1", "2", ""], ["5", "6", ""], ["7", "8", ""], ["9", "10", "0.25"],
                    ["", "12", "0.5"]]


def test_append_without_keep_row_keeps_everything_untouched(tmp_path):
    path = tmp_path / "progress.csv"
    write_rows(path, [dict(a=1, b="x,y"), dict(a=2, b='q"z')])
    before = path.read_bytes()
    out = TabularCsvFile(path, append=True)
    assert out.dropped_rows == 0
    assert path.read_bytes() == before  # not rewritten
    out.write_row(dict(a=3, b="w"))
    out.close()
    assert read_csv(path) == (["a", "b"], [["1", "x,y"], ["2", 'q"z'], ["3", "w"]])


def test_keep_row_keeping_all_rows_does_not_rewrite(tmp_path):
    path = tmp_path / "progress.csv"
    write_rows(path, [dict(a=1), dict(a=2)])
    mtime = os.stat(path).st_mtime_ns
    inode = os.stat(path).st_ino
    out = TabularCsvFile(path, append=True, keep_row=lambda row: True)
    out.close()
    assert out.dropped_rows == 0
    assert (os.stat(path).st_mtime_ns, os.stat(path).st_ino) == (mtime, inode)


def test_append_to_missing_file_starts_fresh(tmp_path):
    path = tmp_path / "sub" / "progress.csv"
    out = TabularCsvFile(path, append=True, keep_row=lambda row: False)
    assert out.dropped_rows == 0 and out.fieldnames == []
    out.write_row(dict(x=1, y=2))
    out.close()
    assert read_csv(path) == (["x", "y"], [["1", "2"]])


def test_append_dropping_every_row_keeps_header(tmp_path):
    path = tmp_path / "progress.csv"
    write_rows(path, [dict(a=1, b=2), dict(a=2, b=3)])
    out = TabularCsvFile(path, append=True, keep_row=lambda row: False)
    assert out.dropped_rows == 2
    assert read_csv(path) == (["a", "b"], [])
    out.write_row(dict(b=5, a=4))
    out.close()
    assert read_csv(path) == (["a", "b"], [["4", "5"]])


def test_without_append_the_file_is_truncated(tmp_path):
    path = tmp_path / "progress.csv"
    write_rows(path, [dict(a=1)])
    out = TabularCsvFile(path)
    out.write_row(dict(z=0))
    out.close()
    assert read_csv(path) == (["z"], [["0"]])


# ----------------------------------------------------------------------- sidecars

def _writer(content, calls=None):
    def write(f):
        if calls is not None:
            calls.append(content)
        f.write(content)
    return write


def _files(path):
    return sorted(os.listdir(path))


def test_sidecar_written_named_and_old_one_removed(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    path = logger.save_itr_params(4, dict(itr=4), sidecars={"replay.npz": _writer(b"four")})
    assert path == str(tmp_path / "params.pkl")
    assert (tmp_path / "params.pkl.4.replay.npz").read_bytes() == b"four"
    assert load_snapshot(path)["sidecar_files"] == {"replay.npz": "params.pkl.4.replay.npz"}

    logger.save_itr_params(5, dict(itr=5), sidecars={"replay.npz": _writer(b"five")})
    assert _files(tmp_path) == ["params.pkl", "params.pkl.5.replay.npz"]
    assert (tmp_path / "params.pkl.5.replay.npz").read_bytes() == b"five"
    snapshot = load_snapshot(path)
    assert snapshot["itr"] == 5
    assert snapshot["sidecar_files"] == {"replay.npz": "params.pkl.5.replay.npz"}


def test_several_sidecars_and_unrelated_files_kept(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    for name in ("params.pkl.notes.replay.npz", "params.pkl.1.other.npz", "mine.replay.npz",
                 "itr_1.pkl.1.replay.npz"):
        (tmp_path / name).write_bytes(b"keep")
    sidecars = {"replay.npz": _writer(b"r1"), "extra.bin": _writer(b"e1")}
    logger.save_itr_params(1, dict(itr=1), sidecars=sidecars)
    sidecars = {"replay.npz": _writer(b"r2"), "extra.bin": _writer(b"e2")}
    logger.save_itr_params(2, dict(itr=2), sidecars=sidecars)
    assert load_snapshot(tmp_path / "params.pkl")["sidecar_files"] == {
        "replay.npz": "params.pkl.2.replay.npz", "extra.bin": "params.pkl.2.extra.bin"}
    assert _files(tmp_path) == sorted(
        ["params.pkl", "params.pkl.2.replay.npz", "params.pkl.2.extra.bin",
         "params.pkl.notes.replay.npz", "params.pkl.1.other.npz", "mine.replay.npz",
         "itr_1.pkl.1.replay.npz"])


def test_mode_all_each_snapshot_keeps_its_own_sidecar(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("all")
    for itr in range(3):
        logger.save_itr_params(itr, dict(itr=itr),
                               sidecars={"replay.npz": _writer(f"r{itr}".encode())})
    assert _files(tmp_path) == sorted(
        [f"itr_{i}.pkl" for i in range(3)] + [f"itr_{i}.pkl.{i}.replay.npz" for i in range(3)])
    for itr in range(3):
        snapshot = load_snapshot(tmp_path / f"itr_{itr}.pkl")
        side = snapshot["sidecar_files"]["replay.npz"]
        assert side == f"itr_{itr}.pkl.{itr}.replay.npz"
        assert (tmp_path / side).read_bytes() == f"r{itr}".encode()


def test_sidecar_not_written_when_no_snapshot_is(tmp_path):
    calls = []
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("gap")
    logger.set_snapshot_gap(2)
    assert logger.save_itr_params(1, dict(itr=1),
                                  sidecars={"replay.npz": _writer(b"x", calls)}) is None
    logger.set_snapshot_mode("none")
    logger.save_itr_params(2, dict(itr=2), sidecars={"replay.npz": _writer(b"x", calls)})
    logger.set_snapshot_mode("last")
    logger.set_muted(True)
    logger.save_itr_params(3, dict(itr=3), sidecars={"replay.npz": _writer(b"x", calls)})
    logger.set_muted(False)
    with pytest.raises(NonFiniteError):
        logger.save_itr_params(4, dict(w=np.array([np.nan])),
                               sidecars={"replay.npz": _writer(b"x", calls)})
    assert calls == [] and _files(tmp_path) == []
    logger.set_snapshot_mode("gap")
    logger.save_itr_params(2, dict(itr=2), sidecars={"replay.npz": _writer(b"x", calls)})
    assert calls == [b"x"]
    assert _files(tmp_path) == ["itr_2.pkl", "itr_2.pkl.2.replay.npz"]


def test_failing_sidecar_leaves_previous_snapshot_and_sidecar(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    logger.save_itr_params(0, dict(itr=0), sidecars={"replay.npz": _writer(b"zero")})

    def broken(f):
        f.write(b"partial")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        logger.save_itr_params(1, dict(itr=1), sidecars={"replay.npz": broken})
    assert _files(tmp_path) == ["params.pkl", "params.pkl.0.replay.npz"]
    snapshot = load_snapshot(tmp_path / "params.pkl")
    assert snapshot["itr"] == 0
    assert snapshot["sidecar_files"] == {"replay.npz": "params.pkl.0.replay.npz"}
    assert (tmp_path / "params.pkl.0.replay.npz").read_bytes() == b"zero"


def test_snapshot_without_sidecars_has_no_sidecar_entry(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    logger.save_itr_params(0, dict(itr=0), sidecars={})
    assert "sidecar_files" not in load_snapshot(tmp_path / "params.pkl")


# ----------------------------------------------------------------------- resume context

def _first_run(exp_dir, n_itr=6):
    with logger_context(exp_dir, 0, "exp", log_params=dict(lr=0.1), override_prefix=True,
                        snapshot_mode="last"):
        logger.log("first run line")
        logger.record_tabular("Diagnostics/Iteration", -1)  # the pre-training evaluation
        logger.record_tabular("Return", 0.0)
        logger.dump_tabular()
        for itr in range(n_itr):
            logger.record_tabular("Diagnostics/Iteration", itr)
            logger.record_tabular("Return", float(itr))
            logger.dump_tabular()
            logger.save_itr_params(itr, dict(itr=itr))


def _iterations(exp_dir):
    header, rows = read_csv(os.path.join(exp_dir, "progress.csv"))
    col = header.index("Diagnostics/Iteration")
    return header, [row[col] for row in rows]


def test_resume_appends_log_and_keeps_rows_up_to_itr(tmp_path, capsys):
    exp_dir = str(tmp_path / "run")
    _first_run(exp_dir)
    with logger_context(exp_dir, 0, "exp", log_params=dict(lr=0.2), override_prefix=True,
                        snapshot_mode="last", resume=dict(itr=2, cum_steps=300)) as d:
        assert d == exp_dir
        assert _iterations(exp_dir) == (["Diagnostics/Iteration", "Return"],
                                        ["-1", "0", "1", "2"])
        logger.log("resumed run line")
        for itr in (3, 4):
            logger.record_tabular("Diagnostics/Iteration", itr)
            logger.record_tabular("Return", 10.0 + itr)
            logger.dump_tabular()
    header, rows = read_csv(os.path.join(exp_dir, "progress.csv"))
    assert header == ["Diagnostics/Iteration", "Return"]
    assert rows == [["-1", "0.0"], ["0", "0.0"], ["1", "1.0"], ["2", "2.0"], ["3", "13.0"],
                    ["4", "14.0"]]
    log = open(os.path.join(exp_dir, "debug.log")).read()
    assert "first run line" in log and "resumed run line" in log
    assert log.index("first run line") < log.index("resumed run line")
    params = json.load(open(os.path.join(exp_dir, "params.json")))
    assert params["lr"] == 0.2 and params["name"] == "exp"
    assert os.path.isfile(os.path.join(exp_dir, "params.pkl"))  # snapshots untouched


def test_resume_keeps_rows_without_iteration(tmp_path):
    exp_dir = str(tmp_path / "run")
    with logger_context(exp_dir, 0, "exp", override_prefix=True):
        logger.record_tabular("Return", 1.0)  # no Diagnostics/Iteration at all
        logger.dump_tabular()
        for itr in range(4):
            logger.record_tabular("Return", 2.0)
            logger.record_tabular("Diagnostics/Iteration", itr)
            logger.dump_tabular()
    with logger_context(exp_dir, 0, "exp", override_prefix=True,
                        resume=dict(itr=0, cum_steps=10)):
        pass
    header, rows = read_csv(os.path.join(exp_dir, "progress.csv"))
    assert header == ["Return", "Diagnostics/Iteration"]
    assert rows == [["1.0", ""], ["2.0", "0"]]


def test_resume_then_new_key_expands_header(tmp_path):
    exp_dir = str(tmp_path / "run")
    _first_run(exp_dir, n_itr=3)
    with logger_context(exp_dir, 0, "exp", override_prefix=True,
                        resume=dict(itr=1, cum_steps=10)):
        logger.record_tabular("Diagnostics/Iteration", 2)
        logger.record_tabular("Return", 5.0)
        logger.record_tabular("NewKey", 7)
        logger.dump_tabular()
    header, rows = read_csv(os.path.join(exp_dir, "progress.csv"))
    assert header == ["Diagnostics/Iteration", "Return", "NewKey"]
    assert rows == [["-1", "0.0", ""], ["0", "0.0", ""], ["1", "1.0", ""], ["2", "5.0", "7"]]


def test_resume_refuses_a_directory_without_run(tmp_path):
    with pytest.raises(FileNotFoundError, match="no run to resume"):
        with logger_context(str(tmp_path / "nothing"), 0, "exp", override_prefix=True,
                            resume=dict(itr=0, cum_steps=0)):
            pass
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.txt").write_text("not a run")
    with pytest.raises(FileNotFoundError, match="no run to resume"):
        with logger_context(str(tmp_path / "empty"), 0, "exp", override_prefix=True,
                            resume=dict(itr=0, cum_steps=0)):
            pass
    assert os.listdir(tmp_path / "empty") == ["notes.txt"]
    assert logger.get_text_outputs() == [] and logger.get_tabular_outputs() == []


def test_without_resume_an_existing_run_is_still_refused(tmp_path):
    exp_dir = str(tmp_path / "run")
    _first_run(exp_dir, n_itr=1)
    with pytest.raises(ExistingRunError):
        with logger_context(exp_dir, 0, "exp", override_prefix=True):
            pass


# ----------------------------------------------------------------------- console modes

def _record_row():
    logger.record_tabular("Diagnostics/Iteration", 3)
    logger.record_tabular("Diagnostics/CumSteps", 4096)
    logger.record_tabular("ReturnAverage", 12.5)
    logger.record_tabular("SomeOtherDiagnostic", 0.125)


def test_lines_mode_prints_header_and_summary_full_table_to_debug_log(tmp_path, capsys):
    logger.add_text_output(tmp_path / "debug.log")
    logger.set_console_mode("lines")
    _record_row()
    row = dict(logger._tabular)
    logger.dump_tabular()
    out = capsys.readouterr().out
    assert out.splitlines() == [summary_header(), summary_line(row)]
    assert "SomeOtherDiagnostic" not in out
    log = (tmp_path / "debug.log").read_text()
    for key in row:
        assert key in log
    assert "0.125" in log
    # The next row: only its summary line (the header comes every HEADER_EVERY rows).
    _record_row()
    logger.dump_tabular()
    assert len(capsys.readouterr().out.splitlines()) == 1


def test_lines_mode_header_repeats_every_header_every_rows(capsys):
    logger.set_console_mode("lines")
    for _ in range(HEADER_EVERY + 1):
        _record_row()
        logger.dump_tabular()
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == HEADER_EVERY + 3
    assert [i for i, line in enumerate(lines) if line == summary_header()] == [0,
                                                                               HEADER_EVERY + 1]


def test_lines_mode_log_reaches_stdout_only_with_console_flag(tmp_path, capsys):
    logger.add_text_output(tmp_path / "debug.log")
    logger.set_console_mode("lines")
    logger.log("quiet line")
    logger.log("loud line", console=True)
    out = capsys.readouterr().out
    assert "loud line" in out and "quiet line" not in out
    log = (tmp_path / "debug.log").read_text()
    assert "quiet line" in log and "loud line" in log


def test_tables_mode_prints_table_and_every_log_line(tmp_path, capsys):
    logger.add_text_output(tmp_path / "debug.log")
    logger.set_console_mode("tables")
    logger.log("plain line")
    _record_row()
    logger.dump_tabular()
    out = capsys.readouterr().out
    assert "plain line" in out
    assert "SomeOtherDiagnostic" in out and "0.125" in out
    assert summary_header() not in out


def test_bad_console_mode_refused():
    with pytest.raises(ValueError, match="console"):
        logger.set_console_mode("verbose")


def test_logger_context_console_mode_set_and_restored(tmp_path, capsys):
    assert logger.get_console_mode() == "tables"
    with logger_context(str(tmp_path / "a"), 0, "exp", override_prefix=True):
        assert logger.get_console_mode() == "lines"
        logger.log("inside quiet")
        _record_row()
        logger.dump_tabular()
    out = capsys.readouterr().out
    assert "inside quiet" not in out and summary_header() in out
    assert logger.get_console_mode() == "tables"
    with logger_context(str(tmp_path / "b"), 0, "exp", override_prefix=True,
                        console="tables"):
        logger.log("inside loud")
    assert "inside loud" in capsys.readouterr().out
    with pytest.raises(ValueError, match="console"):
        with logger_context(str(tmp_path / "c"), 0, "exp", override_prefix=True,
                            console="quiet"):
            pass
    assert logger.get_console_mode() == "tables"


# ----------------------------------------------------------------------- summary line

def _cells(line):
    """The cells of a summary line (cells are separated by at least two spaces)."""
    return re.split(r"\s{2,}", line.strip())


def test_summary_line_eval_row():
    row = {"Diagnostics/Iteration": 9, "Diagnostics/CumSteps": 1234567,
           "Diagnostics/StepsPerSecond": 1500.4, "Diagnostics/NumEvalTrajs": 10,
           "ReturnAverage": 195.5, "ReturnStd": 3.25, "Diagnostics/TrainReturn": 180.25,
           "lossAverage": 0.0123456, "Diagnostics/CumTime (s)": 187.0,
           "Diagnostics/ETA (s)": 7500.0}
    line = summary_line(row)
    assert _cells(line) == ["1,234,567", "1,500", "195.50 ± 3.25", "180.25", "0.01235",
                            "3m07s", "2h05m"]
    assert _cells(summary_header()) == ["steps", "SPS", "eval return (mean ± std)",
                                        "train return", "loss", "time", "ETA"]


def test_summary_line_online_row_uses_return_average_as_train_return():
    row = {"Diagnostics/CumSteps": 2048, "Diagnostics/StepsPerSecond": 99.6,
           "ReturnAverage": -21.0, "ReturnStd": 1.5, "Diagnostics/TrainReturn": 999.0,
           "qLossAverage": 2.5, "Diagnostics/CumTime (s)": 42.0}
    assert _cells(summary_line(row)) == ["2,048", "100", "-", "-21.00", "2.5", "42s", "-"]


def test_summary_line_missing_and_non_finite_values_are_dashes():
    assert _cells(summary_line({})) == ["-"] * 7
    row = {"Diagnostics/NumEvalTrajs": 0, "ReturnAverage": math.nan, "ReturnStd": math.nan,
           "Diagnostics/CumSteps": math.inf, "lossAverage": math.nan, "qLossAverage": 0.5,
           "Diagnostics/StepsPerSecond": "fast", "Diagnostics/CumTime (s)": True}
    assert _cells(summary_line(row)) == ["-", "-", "-", "-", "0.5", "-", "-"]


def test_summary_line_numpy_scalars_and_alignment():
    row = {"Diagnostics/CumSteps": np.int64(300), "Diagnostics/NumEvalTrajs": np.int64(5),
           "ReturnAverage": np.float64(-3.125), "ReturnStd": np.float32(0.5),
           "Diagnostics/TrainReturn": np.float32(-4.0), "LossAverage": np.float64(12345.678),
           "Diagnostics/ETA (s)": np.float64(3 * 86400 + 4 * 3600 + 59)}
    line = summary_line(row)
    assert _cells(line) == ["300", "-", "-3.12 ± 0.50", "-4.00", "1.235e+04", "-", "3d04h"]
    assert len(line) == len(summary_header())


@pytest.mark.parametrize("seconds,text", [
    (0, "0s"), (42, "42s"), (42.4, "42s"), (59.6, "1m00s"), (187, "3m07s"), (3599, "59m59s"),
    (3600, "1h00m"), (7500, "2h05m"), (86399, "23h59m"), (86400, "1d00h"),
    (3 * 86400 + 4 * 3600, "3d04h"), (3 * 86400 + 4 * 3600 + 59 * 60, "3d04h"),
    (math.nan, "-"), (math.inf, "-"), (-1, "-")])
def test_format_duration(seconds, text):
    assert format_duration(seconds) == text
