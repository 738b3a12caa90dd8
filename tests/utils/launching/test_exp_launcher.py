import datetime
import json
import os
import shutil
import signal
import sys
import time

import psutil
import pytest

from rlfast.utils.launching import (affinity_from_code, encode_affinity, launch_experiment,
                                    load_variant, make_variants, prepend_run_slot,
                                    run_experiments, VariantLevel)
from rlfast.utils.launching import exp_launcher
from rlfast.utils.launching.exp_launcher import experiment_command
from tests.utils.launching._interrupt import sigint_when_all_exist

# A stand-in training script: records what it was called with, when it ran and where it was
# pinned, then sleeps; `--fail` makes it exit 3, `--hang` makes it start a grandchild and
# sleep for a minute (to be interrupted).
RECORDER = r'''
import json, os, subprocess, sys, time
slot_code, log_dir, run_ID = sys.argv[1], sys.argv[2], sys.argv[3]
extra = sys.argv[4:]
start = time.time()
record = dict(argv=sys.argv[1:], pid=os.getpid(), slot_code=slot_code, start=start,
              cpus=sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None)
if "--hang" in extra:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    record["grandchild"] = child.pid
    with open(os.path.join(log_dir, f"started_{run_ID}.json"), "w") as f:
        json.dump(record, f)
    time.sleep(60)
time.sleep(0.3)
record["end"] = time.time()
print("hello from run", run_ID)
if "--fail" in extra:
    print("something went wrong in run", run_ID, file=sys.stderr)
    sys.exit(3)
with open(os.path.join(log_dir, f"record_{run_ID}.json"), "w") as f:
    json.dump(record, f)
'''

CODE = encode_affinity(n_cpu_core=2, n_gpu=0, cpu_per_run=1, hyperthread_offset=0)


@pytest.fixture
def recorder(tmp_path):
    path = tmp_path / "recorder.py"
    path.write_text(RECORDER)
    return str(path)


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


def _children() -> set:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def _sweep():
    level = VariantLevel([("algo", "lr")], [[0.1], [0.2]], ["lr_a", "lr_b"])
    return make_variants(level)


def test_run_experiments_runs_each_once_in_separate_slots(recorder, tmp_path, capsys):
    before = _children()
    variants, log_dirs = _sweep()
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
    assert _children() <= before


def test_failing_run_is_reported_and_others_complete(recorder, tmp_path, capsys):
    before = _children()
    variants, log_dirs = _sweep()
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
    assert _children() <= before


def test_keyboard_interrupt_stops_every_child(recorder, tmp_path, sigint_raises):
    before = _children()
    variants, log_dirs = _sweep()
    exp_dir = tmp_path / "exp"
    started = [exp_dir / "lr_a" / "started_0.json", exp_dir / "lr_b" / "started_0.json"]

    thread = sigint_when_all_exist(started)
    with pytest.raises(KeyboardInterrupt):
        run_experiments(recorder, CODE, "exp", 2, variants, log_dirs, common_args=["--hang"],
                        log_root=str(tmp_path))
    thread.join()
    assert _children() <= before
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


def test_launch_experiment_output_files_and_variant(recorder, tmp_path):
    log_dir = str(tmp_path / "run_dir")
    proc = launch_experiment(recorder, 1, CODE, log_dir, {"a": 1}, 5, ["--x"])
    assert proc.wait(timeout=60) == 0
    assert load_variant(log_dir) == {"a": 1}
    record = json.loads((tmp_path / "run_dir" / "record_5.json").read_text())
    assert record["argv"] == [prepend_run_slot(1, CODE), log_dir, "5", "--x"]
    assert (tmp_path / "run_dir" / "run_5.stdout.txt").read_text() == "hello from run 5\n"
    assert (tmp_path / "run_dir" / "run_5.stderr.txt").read_text() == ""
    with pytest.raises(ValueError, match="run_slot 2"):
        launch_experiment(recorder, 2, CODE, log_dir, {}, 0, [])


def test_experiment_command_taskset(monkeypatch):
    monkeypatch.setattr(exp_launcher.shutil, "which", lambda name: "/opt/bin/taskset")
    slot1 = prepend_run_slot(1, CODE)
    assert experiment_command("s.py", slot1, "/logs/v", 3, ["--a", 2], "py") == [
        "/opt/bin/taskset", "-c", "1", "py", "s.py", slot1, "/logs/v", "3", "--a", "2"]
    # Multi-GPU runs: the union of the per-GPU processes' cpus (GPUs 2 and 3 own cores 4-7).
    multi = prepend_run_slot(1, encode_affinity(n_cpu_core=8, n_gpu=4, gpu_per_run=2,
                                                hyperthread_offset=0))
    assert experiment_command("s.py", multi, "d", 0, [], "py")[:3] == [
        "/opt/bin/taskset", "-c", "4,5,6,7"]
    # Async runs: optimizer and sampler cpus together.
    async_code = prepend_run_slot(0, encode_affinity(
        n_cpu_core=8, n_gpu=2, async_sample=True, sample_gpu_per_run=1, cpu_reserved=1,
        hyperthread_offset=0))
    assert experiment_command("s.py", async_code, "d", 0, [], "py")[:3] == [
        "/opt/bin/taskset", "-c", "0,1,2,3,4,5,6,7"]
    # No pinning when the code turns affinity off, or taskset is not installed.
    unpinned = prepend_run_slot(0, encode_affinity(n_cpu_core=2, hyperthread_offset=0,
                                                   set_affinity=False))
    assert experiment_command("s.py", unpinned, "d", 0, [], "py") == [
        "py", "s.py", unpinned, "d", "0"]
    monkeypatch.setattr(exp_launcher.shutil, "which", lambda name: None)
    assert experiment_command("s.py", slot1, "d", 0, [], "py") == ["py", "s.py", slot1, "d", "0"]
    assert experiment_command("s.py", slot1, "d", 0)[0] == sys.executable


def test_dry_run_plans_without_starting(recorder, tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path / "data"))
    before = _children()
    variants, log_dirs = _sweep()
    plan = run_experiments(recorder, CODE, "exp", 2, variants, log_dirs, dry_run=True)
    day = datetime.datetime.now().strftime("%Y%m%d")
    exp_dir = os.path.join(str(tmp_path / "data"), "local", day, "exp")
    assert [(r.log_dir, r.run_ID, r.slot, r.returncode) for r in plan] == [
        (os.path.join(exp_dir, "lr_a"), 0, 0, None), (os.path.join(exp_dir, "lr_b"), 0, 1, None),
        (os.path.join(exp_dir, "lr_a"), 1, 0, None), (os.path.join(exp_dir, "lr_b"), 1, 1, None)]
    assert not (tmp_path / "data").exists()
    assert prepend_run_slot(1, CODE) in capsys.readouterr().out
    assert _children() <= before


def test_run_experiments_input_checks(recorder, tmp_path):
    variants, log_dirs = _sweep()
    with pytest.raises(ValueError, match="2 variants and 1 log_dirs"):
        run_experiments(recorder, CODE, "e", 1, variants, log_dirs[:1], log_root=str(tmp_path))
    with pytest.raises(ValueError, match="unique"):
        run_experiments(recorder, CODE, "e", 1, variants, ["d", "d"], log_root=str(tmp_path))
    with pytest.raises(ValueError, match="runs_args"):
        run_experiments(recorder, CODE, "e", 1, variants, log_dirs, runs_args=[[]],
                        log_root=str(tmp_path))
    with pytest.raises(ValueError, match="runs_per_setting"):
        run_experiments(recorder, CODE, "e", 0, variants, log_dirs, log_root=str(tmp_path))
    with pytest.raises(FileNotFoundError, match="missing.py"):
        run_experiments(str(tmp_path / "missing.py"), CODE, "e", 1, variants, log_dirs,
                        log_root=str(tmp_path))
    assert not (tmp_path / "e").exists()
