"""Fixtures shared by the seeded learning tests."""
from __future__ import annotations

import copy

import pytest

from tests.learning._configs import train
from tests.learning._r2d1_configs import masked_cartpole_dqn_runner


@pytest.fixture(scope="session")
def masked_cartpole_dqn_baseline(tmp_path_factory):
    """``baseline(seed, n_steps)``: the result of the feedforward DQN baseline on
    velocity-masked CartPole (``masked_cartpole_dqn_runner(recurrent=False, ...)``, a full
    run of ``n_steps``), trained once per session for each ``(seed, n_steps)``.

    The synchronous (test_r2d1_masked_cartpole.py) and asynchronous (test_async_learning.py)
    R2D1 checks compare against it at the step count their R2D1 run stopped at (seed 1,
    SerialSampler: deterministic; a few seconds for the 10-30k steps asked for; the full
    100k steps take ~30 s), so a run both ask for is trained once and shared. Each call
    returns a copy."""
    results: dict = {}

    def baseline(seed: int, n_steps: int) -> dict:
        key = (seed, n_steps)
        if key not in results:
            log_dir = tmp_path_factory.mktemp(f"dqn_masked_cartpole_seed{seed}_{n_steps}")
            results[key] = train(
                masked_cartpole_dqn_runner(recurrent=False, seed=seed, n_steps=n_steps),
                log_dir, "dqn_masked_cartpole")
        return copy.deepcopy(results[key])

    return baseline
