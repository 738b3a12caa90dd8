"""The local backend of ``run_experiments``: runs queued over the run slots of one machine,
failures reported, Ctrl-C stopping every child."""
import json
import os
import shutil
import signal

import psutil
import pytest

from rlfast.launching import (VariantLevel, affinity_from_code, load_variant, make_variants,
                              prepend_run_slot, run_experiments)
from tests.launching._interrupt import sigint_when_all_exist
from tests.launching._recorder import CODE, children, recorder, two_variants  # noqa: F401


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt in this process while the test runs.

    A non-interactive shell starts background jobs with SIGINT ignored (SIG_IGN), and
    Python keeps an inherited SIG_IGN, so ``os.kill(pid, SIGINT)`` would do nothing when
    the test run is a background job. Install Python's default handler, then restore.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def test_run_experiments_runs_each_once_in_separate_slots(recorder, tmp_path, capsys):
    before = children()
    variants, log_dirs = two_variants()
    log_root = tmp_path / "logs"
    results = run_experiments(recorder, CODE, "exp", 2, variants, log_dirs,
                              common_args=["--common", 7], runs_args=[["--v", "a"], ["--v", "b"]],
                              log_root=str(log_root))
    exp_dir = log_root / "exp"
    assert len(results) == 4
    assert sorted((os.path.basename(r.log_dir), r.run_ID) for r in results) == [
        ("lr_a", 0), ("lr_a", 1), ("lr_b", 0), ("lr_b", 1)]
    assert all(r.returncode == 0 for r in results)
    intervals = {0: [], 1: []}
    expected = {str(exp_dir / d): (tag, v) for d, tag, v in zip(log_dirs, "ab", variants)}
    for r in results:
        tag, variant = expected[r.log_dir]
        with open(os.path.join(r.log_dir, f"record_{r.run_ID}.json")) as f:
            record = json.load(f)
        slot_code = prepend_run_slot(r.slot, CODE)
        assert record["argv"] == [slot_code, r.log_dir, str(r.run_ID), "--common", "7",
                                  "--v", tag]
        assert record["slot_code"] == slot_code
        if shutil.which("taskset") and record["cpus"] is not None:
            assert record["cpus"] == affinity_from_code(slot_code)["all_cpus"]
        assert load_variant(r.log_dir) == variant
        intervals[r.slot].append((record["start"], record["end"]))
        with open(os.path.join(r.log_dir, f"run_{r.run_ID}.stdout.txt")) as f:
            assert f.read() == f"hello from run {r.run_ID}\n"
    # Every (variant, run_ID) ran exactly once, and never two at a time in one slot.
    assert sum(len(v) for v in intervals.values()) == 4
    for slot_intervals in intervals.values():
        slot_intervals.sort()
        for (_, end), (next_start, _) in zip(slot_intervals, slot_intervals[1:]):
            assert end <= next_start
    num_launched = (exp_dir / "num_launched.txt").read_text()
    assert num_launched.startswith("launched 4 / 4 runs; finished 4; failed 0")
    tree = (exp_dir / "experiments_tree.txt").read_text()
    assert "exp/\n    lr_a/\n    lr_b/\n" in tree
    assert children() <= before


def test_failing_run_is_reported_and_others_complete(recorder, tmp_path, capsys):
    before = children()
    variants, log_dirs = two_variants()
    results = run_experiments(recorder, CODE, "exp", 2, variants, log_dirs,
                              runs_args=[[], ["--fail"]], log_root=str(tmp_path))
    by_key = {(os.path.basename(r.log_dir), r.run_ID): r for r in results}
    assert len(by_key) == 4
    for run_ID in (0, 1):
        ok, bad = by_key[("lr_a", run_ID)], by_key[("lr_b", run_ID)]
        assert ok.returncode == 0
        assert os.path.isfile(os.path.join(ok.log_dir, f"record_{run_ID}.json"))
        assert bad.returncode == 3
        assert not os.path.exists(os.path.join(bad.log_dir, f"record_{run_ID}.json"))
    err = capsys.readouterr().err
    assert err.count("[FAILED]") == 2
    assert "exited with code 3" in err
    assert str(tmp_path / "exp" / "lr_b") in err
    assert "something went wrong in run" in err  # tail of the run's stderr file
    assert "2 of 4 runs failed" in err
    assert "failed 2" in (tmp_path / "exp" / "num_launched.txt").read_text()
    assert children() <= before


def test_keyboard_interrupt_stops_every_child(recorder, tmp_path, sigint_raises):
    before = children()
    variants, log_dirs = two_variants()
    exp_dir = tmp_path / "exp"
    started = [exp_dir / "lr_a" / "started_0.json", exp_dir / "lr_b" / "started_0.json"]

    thread = sigint_when_all_exist(started)
    with pytest.raises(KeyboardInterrupt):
        run_experiments(recorder, CODE, "exp", 2, variants, log_dirs, common_args=["--hang"],
                        log_root=str(tmp_path))
    thread.join()
    assert children() <= before
    for path in started:
        record = json.loads(path.read_text())
        for pid in (record["pid"], record["grandchild"]):
            gone = not psutil.pid_exists(pid)
            assert gone or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    # The queued run_ID 1 runs were never started.
    assert not (exp_dir / "lr_a" / "started_1.json").exists()


def test_pipe_fallback_when_pidfd_unavailable(recorder, tmp_path, monkeypatch):
    def no_pidfd(pid, flags=0):
        raise OSError("pidfd_open unavailable")
    monkeypatch.setattr(os, "pidfd_open", no_pidfd, raising=False)
    variants, log_dirs = make_variants(VariantLevel([("x",)], [[1]], ["only"]))
    results = run_experiments(recorder, CODE, "exp", 3, variants, log_dirs,
                              log_root=str(tmp_path))
    assert sorted(r.run_ID for r in results) == [0, 1, 2]
    assert all(r.returncode == 0 for r in results)
    for run_ID in range(3):
        assert (tmp_path / "exp" / "only" / f"record_{run_ID}.json").exists()
