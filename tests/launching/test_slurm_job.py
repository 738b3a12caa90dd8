"""The job of a Slurm sweep's run, :class:`SweepRun`: its commands, what a requeued job does
without a snapshot, and what travels in its pickle. (Jobs run through submitit, preemption
included, are in test_slurm.py.)"""
import os
import pickle

import psutil

from rlfast.launching import encode_affinity, prepend_run_slot
from rlfast.launching.slurm_job import SweepRun

SCRIPT = "/path/to/train.py"
CODE = encode_affinity(n_cpu_core=1, n_gpu=0, hyperthread_offset=0, set_affinity=False)


def _children() -> set:
    return {p.pid for p in psutil.Process().children(recursive=True)}


def test_sweep_run_restarts_without_snapshot_and_pickles_without_process(tmp_path):
    before = _children()
    run = SweepRun(SCRIPT, prepend_run_slot(0, CODE), str(tmp_path), 3, ["--x"], "py")
    assert run.start_command() == ["py", SCRIPT, prepend_run_slot(0, CODE), str(tmp_path),
                                   "3", "--x"]
    assert run.resume_command() == ["py", "-m", "rlfast", "resume",
                                    os.path.join(str(tmp_path), "run_3")]
    resumed = run.resumed()
    assert resumed.resume and not run.resume
    run._proc = object()
    assert "_proc" in run.__getstate__() and run.__getstate__()["_proc"] is None
    # A requeued job whose run has no snapshot yet starts it again from a clean directory.
    script = tmp_path / "record.py"
    script.write_text("import os, sys; open(os.path.join(sys.argv[2], 'ran'), 'w').close()")
    run_dir = tmp_path / "run_0"
    run_dir.mkdir()
    (run_dir / "progress.csv").write_text("stale\n")
    (run_dir / "notes.txt").write_text("kept\n")
    again = SweepRun(str(script), "0slt_1cpu", str(tmp_path), 0, resume=True)
    assert again() == str(run_dir)
    assert (tmp_path / "ran").exists()
    assert not (run_dir / "progress.csv").exists() and (run_dir / "notes.txt").exists()
    assert "starting again (removed progress.csv)" in (tmp_path / "run_0.stdout.txt").read_text()
    assert _children() <= before


def test_sweep_run_pickles_by_its_new_module_path():
    """submitit pickles the job; a requeued job loads it by the class's module path."""
    run = SweepRun(SCRIPT, prepend_run_slot(0, CODE), "/logs/v", 1, ["--x"], "py")
    data = pickle.dumps(run)
    assert b"rlfast.launching.slurm_job" in data and b"rlfast.utils.launching" not in data
    again = pickle.loads(data)
    assert type(again) is SweepRun
    assert again.start_command() == run.start_command()
