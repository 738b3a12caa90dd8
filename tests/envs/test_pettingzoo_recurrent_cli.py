"""``rlfast train`` with recurrent multi-agent agents on a ``pz:`` environment, end to end in
a real process: ``--set agent.recurrent=True --set agent.core=gru`` with the ppo and mappo
presets, on the serial and cpu samplers (a tiny budget: two iterations)."""
from __future__ import annotations

import csv
import json
import math
import os
import subprocess
import sys

import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPREAD = "pz:mpe2.simple_spread_v3"


@pytest.mark.parametrize("algo,sampler", [("ppo", "serial"), ("ppo", "cpu"),
                                          ("mappo", "serial"), ("mappo", "cpu")])
def test_recurrent_gru_agent_trains_spread(tmp_path, algo, sampler):
    log_dir = str(tmp_path / f"{algo}_{sampler}")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    args = ["train", algo, SPREAD, "--sampler", sampler, "--n-envs", "2", "--steps", "100",
            "--seed", "1", "--log-dir", log_dir,
            "--set", "agent.recurrent=True", "--set", "agent.core=gru",
            "--set", "env.kwargs.N=2", "--set", "env.kwargs.max_cycles=10",
            "--set", "sampler.batch_T=25", "--set", "runner.log_interval_steps=50",
            "--set", "sampler.eval_n_envs=1", "--set", "sampler.eval_max_steps=20"]
    result = subprocess.run([sys.executable, "-m", "rlfast", *args], capture_output=True,
                            text=True, timeout=300, env=env, cwd=str(tmp_path))
    assert result.returncode == 0, result.stderr[-3000:]
    with open(os.path.join(log_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    # 2 envs x 25 steps per iteration: two iterations, each logged, with finite losses
    assert int(float(rows[-1]["Diagnostics/CumSteps"])) == 100
    assert all(math.isfinite(float(row["lossAverage"])) for row in rows[1:])
    with open(os.path.join(log_dir, "params.json")) as f:
        params = json.load(f)
    assert params["config"]["agent"]["core"] == "gru"
    assert params["config"]["agent"]["recurrent"] is True
