"""examples/custom_env_family.py: an env family registered from outside the package, loaded
by the ``rlfast`` command as a plug-in, trained with ``rlfast train`` on worker processes.

Learning check: PPO on ``corridor:12`` (seed 0, at most 30,000 steps, the cpu sampler) reaches
the best return, 0.90, where a policy that never reaches the end scores -0.48 (measured here:
0.90 at the first evaluation after 10,240 steps). ``runner.stop_return`` ends the run at the
first evaluation that reaches the asserted 0.85, which halves its CPU time.
"""
from __future__ import annotations

import csv
import os
import pathlib
import subprocess
import sys

REPO = pathlib.Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"


def _rlfast(args: list[str], plugins: str | None = "custom_env_family",
            cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(EXAMPLES), str(REPO)]))
    env.pop("RLFAST_PLUGINS", None)
    if plugins is not None:
        env["RLFAST_PLUGINS"] = plugins
    return subprocess.run([sys.executable, "-m", "rlfast", *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=600)


def _returns(log_dir: pathlib.Path) -> list[float]:
    with open(log_dir / "progress.csv", newline="") as f:
        return [float(row["ReturnAverage"]) for row in csv.DictReader(f)]


def test_rlfast_train_learns_the_registered_family(tmp_path):
    log_dir = tmp_path / "run"
    done = _rlfast(["train", "ppo", "corridor:12", "--seed", "0", "--steps", "30000",
                    "--sampler", "cpu", "--n-envs", "4", "--no-progress", "--log-dir",
                    str(log_dir), "--set", "runner.log_interval_steps=10240",
                    "--set", "runner.stop_return=0.85"], cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    returns = _returns(log_dir)
    assert returns[0] < 0.0, returns  # the untrained policy does not reach the end
    assert returns[-1] >= 0.85, returns  # best possible: 0.90
    assert "Final evaluation return: 0.9" in done.stdout


def test_the_example_runs_as_a_script(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("RLFAST_PLUGINS", None)
    done = subprocess.run([sys.executable, str(EXAMPLES / "custom_env_family.py"),
                           "--steps", "2048", "--sampler", "serial", "--log-dir",
                           str(tmp_path / "run")], env=env, capture_output=True, text=True,
                          timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "run" / "progress.csv").exists()


def test_a_bad_id_of_the_family_is_a_one_line_error(tmp_path):
    done = _rlfast(["train", "ppo", "corridor:long", "--log-dir", str(tmp_path / "x")],
                   cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "rlfast: error: corridor:<length> takes a whole length of 2 cells or more; got 'long'"]
    assert not (tmp_path / "x").exists()


def test_without_the_plugin_the_prefix_is_unknown(tmp_path):
    done = _rlfast(["train", "ppo", "corridor:12", "--log-dir", str(tmp_path / "x")],
                   plugins=None, cwd=tmp_path)
    assert done.returncode == 2
    assert "unknown gymnasium environment 'corridor:12'" in done.stderr


def test_a_plugin_that_does_not_import_is_named(tmp_path):
    done = _rlfast(["train", "ppo", "CartPole-v1"], plugins="no_such_rlfast_plugin",
                   cwd=tmp_path)
    assert done.returncode == 2
    assert ("rlfast: error: rlfast plug-in RLFAST_PLUGINS module no_such_rlfast_plugin "
            "failed to load: ModuleNotFoundError") in done.stderr
