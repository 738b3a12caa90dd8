"""scripts/bench/bench_gpu.sh end to end on the CPU (``--dry-run``), cut to two measurements so that
it takes about 15 s: the cleanrl-alevec contender (2 envs x 8 steps) through
scripts/bench/bench_atari_train.py and a Pong learning run of ``rlfast train`` of 512 steps, timed
by its progress.csv. The tables, the raw JSON and the copied progress.csv land in $OUT;
nothing is left in /dev/shm or the
temporary folder. (The budget planner, the progress.csv reading and the tables' verdicts are
tested alone in test_bench_gpu_plan.py.)"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests._leaks import new_shm_entries, shm_entries

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "bench" / "bench_gpu.sh"


def test_dry_run_measures_tabulates_and_times_the_learning_run(tmp_path):
    pytest.importorskip("ale_py")
    out, scratch = tmp_path / "out", tmp_path / "tmp"
    scratch.mkdir()
    shm_before = shm_entries()
    proc = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--only", "cleanrl-alevec@2", "learn", "--budget",
         "120", "--warmup", "0", "--seconds", "0.3", "--steps-per-env", "8", "--learn-seconds",
         "60", "--learn-steps", "512", "--learn-envs", "2", "--learn-log-interval", "256"],
        capture_output=True, text=True, timeout=180, cwd=tmp_path,
        # One torch thread: the CleanRL loop keeps torch's default (one per core), whose
        # threads spin for cores that the other test worker holds.
        env=dict(os.environ, OUT=str(out), TMPDIR=str(scratch), PYTHON=sys.executable,
                 OMP_NUM_THREADS="1"))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    text = (out / "bench_gpu.md").read_text()
    assert text in proc.stdout and text in (out / "bench_gpu.log").read_text()
    assert "Machine: " in text and "torch" in text
    row = next(line for line in text.splitlines() if line.startswith("| cleanrl-alevec |"))
    assert float(row.split("|")[2].replace(",", "")) > 0
    assert "nvidia-smi" in text  # absent here: said so, no utilisation
    learn = next(line for line in text.splitlines() if line.startswith("| no | 512 |"))
    assert learn.endswith("| rlfast train exited (0) |"), learn
    data = json.loads((out / "bench_gpu.json").read_text())
    assert data["outcomes"] == {"train:cleanrl-alevec@2": "ok", "learn:pong": "ok"}
    result = data["results"]["learn:pong"]
    assert result["hit"] is None and result["steps"] == 512
    assert "--affinity" not in result["command"]  # on the CPU no GPU affinity code
    assert (out / "learn_progress.csv").read_text().startswith(("Diagnostics/", "Return"))
    # the run's work folder is gone (torch may leave its compile cache folder there)
    assert [n for n in os.listdir(scratch) if n.startswith("rlfast_bench_gpu_")] == []
    assert new_shm_entries(shm_before, prefixes=("",)) == []
