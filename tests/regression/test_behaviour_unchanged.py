"""Seeded runs reproduce the progress recorded before the restructuring, bit for bit.

``data/<algo>_progress.csv`` were written by the command in ``_command`` on the code before
the restructuring. Every ``Return*`` column (the evaluation returns) and the step and
iteration counters must come out identical: any change in the order of random draws,
environment steps or updates shows up here. Timing columns naturally differ.

SAC is replayed for its first ``STEPS["sac"]`` steps only and compared with the recorded rows
up to that step: nothing in a serial SAC run depends on the total step count (the runner only
uses ``n_steps`` for the number of iterations, SAC and its agent keep ``n_itr`` without using
it, no schedule spans the run), so a shorter run is a prefix of the recorded one, and its last
row (logged both as an interval row and as the final one) is the recorded row at that step.
6000 of the 20000 steps (rows 0-3, three of them after learning began at 1000 steps): 25 s
instead of 68-97 s. PPO's learning rate decays to zero over ``n_steps`` and so must run all
of them; DQN (7 s) does too.
"""
import csv
import math
import os
import subprocess
import sys

import pytest

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
COUNTERS = ["Diagnostics/CumSteps", "Diagnostics/Iteration"]
RECORDED_STEPS = 20000  # the --steps the recorded runs were made with
STEPS = {"ppo": RECORDED_STEPS, "dqn": RECORDED_STEPS, "sac": 6000}


def _command(algo: str, env: str, log_dir: str, steps: int) -> list[str]:
    return [sys.executable, "-m", "rlfast", "train", algo, env, "--steps", str(steps),
            "--sampler", "serial", "--seed", "0", "--log-dir", log_dir, "--no-progress",
            "--snapshot-mode", "none"]


def _columns(path: str) -> dict[str, list[float]]:
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    names = [k for k in rows[0] if k.startswith("Return") or k in COUNTERS] if rows else []
    return {k: [float(row[k]) for row in rows] for k in names}


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


@pytest.mark.parametrize("algo, env", [("ppo", "CartPole-v1"), ("dqn", "CartPole-v1"),
                                       ("sac", "Pendulum-v1")])
def test_seeded_run_matches_recorded_progress(tmp_path, algo, env):
    expected = _columns(os.path.join(DATA, f"{algo}_progress.csv"))
    assert any(k.startswith("Return") for k in expected) and set(COUNTERS) <= set(expected)
    steps = STEPS[algo]
    if steps < RECORDED_STEPS:  # the recorded rows up to `steps`, which must end on a row
        recorded_steps = expected["Diagnostics/CumSteps"]
        assert recorded_steps[-1] == RECORDED_STEPS  # one step per iteration: no rounding
        n_rows = sum(1 for s in recorded_steps if s <= steps)
        assert recorded_steps[n_rows - 1] == steps and n_rows >= 4
        expected = {k: v[:n_rows] for k, v in expected.items()}
    log_dir = tmp_path / "run"
    done = subprocess.run(_command(algo, env, str(log_dir), steps), cwd=tmp_path,
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    actual = _columns(str(log_dir / "progress.csv"))
    for name, values in expected.items():
        assert name in actual, f"column {name!r} missing from {algo}'s progress.csv"
        got = actual[name]
        assert len(got) == len(values), f"{name}: {len(got)} rows, recorded {len(values)}"
        diffs = [(i, v, g) for i, (v, g) in enumerate(zip(values, got)) if not _same(v, g)]
        assert not diffs, f"{algo} {name} differs (row, recorded, now): {diffs}"
