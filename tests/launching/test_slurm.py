"""``run_experiments(..., backend="slurm")``: real submitit jobs on this machine through the local
executor (the same job objects a Slurm cluster runs), preemption and requeue, option checks."""
import csv
import json
import os
import signal
import sys
import time

import psutil
import pytest

from rlfast.launching import encode_affinity, prepend_run_slot, run_experiments
from rlfast.launching import slurm as slurm_launcher
from rlfast.launching.slurm import (SlurmRunResult, check_slurm_options, parse_time_minutes,
                                    submitit_parameters)
from tests.launching._interrupt import sigint_when_all_exist

submitit = pytest.importorskip("submitit")

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SCRIPT = os.path.join(REPO, "scripts", "launch", "train_ppo_cartpole.py")
# One run slot of one core, unpinned: the jobs of a sweep share this machine's cores.
CODE = encode_affinity(n_cpu_core=1, n_gpu=0, hyperthread_offset=0, set_affinity=False)
SMALL_SAMPLER = {"batch_B": 2, "batch_T": 32, "eval_n_envs": 1, "eval_max_steps": 200,
                 "eval_max_trajectories": 1}
LOCAL = {"executor": "local", "time": 10}
FAILING = r'''
import sys
print("about to fail", file=sys.stderr)
sys.exit(3)
'''
# Records its pid and a grandchild's, then sleeps: a run to stop from outside.
HANG = r'''
import json, os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
with open(os.path.join(sys.argv[2], "started.json"), "w") as f:
    json.dump({"pid": os.getpid(), "grandchild": child.pid}, f)
time.sleep(60)
'''


def tiny_variant(n_steps: int) -> dict:
    return {"runner": {"n_steps": n_steps, "log_interval_steps": 512},
            "sampler": dict(SMALL_SAMPLER)}


def progress_rows(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
        return list(csv.DictReader(f))


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


def _wait_for(path, job=None, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        assert job is None or not job.done(), f"the job ended before {path} appeared"
        time.sleep(0.05)


@pytest.fixture
def sigint_raises():
    """SIGINT raises KeyboardInterrupt here even when the test run is a background job
    (started with SIGINT ignored, which Python keeps)."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def _children() -> set:
    return {p.pid for p in psutil.Process().children(recursive=True)}


@pytest.fixture(autouse=True)
def no_processes_left():
    """Every job's controller and task has exited (and been reaped) when a test ends."""
    before = _children()
    yield
    deadline = time.monotonic() + 10
    while _children() - before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _children() <= before


def test_sweep_runs_every_job_to_completion(tmp_path, capsys):
    results = run_experiments(SCRIPT, CODE, "exp", 2, [tiny_variant(1024)], ["tiny"],
                              log_root=str(tmp_path), backend="slurm", slurm=LOCAL)
    exp_dir = tmp_path / "exp"
    assert sorted(r.run_ID for r in results) == [0, 1]
    assert all(isinstance(r, SlurmRunResult) and r.returncode == 0 for r in results)
    assert all(r.slot == 0 and r.job is not None for r in results)
    slot_code = prepend_run_slot(0, CODE)
    for r in results:
        assert r.log_dir == str(exp_dir / "tiny")
        run_dir = os.path.join(r.log_dir, f"run_{r.run_ID}")
        rows = progress_rows(run_dir)
        assert len(rows) >= 2 and int(rows[-1]["Diagnostics/CumSteps"]) == 1024
        assert os.path.isfile(os.path.join(run_dir, "params.pkl"))
        with open(os.path.join(run_dir, "params.json")) as f:
            params = json.load(f)  # resumable: what `rlfast resume` rebuilds the run from
        assert (params["algo"], params["env"], params["seed"], params["affinity"]) == (
            "ppo", "CartPole-v1", r.run_ID, slot_code)
        assert params["config"]["runner"]["n_steps"] == 1024
        with open(os.path.join(r.log_dir, f"run_{r.run_ID}.stdout.txt")) as f:
            trace = f.read()
        assert "starting: " in trace and slot_code in trace and "finished" in trace
    assert json.loads((exp_dir / "tiny" / "variant.json").read_text()) == tiny_variant(1024)
    assert "exp/\n    tiny/\n" in (exp_dir / "experiments_tree.txt").read_text()
    assert (exp_dir / "num_launched.txt").read_text().startswith(
        "submitted 2 / 2 runs as local submitit jobs; finished 2; failed 0")
    out = capsys.readouterr().out
    for r in results:
        assert f"job {r.job.job_id}: run_ID {r.run_ID}" in out
    assert os.path.isdir(exp_dir / "slurm")  # submitit's folder: pickles and job logs


def test_failed_job_is_reported(tmp_path, capsys):
    script = tmp_path / "failing.py"
    script.write_text(FAILING)
    results = run_experiments(str(script), CODE, "exp", 1, [{}], ["bad"],
                              log_root=str(tmp_path / "logs"), backend="slurm", slurm=LOCAL)
    assert [r.returncode for r in results] == [1]
    err = capsys.readouterr().err
    assert "[FAILED] job" in err and "about to fail" in err  # the run's stderr tail
    assert "RunFailedError" in err and "exited with code 3" in err
    assert "1 of 1 runs failed" in err
    assert "failed 1" in (tmp_path / "logs" / "exp" / "num_launched.txt").read_text()


def _signal_job(job, signum: int) -> None:
    """Send ``signum`` to every process of a local job but its controller, as Slurm signals
    every process of a job step. (``LocalJob._interrupt()`` signals the controller, which has
    no handler for it and dies, orphaning the job: that is not Slurm's behaviour.)"""
    controller = psutil.Process(job._process.pid)
    for process in controller.children(recursive=True):
        try:
            process.send_signal(signum)
        except psutil.NoSuchProcess:
            pass


def test_preempted_run_is_requeued_and_resumed(tmp_path):
    """Preemption mid-training: the job stops the run (final snapshot, exit 143), submitit
    requeues it, and the requeued job continues with `rlfast resume` to the full steps."""
    n_steps = 8192
    [result] = run_experiments(SCRIPT, CODE, "exp", 1, [tiny_variant(n_steps)], ["long"],
                               log_root=str(tmp_path), backend="slurm", slurm=LOCAL,
                               wait=False)
    assert result.returncode is None
    job = result.job
    run_dir = os.path.join(result.log_dir, "run_0")
    _wait_for(os.path.join(run_dir, "params.pkl"), job)  # the first snapshot: mid-training
    _signal_job(job, submitit.JobEnvironment._usr_sig())  # USR2: preemption / time limit
    try:
        outcome = job.results()
        failure = None
    except Exception as e:  # reported below, after what the requeue must show in any case
        outcome, failure = None, e
    submitit_log = (job.stdout() or "") + (job.stderr() or "")
    assert "Requeued job" in submitit_log
    with open(os.path.join(result.log_dir, "run_0.stdout.txt")) as f:
        trace = f.read()
    assert "preempted or timed out: stopping the run" in trace
    assert "stopped with code 143; requeueing to resume" in trace  # final snapshot saved
    assert "resuming from the last snapshot: " in trace and " -m rlfast resume " in trace
    stopped_at = [int(r["Diagnostics/CumSteps"]) for r in progress_rows(run_dir)]
    assert failure is None, f"the resumed job failed (needs `rlfast resume`): {failure}"
    assert outcome == [run_dir]
    with open(os.path.join(run_dir, "debug.log")) as f:
        assert "resumed" in f.read().lower()
    assert stopped_at and int(progress_rows(run_dir)[-1]["Diagnostics/CumSteps"]) == n_steps


def test_slurm_options_map_onto_submitit(tmp_path, monkeypatch):
    options = check_slurm_options(dict(
        partition="gpu", time="01:30:00", gpus_per_node=2, cpus_per_task=8, mem_gb=32,
        account="acc", qos="high", constraint="volta", additional={"mail-type": "END"},
        max_parallel=4))
    params = submitit_parameters(options, "exp")
    assert params == dict(name="exp", nodes=1, tasks_per_node=1, timeout_min=90,
                          gpus_per_node=2, cpus_per_task=8, mem_gb=32.0,
                          slurm_partition="gpu", slurm_account="acc", slurm_qos="high",
                          slurm_constraint="volta",
                          slurm_additional_parameters={"mail-type": "END"},
                          slurm_array_parallelism=4)
    # The sbatch file submitit would write on a cluster (pretend srun exists).
    monkeypatch.setattr(submitit.SlurmExecutor, "affinity", classmethod(lambda cls: 2))
    executor = submitit.AutoExecutor(folder=str(tmp_path / "%j"), cluster="slurm")
    executor.update_parameters(**params)
    sbatch = executor._executor._make_submission_file_text("python -m x", "uid")
    for flag in ("--partition=gpu", "--time=90", "--gpus-per-node=2", "--cpus-per-task=8",
                 "--mem=32GB", "--nodes=1", "--account=acc", "--qos=high",
                 "--constraint=volta", "--mail-type=END", "--job-name=exp",
                 "--signal=USR2@90"):
        assert f"#SBATCH {flag}\n" in sbatch, flag
    # The local executor takes the same parameters (it ignores the slurm_ ones).
    submitit.AutoExecutor(folder=str(tmp_path / "local"), cluster="local").update_parameters(
        **params)
    assert submitit_parameters(check_slurm_options({"executor": "local"}), "e") == dict(
        name="e", nodes=1, tasks_per_node=1, timeout_min=slurm_launcher.LOCAL_TIMEOUT_MIN)
    assert [parse_time_minutes(t) for t in (45, 0.5, "90", "2:30", "12:00:00", "1-12",
                                            "1-00:00:01")] == [45, 1, 90, 3, 720, 2160, 1441]


def test_bad_options_are_refused_before_anything_is_written(tmp_path):
    def run(**kwargs):
        return run_experiments(SCRIPT, CODE, "exp", 1, [{}], ["v"], log_root=str(tmp_path),
                               **kwargs)
    with pytest.raises(ValueError, match=r"Unknown slurm option\(s\) \['gpus'\]") as info:
        run(backend="slurm", slurm=dict(partition="gpu", time=5, gpus=1))
    assert all(key in str(info.value) for key in slurm_launcher.SLURM_KEYS)
    with pytest.raises(ValueError, match="time is required"):
        run(backend="slurm", slurm=dict(partition="gpu"))
    with pytest.raises(ValueError, match="not a Slurm time"):
        run(backend="slurm", slurm=dict(time="1h"))
    with pytest.raises(ValueError, match="slurm executor must be one of"):
        run(backend="slurm", slurm=dict(time=5, executor="kubernetes"))
    with pytest.raises(ValueError, match="backend must be one of"):
        run(backend="pbs")
    with pytest.raises(ValueError, match="backend='slurm'"):
        run(slurm=dict(time=5))
    with pytest.raises(ValueError, match="wait=False needs backend='slurm'"):
        run(wait=False)
    assert not (tmp_path / "exp").exists()


def test_missing_submitit_names_the_extra(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # `import submitit` now fails
    with pytest.raises(ImportError, match=r"pip install rlfast\[slurm\]"):
        run_experiments(SCRIPT, CODE, "exp", 1, [{}], ["v"], log_root=str(tmp_path),
                        backend="slurm", slurm=LOCAL)
    assert not (tmp_path / "exp").exists()


def test_dry_run_prints_parameters_and_commands(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "submitit", None)  # a dry run does not need submitit
    plan = run_experiments(SCRIPT, CODE, "exp", 2, [{}, {}], ["a", "b"],
                           log_root=str(tmp_path), backend="slurm", dry_run=True,
                           slurm=dict(partition="gpu", time="2:00:00", gpus_per_node=1))
    exp_dir = str(tmp_path / "exp")
    assert [(r.log_dir, r.run_ID, r.returncode) for r in plan] == [
        (os.path.join(exp_dir, d), k, None) for k in (0, 1) for d in ("a", "b")]
    out = capsys.readouterr().out
    assert "slurm_partition='gpu'" in out and "timeout_min=120" in out
    assert "gpus_per_node=1" in out and os.path.join(exp_dir, "slurm", "%j") in out
    slot_code = prepend_run_slot(0, CODE)
    assert out.count(f"{SCRIPT} {slot_code} {os.path.join(exp_dir, 'a')} 1") == 1
    assert not (tmp_path / "exp").exists()


def test_killed_job_process_takes_its_run_along(tmp_path):
    """SIGKILL of the job process (no cleanup runs): the training child gets SIGTERM from
    the kernel (parent-death signal) instead of living on as an orphan."""
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    [result] = run_experiments(str(script), CODE, "exp", 1, [{}], ["v"],
                               log_root=str(tmp_path / "logs"), backend="slurm", slurm=LOCAL,
                               wait=False)
    started = os.path.join(result.log_dir, "started.json")
    _wait_for(started, result.job)
    run_pid = json.loads(open(started).read())["pid"]
    [task] = psutil.Process(result.job._process.pid).children()
    task.kill()
    deadline = time.monotonic() + 10
    while not (_gone(run_pid) and result.job.done()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _gone(run_pid)
    assert result.job.state == "FINISHED"  # the controller saw its task die and ended
    os.kill(json.loads(open(started).read())["grandchild"], signal.SIGKILL)  # it was orphaned


def test_interrupting_the_sweep_cancels_jobs_and_stops_runs(tmp_path, sigint_raises):
    script = tmp_path / "hang.py"
    script.write_text(HANG)
    started = [tmp_path / "logs" / "exp" / d / "started.json" for d in ("a", "b")]

    thread = sigint_when_all_exist(started)
    with pytest.raises(KeyboardInterrupt):
        run_experiments(str(script), CODE, "exp", 1, [{}, {}], ["a", "b"],
                        log_root=str(tmp_path / "logs"), backend="slurm", slurm=LOCAL)
    thread.join()
    for path in started:
        record = json.loads(path.read_text())
        for pid in (record["pid"], record["grandchild"]):
            assert _gone(pid)
