"""One run as a command and a child process: ``experiment_command`` (taskset pinning) and
``launch_experiment`` (variant and output files in the log dir)."""
import json
import sys

import pytest

from rlfast.launching import command, encode_affinity, load_variant, prepend_run_slot
from rlfast.launching.command import experiment_command, launch_experiment
from tests.launching._recorder import CODE, recorder  # noqa: F401


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
    monkeypatch.setattr(command.shutil, "which", lambda name: "/opt/bin/taskset")
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
    monkeypatch.setattr(command.shutil, "which", lambda name: None)
    assert experiment_command("s.py", slot1, "d", 0, [], "py") == ["py", "s.py", slot1, "d", "0"]
    assert experiment_command("s.py", slot1, "d", 0)[0] == sys.executable
