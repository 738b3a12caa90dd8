"""Tests for rlfast.utils.logging: text log, progress CSV, snapshots, logger_context."""
import argparse
import collections
import json
import math
import os
import re
import sys

import numpy as np
import pytest
import torch

from rlfast.utils.finite import NonFiniteError
from rlfast.utils.logging import (add_exp_param, check_progress, load_snapshot, logger,
                                  logger_context)
from rlfast.utils.logging.serialization import atomic_write
from tests.utils._logging import clean_logger, read_csv  # noqa: F401 - autouse fixture




# ------------------------------------------------------------------------------ text

def test_log_writes_stdout_and_text_output_with_prefix_and_timestamp(tmp_path, capsys):
    log_file = tmp_path / "sub" / "debug.log"
    logger.add_text_output(log_file)
    with logger.prefix("itr #3 | "):
        logger.log("hello")
    logger.log("bare", with_prefix=False, with_timestamp=False)
    out = capsys.readouterr().out
    lines = log_file.read_text().splitlines()
    assert lines[0] in out and lines[1] in out
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \| itr #3 \| hello", lines[0])
    assert lines[1] == "bare"
    logger.remove_text_output(log_file)
    logger.log("after removal")
    assert "after removal" not in log_file.read_text()


def test_log_color_only_on_terminal_copy_and_bad_color(tmp_path, capsys):
    logger.add_text_output(tmp_path / "debug.log")
    logger.log("warn", with_timestamp=False, color="red")
    assert "\x1b[31mwarn" in capsys.readouterr().out
    assert (tmp_path / "debug.log").read_text() == "warn\n"
    with pytest.raises(ValueError, match="purple"):
        logger.log("x", color="purple")


def test_log_tabular_only_and_disable_prefix(tmp_path, capsys):
    logger.set_log_tabular_only(True)
    assert logger.get_log_tabular_only()
    logger.log("hidden")
    logger.record_tabular("Shown", 1)
    logger.dump_tabular(with_timestamp=False)
    out = capsys.readouterr().out
    assert "hidden" not in out and "Shown" in out
    logger.set_log_tabular_only(False)
    logger.set_disable_prefix(True)
    logger.push_prefix("PFX ")
    logger.log("msg", with_timestamp=False)
    assert capsys.readouterr().out == "msg\n"
    logger.pop_prefix()
    with pytest.raises(IndexError):
        logger.pop_prefix()
    with pytest.raises(IndexError):
        logger.pop_tabular_prefix()


# --------------------------------------------------------------------------- tabular

def test_csv_columns_and_rows_flushed_each_dump(tmp_path):
    path = tmp_path / "progress.csv"
    logger.add_tabular_output(path)
    for itr in range(3):
        logger.record_tabular("Diagnostics/Iteration", itr)
        logger.record_tabular("Loss", np.float32(0.5 * itr))
        logger.record_tabular("Value", torch.tensor(float(itr) + 0.25))
        logger.dump_tabular()
        header, rows = read_csv(path)  # Readable before the output is closed.
        assert len(rows) == itr + 1
    assert header == ["Diagnostics/Iteration", "Loss", "Value"]
    assert [[int(r[0]), float(r[1]), float(r[2])] for r in rows] == \
        [[i, 0.5 * i, i + 0.25] for i in range(3)]
    logger.dump_tabular()  # Nothing recorded: no row.
    assert len(read_csv(path)[1]) == 3


def test_csv_header_expansion_keeps_columns_aligned(tmp_path):
    path = tmp_path / "progress.csv"
    logger.add_tabular_output(path)
    logger.record_tabular("a", 1)
    logger.dump_tabular()
    logger.record_tabular("a", 2)
    logger.record_tabular("b", 3)
    logger.dump_tabular()
    logger.record_tabular("c", 4)
    logger.dump_tabular()
    logger.record_tabular("b", 5)
    logger.record_tabular("a", 6)
    logger.dump_tabular()
    header, rows = read_csv(path)
    assert header == ["a", "b", "c"]
    assert rows == [["1", "", ""], ["2", "3", ""], ["", "", "4"], ["6", "5", ""]]
    assert not [p for p in os.listdir(tmp_path) if p != "progress.csv"]


def test_tabular_prefix_context():
    with logger.tabular_prefix("Eval/"):
        with logger.tabular_prefix("Pi"):
            logger.record_tabular("Loss", 1.0)
        logger.record_tabular("Return", 2.0)
    logger.record_tabular("Plain", 3.0)
    # Peek through the dump into a fake summary writer.
    writer = FakeWriter()
    logger.set_tf_summary_writer(writer)
    logger.dump_tabular()
    assert [c[0] for c in writer.calls] == ["Eval/PiLoss", "Eval/Return", "Plain"]


def reference_stats(values):
    n = len(values)
    mean = sum(values) / n
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / n)
    s = sorted(values)
    median = s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2
    return dict(Average=mean, Std=std, Median=median, Min=s[0], Max=s[-1])


@pytest.mark.parametrize("values", [[3.0, -1.0, 7.5, 2.0], [4.0, 1.0, 9.0], [5.0]])
def test_record_tabular_misc_stat_matches_reference(tmp_path, values):
    path = tmp_path / "p.csv"
    logger.add_tabular_output(path)
    logger.record_tabular_misc_stat("Return", np.array(values))
    logger.record_tabular_misc_stat("Length", values, placement="front")
    logger.dump_tabular()
    header, rows = read_csv(path)
    got = dict(zip(header, map(float, rows[0])))
    for name, ref in reference_stats(values).items():
        assert got["Return" + name] == pytest.approx(ref, rel=1e-12, abs=1e-12)
        assert got[name + "Length"] == pytest.approx(ref, rel=1e-12, abs=1e-12)
    assert len(header) == 10


def test_record_tabular_misc_stat_empty_is_nan_and_bad_placement(tmp_path):
    path = tmp_path / "p.csv"
    logger.add_tabular_output(path)
    logger.record_tabular_misc_stat("Return", [])
    logger.dump_tabular()
    header, rows = read_csv(path)
    assert header == ["ReturnAverage", "ReturnStd", "ReturnMedian", "ReturnMin", "ReturnMax"]
    assert all(math.isnan(float(v)) for v in rows[0])
    with pytest.raises(ValueError, match="middle"):
        logger.record_tabular_misc_stat("Return", [1.0], placement="middle")


class FakeWriter:
    def __init__(self):
        self.calls = []

    def add_scalar(self, key, val, step):
        self.calls.append((key, val, step))

    def flush(self):
        pass


def test_summary_writer_steps_and_numeric_only():
    writer = FakeWriter()
    logger.set_tf_summary_writer(writer)
    assert logger.get_tf_summary_writer() is writer
    logger.record_tabular("Diagnostics/CumSteps", 1000)
    logger.record_tabular("Loss", np.float64(0.5))
    logger.record_tabular("Name", "text")
    logger.dump_tabular()
    logger.record_tabular("Loss", 0.25)
    logger.dump_tabular()
    assert writer.calls == [("Diagnostics/CumSteps", 1000, 1000), ("Loss", 0.5, 1000),
                            ("Loss", 0.25, 1)]  # Second dump: no CumSteps -> dump count.


# ------------------------------------------------------------------------- snapshots

class Unpicklable:
    def __reduce__(self):
        raise RuntimeError("cannot pickle this")


@pytest.mark.parametrize("mode, expected", [
    ("none", set()),
    ("last", {"params.pkl"}),
    ("all", {f"itr_{i}.pkl" for i in range(5)}),
    ("gap", {"itr_0.pkl", "itr_2.pkl", "itr_4.pkl"}),
])
def test_snapshot_modes(tmp_path, mode, expected):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode(mode)
    logger.set_snapshot_gap(2)
    assert (logger.get_snapshot_dir(), logger.get_snapshot_mode(), logger.get_snapshot_gap()) \
        == (str(tmp_path), mode, 2)
    for itr in range(5):
        logger.save_itr_params(itr, {"itr": itr, "w": torch.full((3,), float(itr))})
    assert set(os.listdir(tmp_path)) == expected
    if mode == "last":
        loaded = load_snapshot(tmp_path / "params.pkl")
        assert loaded["itr"] == 4 and torch.equal(loaded["w"], torch.full((3,), 4.0))
    if mode == "gap":
        assert load_snapshot(tmp_path / "itr_2.pkl")["itr"] == 2


def test_snapshot_bad_settings_and_no_dir(tmp_path):
    with pytest.raises(ValueError, match=r"'none', 'last', 'all', 'gap'.*'sometimes'"):
        logger.set_snapshot_mode("sometimes")
    with pytest.raises(ValueError, match="0"):
        logger.set_snapshot_gap(0)
    logger.set_snapshot_mode("all")
    assert logger.save_itr_params(0, {"a": 1}) is None  # No snapshot dir: nothing saved.
    logger.set_snapshot_dir(tmp_path)
    with pytest.raises(TypeError, match="list"):
        logger.save_itr_params(0, [1, 2])
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("mode", ["last", "all"])
def test_snapshot_save_is_atomic(tmp_path, mode):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode(mode)
    good = {"itr": 0, "w": torch.arange(4.0)}
    first = logger.save_itr_params(0, good)
    before = set(os.listdir(tmp_path))
    with pytest.raises(RuntimeError, match="cannot pickle"):
        logger.save_itr_params(0, {"itr": 1, "w": torch.zeros(1000), "bad": Unpicklable()})
    assert set(os.listdir(tmp_path)) == before  # No temp files, nothing new.
    loaded = load_snapshot(first)
    assert loaded["itr"] == 0 and torch.equal(loaded["w"], good["w"])


def test_next_save_removes_stale_temp_files_of_that_snapshot_only(tmp_path):
    """A save killed mid-write leaves ``.params.pkl.<12 hex>.tmp``; the next save of
    params.pkl removes it, and nothing else."""
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    stale = [".params.pkl.0123456789ab.tmp", ".params.pkl.ffffffffffff.tmp"]
    unrelated = [".params.pkl.0123456789AB.tmp", ".params.pkl.0123456789a.tmp",
                 ".params.pkl.0123456789abc.tmp", ".params.pkl.0123456789ab.tmp.bak",
                 "params.pkl.0123456789ab.tmp", ".itr_3.pkl.0123456789ab.tmp",
                 ".xparams.pkl.0123456789ab.tmp", "notes.txt"]
    for name in stale + unrelated:
        (tmp_path / name).write_bytes(b"partial")
    os.mkdir(tmp_path / ".params.pkl.aaaaaaaaaaaa.tmp")  # A directory is never removed.
    logger.save_itr_params(0, {"itr": 0, "w": torch.ones(2)})
    assert sorted(os.listdir(tmp_path)) == sorted(unrelated + ["params.pkl",
                                                               ".params.pkl.aaaaaaaaaaaa.tmp"])
    assert load_snapshot(tmp_path / "params.pkl")["itr"] == 0


def test_stale_temp_sweep_spares_a_save_in_progress(tmp_path):
    """A temp file this process is writing right now (here: an outer save whose write_fn
    starts a second save of the same file) is not stale and must survive the sweep."""
    target = tmp_path / "params.json"

    def outer(f):
        f.write("outer")
        atomic_write(target, lambda g: g.write("inner"), binary=False)
        assert [n for n in os.listdir(tmp_path) if n.endswith(".tmp")]  # outer's temp file

    atomic_write(target, outer, binary=False)
    assert target.read_text() == "outer" and os.listdir(tmp_path) == ["params.json"]


def test_non_finite_snapshot_is_refused_and_previous_kept(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    good = {"itr": 0, "agent": {"w": torch.arange(3.0), "b": torch.zeros(2)}}
    path = logger.save_itr_params(0, good)
    before = open(path, "rb").read()
    bad = {"itr": 1, "agent": {"w": torch.tensor([1.0, float("nan"), 2.0]), "b": torch.zeros(2)},
           "optim": {"state": {0: {"exp_avg": torch.tensor([float("inf")])}}},
           "steps": torch.arange(3), "lr": 1e-3}
    with pytest.raises(NonFiniteError, match=r"refusing to save snapshot .*params\.pkl "
                                             r"\(iteration 1\): NaN or inf in agent\.w, "
                                             r"optim\.state\.0\.exp_avg; the snapshot file"):
        logger.save_itr_params(1, bad)
    assert open(path, "rb").read() == before and os.listdir(tmp_path) == ["params.pkl"]
    many = {f"w{i}": torch.tensor([float("nan")]) for i in range(10)}
    with pytest.raises(NonFiniteError, match=r"w0, w1, .*w7 and 2 more;"):
        logger.save_itr_params(2, many)
    assert load_snapshot(path)["itr"] == 0


def test_snapshot_digest_key_is_reserved(tmp_path):
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    with pytest.raises(ValueError, match="'snapshot_sha256' is reserved"):
        logger.save_itr_params(0, {"snapshot_sha256": "x"})


def test_log_parameters_lite_json_safe(tmp_path):
    Pair = collections.namedtuple("Pair", "x y")

    class Opaque:
        def __repr__(self):
            return "<Opaque thing>"

    params = dict(cls=torch.optim.Adam, fn=np.mean, lr=np.float32(0.5), n=np.int64(7),
                  arr=np.arange(3), pair=Pair(1, 2), obj=Opaque(), nested={1: (2, 3)},
                  path=tmp_path)
    out = tmp_path / "params.json"
    logger.log_parameters_lite(out, params)
    loaded = json.loads(out.read_text())
    assert loaded["cls"] == "torch.optim.adam.Adam"
    assert loaded["fn"].endswith("mean")
    assert loaded["lr"] == 0.5 and loaded["n"] == 7 and loaded["arr"] == [0, 1, 2]
    assert loaded["pair"] == {"x": 1, "y": 2}
    assert loaded["obj"] == "<Opaque thing>"
    assert loaded["nested"] == {"1": [2, 3]}
    assert loaded["path"] == str(tmp_path)
    logger.log_parameters_lite(out, argparse.Namespace(seed=3))
    assert json.loads(out.read_text()) == {"seed": 3}
    assert os.listdir(tmp_path) == ["params.json"]


# ---------------------------------------------------------------------- logger_context

def test_logger_context_override_prefix_uses_dir_exactly(tmp_path, capsys):
    exp = tmp_path / "my_run"
    logger.set_snapshot_mode("all")
    logger.set_snapshot_gap(5)
    with logger_context(str(exp), 2, "cartpole", log_params={"algo": {"lr": 1e-3}},
                        snapshot_mode="last", override_prefix=True) as exp_dir:
        assert exp_dir == str(exp)
        assert logger.get_snapshot_dir() == str(exp) and logger.get_snapshot_mode() == "last"
        logger.log("inside")
        logger.record_tabular("Diagnostics/Iteration", 0)
        logger.dump_tabular()
        logger.save_itr_params(0, {"x": 1})
    assert sorted(os.listdir(exp)) == ["debug.log", "params.json", "params.pkl", "progress.csv"]
    assert "inside" in (exp / "debug.log").read_text()
    assert read_csv(exp / "progress.csv") == (["Diagnostics/Iteration"], [["0"]])
    assert json.loads((exp / "params.json").read_text()) == \
        {"algo": {"lr": 1e-3}, "name": "cartpole", "run_ID": 2}
    # Everything restored / detached after exit.
    assert logger.get_text_outputs() == [] and logger.get_tabular_outputs() == []
    assert (logger.get_snapshot_dir(), logger.get_snapshot_mode(), logger.get_snapshot_gap()) \
        == (None, "all", 5)
    logger.log("outside")
    assert "outside" not in (exp / "debug.log").read_text()


def test_logger_context_date_stamped_under_env_data_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path / "datadir"))
    with logger_context("example_1", 3, "exp", snapshot_mode="gap", snapshot_gap=2) as exp_dir:
        assert logger.get_snapshot_gap() == 2
    rel = os.path.relpath(exp_dir, tmp_path / "datadir")
    assert re.fullmatch(r"local/\d{8}/\d{6}/example_1/run_3", rel.replace(os.sep, "/"))
    assert os.path.isfile(os.path.join(exp_dir, "params.json"))


def test_logger_context_default_data_dir_is_cwd_data(tmp_path, monkeypatch):
    monkeypatch.delenv("RLFAST_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    with logger_context("e", 0, "exp") as exp_dir:
        pass
    assert exp_dir.startswith(os.path.join(str(tmp_path), "data", "local") + os.sep)
    assert exp_dir.endswith(os.path.join("e", "run_0"))


def test_logger_context_bad_inputs_and_cleanup_on_error(tmp_path):
    with pytest.raises(ValueError, match="override_prefix"):
        with logger_context(str(tmp_path / "abs"), 0, "x"):
            pass
    with pytest.raises(ValueError, match="'often'"):
        with logger_context(str(tmp_path / "d"), 0, "x", snapshot_mode="often",
                            override_prefix=True):
            pass
    assert not (tmp_path / "d").exists()
    with pytest.raises(KeyError):
        with logger_context(str(tmp_path / "e"), 0, "x", snapshot_mode="all",
                            override_prefix=True):
            raise KeyError("boom")
    assert logger.get_text_outputs() == [] and logger.get_snapshot_mode() == "none"


def test_logger_context_tensorboard_events_file(tmp_path):
    pytest.importorskip("tensorboard")
    exp = tmp_path / "tb"
    with logger_context(str(exp), 0, "x", override_prefix=True, use_summary_writer=True):
        assert logger.get_tf_summary_writer() is not None
        for itr in range(2):
            logger.record_tabular("Diagnostics/CumSteps", 100 * itr)
            logger.record_tabular("ReturnAverage", float(itr))
            logger.dump_tabular()
    assert logger.get_tf_summary_writer() is None
    events = [p for p in os.listdir(exp) if p.startswith("events.out.tfevents")]
    assert len(events) == 1 and os.path.getsize(exp / events[0]) > 0


def test_logger_context_tensorboard_missing(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ImportError, match=r"pip install rlfast\[tensorboard\]"):
        with logger_context(str(tmp_path / "x"), 0, "x", override_prefix=True,
                            use_summary_writer=True):
            pass
    assert not (tmp_path / "x").exists()


def test_add_exp_param_and_check_progress(tmp_path, capsys):
    for run in range(2):
        with logger_context(str(tmp_path / f"run_{run}"), run, "e", override_prefix=True):
            for itr in range(run + 2):
                logger.record_tabular("Itr", itr)
                logger.dump_tabular()
    files = [str(tmp_path / f"run_{r}" / "params.json") for r in range(2)]
    assert add_exp_param("label", "A", exp_dir=tmp_path) == files  # Dry run.
    assert "label" not in json.loads(open(files[0]).read())
    assert add_exp_param("label", "A", exp_dir=tmp_path, write=True) == files
    assert all(json.loads(open(f).read())["label"] == "A" for f in files)
    assert add_exp_param("label", "A", exp_dir=tmp_path, write=True) == []  # Already set.
    capsys.readouterr()
    counts = check_progress(tmp_path)
    assert counts == {str(tmp_path / "run_0" / "progress.csv"): 2,
                      str(tmp_path / "run_1" / "progress.csv"): 3}
    assert "run_1" in capsys.readouterr().out
