"""``rlfast train`` with each memory core on a POPGym task, on the samplers with worker
processes (real processes over shared memory), then ``rlfast eval`` of the run."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

pytest.importorskip("popgym")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SMALL = ["--set", "sampler.batch_T=16", "--set", "runner.log_interval_steps=512",
         "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_trajectories=2",
         "--set", "agent.core_size=16", "--set", "agent.memory_len=4"]


def _rlfast(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "rlfast", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


# The gpu and alternating samplers with each core are compared with the serial sampler step
# for step in tests/samplers/test_gpu_samplers.py; here the command line with worker processes.
@pytest.mark.parametrize("algo, core, sampler", [("ppo", "attention", "cpu"),
                                                 ("r2d1", "ln_lstm", "cpu")])
def test_a_core_trains_on_a_sampler_and_the_run_evaluates(tmp_path, algo, core, sampler):
    log_dir = str(tmp_path / "run")
    result = _rlfast("train", algo, "popgym:RepeatPreviousEasy", "--sampler", sampler,
                     "--n-envs", "4", "--steps", "1024", "--seed", "2", "--log-dir", log_dir,
                     "--device", "cpu", "--set", f"agent.core={core}", *SMALL)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    with open(os.path.join(log_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert int(float(rows[-1]["Diagnostics/CumSteps"])) >= 1024
    assert -1.0 <= float(rows[-1]["ReturnAverage"]) <= 1.0  # POPGym's return scale
    evaluated = _rlfast("eval", log_dir, "--episodes", "2")
    assert evaluated.returncode == 0, evaluated.stdout[-2000:] + evaluated.stderr[-2000:]
    assert "Return over 2 episodes" in evaluated.stdout
