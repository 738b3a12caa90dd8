"""A log directory that holds a run is never reused silently, and one that cannot be written
is a one-line error before anything starts: from the command line and from
``logger_context``."""
import datetime as real_datetime
import os
import subprocess
import sys

import pytest

from rlfast.cli import main
from rlfast.experiments.run_dir import check_log_dir
from rlfast.experiments.config import ConfigError
from rlfast.runners import MinibatchRlEval
from rlfast.utils.logging import logger, logger_context
from rlfast.utils.logging import context as context_module
from rlfast.utils.logging.context import ExistingRunError, find_run_files, remove_run_files

QUICK = ["--steps", "128", "--sampler", "serial", "--n-envs", "2", "--no-progress",
         "--set", "sampler.batch_T=32", "--set", "runner.log_interval_steps=64",
         "--set", "sampler.eval_n_envs=1", "--set", "sampler.eval_max_steps=50"]


def _earlier_run(path):
    """A directory with the outputs of an earlier run, a user's file and a subdirectory."""
    path.mkdir(parents=True)
    files = {"progress.csv": "a,b\n1,2\n", "debug.log": "earlier run\n",
             "params.json": "{}\n", "params.pkl": "snapshot", "itr_3.pkl": "old snapshot",
             "params.pkl.sha256": "digest", ".params.pkl.0123abcd4567.tmp": "partial",
             "events.out.tfevents.1.host": "tb", "notes.txt": "mine"}
    for name, text in files.items():
        (path / name).write_text(text)
    (path / "plots").mkdir()
    (path / "plots" / "progress.csv").write_text("kept\n")
    return {name: (path / name).read_text() for name in files}


def _no_training(monkeypatch):
    def refuse(self):
        raise AssertionError("training started although the log dir was refused")

    monkeypatch.setattr(MinibatchRlEval, "train", refuse)


@pytest.mark.parametrize("marker", ["progress.csv", "debug.log", "params.json", "itr_7.pkl"])
def test_cli_refuses_a_log_dir_that_holds_a_run(tmp_path, capsys, monkeypatch, marker):
    _no_training(monkeypatch)
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / marker).write_text("earlier")
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(run_dir), *QUICK]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("rlfast: error: --log-dir ")
    assert f"{run_dir} already holds a run ({marker})" in err
    assert "--overwrite" in err and "another --log-dir" in err
    assert "resume" not in err  # not a command yet
    assert sorted(os.listdir(run_dir)) == [marker]
    assert (run_dir / marker).read_text() == "earlier"


def test_cli_refusal_keeps_every_file_and_message_lists_them(tmp_path, capsys, monkeypatch):
    _no_training(monkeypatch)
    before = _earlier_run(tmp_path / "run")
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(tmp_path / "run"), *QUICK]) == 2
    err = capsys.readouterr().err
    assert "(debug.log, itr_3.pkl, params.json, params.pkl, progress.csv)" in err
    assert {name: (tmp_path / "run" / name).read_text() for name in before} == before


def test_cli_second_run_is_refused_and_first_run_intact(tmp_path, capsys):
    run_dir = tmp_path / "run"
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(run_dir), *QUICK]) == 0
    first = {p.name: p.read_bytes() for p in run_dir.iterdir()}
    assert {"progress.csv", "debug.log", "params.json", "params.pkl"} <= set(first)
    capsys.readouterr()
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(run_dir), *QUICK,
                 "--seed", "5"]) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir()} == first


def test_cli_overwrite_replaces_only_the_earlier_runs_files(tmp_path, capsys):
    run_dir = tmp_path / "run"
    _earlier_run(run_dir)
    assert main(["train", "ppo", "CartPole-v1", "--log-dir", str(run_dir), "--overwrite",
                 *QUICK]) == 0
    names = sorted(p.name for p in run_dir.iterdir())
    assert names == ["debug.log", "notes.txt", "params.json", "params.pkl", "plots",
                     "progress.csv"]
    assert "earlier run" not in (run_dir / "debug.log").read_text()
    assert (run_dir / "debug.log").read_text().count("Training complete.") == 1
    rows = (run_dir / "progress.csv").read_text().splitlines()
    assert rows[0].startswith("Diagnostics/") and len(rows) == 1 + 3  # eval rows 0, 64, 128
    assert (run_dir / "notes.txt").read_text() == "mine"
    assert (run_dir / "plots" / "progress.csv").read_text() == "kept\n"


class _FixedClock:
    """Stands in for the ``datetime`` module: ``datetime.now()`` is always the same."""

    class datetime:
        @staticmethod
        def now():
            return real_datetime.datetime(2024, 5, 6, 7, 8, 9)


def test_default_date_stamped_dir_is_checked_too(tmp_path, capsys, monkeypatch):
    _no_training(monkeypatch)
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(context_module, "datetime", _FixedClock)
    run_dir = tmp_path / "local" / "20240506" / "070809" / "ppo_CartPole-v1" / "run_0"
    run_dir.mkdir(parents=True)
    (run_dir / "progress.csv").write_text("x\n1\n")
    assert main(["train", "ppo", "CartPole-v1", *QUICK]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"rlfast: error: log directory {run_dir} already holds a run")
    # The library refuses it as well.
    with pytest.raises(ExistingRunError):
        with logger_context("ppo_CartPole-v1", 0, "x"):
            pass


def test_logger_context_refuses_an_existing_run(tmp_path):
    exp = tmp_path / "exp"
    before = _earlier_run(exp)
    with pytest.raises(FileExistsError, match="already holds a run.*overwrite=True"):
        with logger_context(str(exp), 0, "x", override_prefix=True, snapshot_mode="last"):
            raise AssertionError("not reached")
    assert issubclass(ExistingRunError, FileExistsError)
    assert {name: (exp / name).read_text() for name in before} == before
    assert logger.get_text_outputs() == [] and logger.get_snapshot_dir() is None


def test_logger_context_overwrite_starts_clean(tmp_path):
    exp = tmp_path / "exp"
    _earlier_run(exp)
    with logger_context(str(exp), 0, "x", override_prefix=True, snapshot_mode="last",
                        overwrite=True):
        logger.log("second run")
        logger.record_tabular("Itr", 0)
        logger.dump_tabular()
    assert sorted(p.name for p in exp.iterdir()) == ["debug.log", "notes.txt", "params.json",
                                                     "plots", "progress.csv"]
    assert "earlier run" not in (exp / "debug.log").read_text()
    assert (exp / "progress.csv").read_text().splitlines() == ["Itr", "0"]


def test_logger_context_accepts_empty_or_foreign_dirs_and_nesting(tmp_path):
    exp = tmp_path / "exp"
    exp.mkdir()
    (exp / "README.txt").write_text("not a run")
    (exp / "sub").mkdir()
    (exp / "sub" / "progress.csv").write_text("a run in a subdirectory is another run\n")
    with logger_context(str(exp), 0, "outer", override_prefix=True):
        logger.log("outer")
        # A context nested in the one already logging here continues that run.
        with logger_context(str(exp), 0, "inner", override_prefix=True):
            logger.log("inner")
    text = (exp / "debug.log").read_text()
    assert "outer" in text and "inner" in text


def test_find_and_remove_run_files(tmp_path):
    assert find_run_files(tmp_path / "missing") == []
    _earlier_run(tmp_path / "d")
    assert find_run_files(tmp_path / "d") == ["debug.log", "itr_3.pkl", "params.json",
                                              "params.pkl", "progress.csv"]
    removed = remove_run_files(tmp_path / "d")
    assert sorted(removed) == sorted([".params.pkl.0123abcd4567.tmp", "debug.log",
                                      "events.out.tfevents.1.host", "itr_3.pkl", "params.json",
                                      "params.pkl", "params.pkl.sha256", "progress.csv"])
    assert sorted(os.listdir(tmp_path / "d")) == ["notes.txt", "plots"]


def _unwritable_dirs(tmp_path):
    """Directories rlfast cannot write to, whatever user runs the tests."""
    regular_file = tmp_path / "a_file"
    regular_file.write_text("")
    cases = [(str(regular_file / "sub"), "Not a directory"),
             (str(regular_file), "is not a directory"),
             ("/proc/rlfast-no-such-dir/run", "No such file or directory")]
    if os.geteuid() != 0:  # root ignores permission bits
        read_only = tmp_path / "read_only"
        read_only.mkdir()
        read_only.chmod(0o500)
        cases.append((str(read_only / "run"), "Permission denied"))
    return cases


def test_cli_unwritable_log_dir_is_a_one_line_error(tmp_path, capsys, monkeypatch):
    _no_training(monkeypatch)
    try:
        for log_dir, reason in _unwritable_dirs(tmp_path):
            assert main(["train", "ppo", "CartPole-v1", "--log-dir", log_dir, *QUICK]) == 2
            err = capsys.readouterr().err
            assert err.count("\n") == 1 and err.startswith("rlfast: error: "), err
            assert log_dir in err and reason in err, err
    finally:
        if (tmp_path / "read_only").exists():
            (tmp_path / "read_only").chmod(0o700)


def test_cli_unwritable_log_dir_no_traceback_in_a_real_process(tmp_path):
    log_dir = str(tmp_path / "a_file" / "sub")
    (tmp_path / "a_file").write_text("")
    done = subprocess.run([sys.executable, "-m", "rlfast", "train", "ppo", "CartPole-v1",
                           "--log-dir", log_dir], capture_output=True, text=True, timeout=300,
                          cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == f"rlfast: error: cannot write to --log-dir {log_dir}: Not a directory\n"


def test_log_dir_check_leaves_no_trace(tmp_path):
    target = tmp_path / "new" / "deeper" / "run"
    check_log_dir(str(target))
    assert os.listdir(tmp_path) == []
    existing = tmp_path / "existing"
    existing.mkdir()
    check_log_dir(str(existing))
    assert os.listdir(existing) == []
    (existing / "params.json").write_text("{}")
    with pytest.raises(ConfigError, match="already holds a run"):
        check_log_dir(str(existing))
    check_log_dir(str(existing), overwrite=True)
    assert os.listdir(existing) == ["params.json"]  # the check itself deletes nothing
