"""``rlfast train`` with each memory core on a POPGym task, on the samplers with worker
processes (real processes over shared memory), then ``rlfast eval`` of the run.

Both commands go through the command line's ``main`` in this process (the sampler still
forks its worker processes), which spares a new interpreter importing torch for each;
tests/cli/test_cli.py runs ``python -m rlfast`` in real processes."""
from __future__ import annotations

import csv
import os

import pytest

from rlfast.cli import main

pytest.importorskip("popgym")

SMALL = ["--set", "sampler.batch_T=16", "--set", "runner.log_interval_steps=512",
         "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_trajectories=2",
         "--set", "agent.core_size=16", "--set", "agent.memory_len=4"]


# The gpu and alternating samplers with each core are compared with the serial sampler step
# for step in tests/samplers/test_gpu_samplers.py; here the command line with worker processes.
@pytest.mark.parametrize("algo, core, sampler", [("ppo", "attention", "cpu"),
                                                 ("r2d1", "ln_lstm", "cpu")])
def test_a_core_trains_on_a_sampler_and_the_run_evaluates(tmp_path, capsys, algo, core,
                                                          sampler):
    log_dir = str(tmp_path / "run")
    assert main(["train", algo, "popgym:RepeatPreviousEasy", "--sampler", sampler,
                 "--n-envs", "4", "--steps", "1024", "--seed", "2", "--log-dir", log_dir,
                 "--device", "cpu", "--set", f"agent.core={core}", *SMALL]) == 0
    with open(os.path.join(log_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    assert int(float(rows[-1]["Diagnostics/CumSteps"])) >= 1024
    assert -1.0 <= float(rows[-1]["ReturnAverage"]) <= 1.0  # POPGym's return scale
    capsys.readouterr()
    assert main(["eval", log_dir, "--episodes", "2"]) == 0
    assert "Return over 2 episodes" in capsys.readouterr().out
