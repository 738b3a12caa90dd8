"""Seeded learning checks of the evolution strategies, through ``rlfast train`` with the
default presets on the parallel ES workers (one per core):

- CEM and CMA-ES reach 500 (the maximum) on CartPole-v1 within 30 generations;
- OpenAI-ES reaches 475 on CartPole-v1 within 60 generations;
- CMA-ES reaches -400 on Pendulum-v1 within 100 generations.

"Reaches" means the distribution's center averages the threshold over the 8 fixed
evaluation episodes of a log row (every generation); each run stops there
(``runner.stop_return``). Results do not depend on the number of workers (see
tests/es/test_runner.py), so the seeds below give the same generations on any machine.
Tuning record (2-core machine, seeds 0-4, generation reached): CEM CartPole 11, 9, 5, 6, 7;
CMA-ES CartPole 16, 10, 19, 15, 14; OpenAI-ES CartPole 37, 23, 46, 41, 31; CMA-ES Pendulum
81, 68, 49, 50, 58 (each run 1-3 s on CartPole, 8-14 s on Pendulum).
"""
import csv
import os

import pytest

from rlfast.cli import main


def _train(tmp_path, algo, env, seed, threshold, generations):
    run = tmp_path / f"{algo}_{env}"
    assert main(["train", algo, env, "--seed", str(seed), "--log-dir", str(run), "--no-progress",
                 "--set", f"runner.n_generations={generations}",
                 "--set", f"runner.stop_return={threshold}"]) == 0
    with open(os.path.join(run, "progress.csv"), newline="") as f:
        rows = [(int(r["Diagnostics/Iteration"]), float(r["ReturnAverage"]))
                for r in csv.DictReader(f)]
    history = ", ".join(f"{g}:{r:.0f}" for g, r in rows)
    reached = next((g for g, r in rows if r >= threshold), None)
    assert reached is not None and reached < generations, history
    assert rows[-1][0] == reached, history  # stopped there
    assert rows[0][1] < threshold, history  # the starting point does not already solve it
    return reached


@pytest.mark.parametrize("algo", ["cem", "cmaes"])
def test_cem_and_cmaes_reach_500_on_cartpole_within_30_generations(tmp_path, algo):
    _train(tmp_path, algo, "CartPole-v1", seed=0, threshold=500.0, generations=30)


def test_openai_es_reaches_475_on_cartpole_within_60_generations(tmp_path):
    _train(tmp_path, "openai_es", "CartPole-v1", seed=0, threshold=475.0, generations=60)


def test_cmaes_reaches_minus_400_on_pendulum_within_100_generations(tmp_path):
    _train(tmp_path, "cmaes", "Pendulum-v1", seed=2, threshold=-400.0, generations=100)
