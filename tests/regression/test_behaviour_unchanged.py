"""Seeded runs reproduce the progress recorded before the restructuring, bit for bit.

``data/<algo>_progress.csv`` were written by the command in ``_command`` on the code before
the restructuring. Every ``Return*`` column (the evaluation returns) and the step and
iteration counters must come out identical: any change in the order of random draws,
environment steps or updates shows up here. Timing columns naturally differ.
"""
import csv
import math
import os
import subprocess
import sys

import pytest

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
COUNTERS = ["Diagnostics/CumSteps", "Diagnostics/Iteration"]


def _command(algo: str, env: str, log_dir: str) -> list[str]:
    return [sys.executable, "-m", "rlfast", "train", algo, env, "--steps", "20000",
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
    log_dir = tmp_path / "run"
    done = subprocess.run(_command(algo, env, str(log_dir)), cwd=tmp_path, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    actual = _columns(str(log_dir / "progress.csv"))
    for name, values in expected.items():
        assert name in actual, f"column {name!r} missing from {algo}'s progress.csv"
        got = actual[name]
        assert len(got) == len(values), f"{name}: {len(got)} rows, recorded {len(values)}"
        diffs = [(i, v, g) for i, (v, g) in enumerate(zip(values, got)) if not _same(v, g)]
        assert not diffs, f"{algo} {name} differs (row, recorded, now): {diffs}"
