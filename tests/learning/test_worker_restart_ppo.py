"""Seeded learning check under faults: PPO on CartPole-v1 with the cpu sampler, whose worker 1
is SIGKILLed twice by its own environment (at that environment's 300th and 900th steps),
and ``max_worker_restarts=2``: the run ends normally, reaches the threshold of the fault-free
check (test_ppo_cartpole.py: a greedy evaluation >= 475 within 100k steps, seed 1), and logs
``WorkerRestarts`` = 2. The faulting environment is env 5 of 8 (seed 1 + 5), on worker 1."""
from __future__ import annotations

import csv
import os

from tests.learning._configs import first_step_reaching, ppo_cartpole_runner, train
from tests.samplers._restart_envs import make_faulty_cartpole

SEED = 1
N_STEPS = 100_000
THRESHOLD = 475.0


def test_ppo_cartpole_learns_through_two_worker_restarts(tmp_path):
    markers = tmp_path / "markers"
    markers.mkdir()
    env_kwargs = dict(marker_dir=str(markers), n_faults=2, fault_steps=(300, 900),
                      fault_seed=SEED + 5)
    runner = ppo_cartpole_runner("cpu", seed=SEED, n_steps=N_STEPS, stop_return=THRESHOLD,
                                 EnvCls=make_faulty_cartpole, env_kwargs=env_kwargs,
                                 max_worker_restarts=2)
    result = train(runner, tmp_path, "ppo_cartpole_restarts")
    assert len(os.listdir(markers)) == 2  # both faults happened
    reached = first_step_reaching(result["eval_returns"], THRESHOLD, N_STEPS)
    print(f"PPO CartPole-v1 through 2 worker restarts (seed {SEED}): first eval >= "
          f"{THRESHOLD} at step {reached}; evals {result['eval_returns']}")
    assert reached is not None, result["eval_returns"]
    with open(tmp_path / "progress.csv") as f:
        restarts = [int(float(row["Diagnostics/WorkerRestarts"])) for row in csv.DictReader(f)]
    assert restarts[-1] == 2 and restarts[0] == 0
