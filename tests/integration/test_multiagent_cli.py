"""``rlfast train`` on PettingZoo environments with every sampler, then eval, watch and plot
on the run: real worker processes over shared memory.

The commands go through the command line's ``main`` in this process (each run's samplers
still fork their worker processes), which spares a new interpreter importing torch for each
one; ``python -m rlfast`` itself runs in a real process in the last test, as it does in
tests/cli/test_cli.py."""
from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from rlfast.cli import main

pytest.importorskip("pettingzoo")
pytest.importorskip("mpe2")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SPREAD = "pz:mpe2.simple_spread_v3"


def _rlfast(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-m", "rlfast", *args], capture_output=True,
                          text=True, timeout=timeout, env=env, cwd=ROOT)


def _rows(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "progress.csv")) as f:
        return list(csv.DictReader(f))


@pytest.mark.parametrize("sampler", ["serial", "cpu", "gpu", "alternating"])
def test_every_sampler_trains_spread(tmp_path, capsys, sampler):
    log_dir = str(tmp_path / sampler)
    assert main(["train", "ppo", SPREAD, "--sampler", sampler, "--n-envs", "4",
                 "--steps", "1000", "--seed", "1", "--log-dir", log_dir,
                 "--set", "env.kwargs.N=2", "--set", "env.kwargs.max_cycles=10",
                 "--set", "sampler.batch_T=25", "--set", "runner.log_interval_steps=500",
                 "--set", "sampler.eval_n_envs=2", "--set", "sampler.eval_max_steps=40"]) == 0
    rows = _rows(log_dir)
    last = rows[-1]
    # environment steps: 4 envs x 25 steps = 100 per iteration, 2 agents each
    assert int(float(last["Diagnostics/CumSteps"])) == 1000
    for key in ("ReturnAverage", "TeamReturnAverage", "Return/agent_0Average",
                "Return/agent_1Average"):
        assert key in last, sorted(last)
    assert float(last["TeamReturnAverage"]) == pytest.approx(
        float(last["Return/agent_0Average"]) + float(last["Return/agent_1Average"]), rel=1e-6)
    # the console line shows the per-agent returns
    assert "agent_0" in capsys.readouterr().out


def test_eval_watch_and_plot_a_multiagent_run(tmp_path, capsys):
    log_dir = str(tmp_path / "run")
    assert main(["train", "mappo", SPREAD, "--sampler", "serial", "--n-envs", "2",
                 "--steps", "200", "--seed", "2", "--log-dir", log_dir,
                 "--set", "env.kwargs.N=2", "--set", "env.kwargs.max_cycles=10",
                 "--set", "agent.shared=False", "--set", "runner.log_interval_steps=100"]) == 0
    capsys.readouterr()
    assert main(["eval", log_dir, "--episodes", "3"]) == 0
    assert "over 3 episodes" in capsys.readouterr().out
    video = str(tmp_path / "spread.gif")
    assert main(["watch", log_dir, "--video", video, "--episodes", "1"]) == 0
    assert os.path.getsize(video) > 0
    assert "length 10 steps" in capsys.readouterr().out
    plot = str(tmp_path / "curve.png")
    assert main(["plot", log_dir, "-o", plot, "--y", "TeamReturnAverage"]) == 0
    assert os.path.getsize(plot) > 0


def test_bad_pettingzoo_id_is_one_line(tmp_path):
    result = _rlfast("train", "ppo", "pz:mpe2.simple_sprad_v3", "--log-dir", str(tmp_path))
    assert result.returncode != 0
    lines = [line for line in result.stderr.strip().splitlines() if line.strip()]
    assert len(lines) == 1 and "mpe2.simple_spread_v3" in lines[0], result.stderr
