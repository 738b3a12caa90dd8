"""Seeded learning check: feedforward PPO solves CartPole-v1 within 100k environment steps.

Acceptance criterion: with ``CpuSampler`` (2 worker processes) and with ``SerialSampler``, a
greedy evaluation (``MinibatchRlEval``: 4 eval envs, up to 8 completed episodes, every 5000
steps) at or before 100,000 env steps has mean return >= 475 (CartPole-v1's maximum is 500).
Training stops at that evaluation (``stop_return``): the runs are deterministic, so it is the
evaluation a full run would make (nothing after it was ever checked).

Config (``_configs.ppo_cartpole_runner``): 8 envs x 125 steps = 1000 steps/iteration, 100
iterations; 64x64 tanh MLPs; PPO lr 3e-3 (linearly annealed), 4 epochs x 4 minibatches, clip
0.2, GAE lambda 0.95, discount 0.99, normalized advantages, value coeff 0.5, no entropy bonus.

Tuning record (2-core machine, one torch thread as in tests/conftest.py; first eval >= 475):
CpuSampler seeds 1-5: 20k, 35k, 25k, 30k, 15k steps; SerialSampler seeds 1-5: 30k, 35k, 20k,
20k, 15k steps; every run's best eval return was 500. Each run takes ~7-14 s on an idle machine.
"""
from __future__ import annotations

import pytest

from tests.learning._configs import (assert_evaluated_every, assert_stopped_at, describe,
                                     first_step_reaching, ppo_cartpole_runner, train)

SEED = 1
N_STEPS = 100_000
LOG_INTERVAL = 5_000
THRESHOLD = 475.0


@pytest.mark.parametrize("sampler", ["cpu", "serial"])
def test_ppo_cartpole_reaches_475_within_100k_steps(sampler, tmp_path, record_property):
    runner = ppo_cartpole_runner(sampler, seed=SEED, n_steps=N_STEPS,
                                 log_interval_steps=LOG_INTERVAL, stop_return=THRESHOLD)
    result = train(runner, tmp_path, f"ppo_cartpole_{sampler}")
    evals = result["eval_returns"]
    history = describe(result)
    print(f"PPO CartPole-v1 ({sampler} sampler, seed {SEED}) evals (steps:return): {history}")

    # Evaluation happened before training and at every 5000-step interval until the run ended.
    assert_evaluated_every(result, LOG_INTERVAL)
    # The untrained policy is far from the threshold, so reaching it is learning.
    assert evals[0][1] < 200, history

    reached = first_step_reaching(evals, THRESHOLD, N_STEPS)
    record_property("steps_to_475", reached)
    print(f"first eval >= {THRESHOLD}: step {reached}")
    assert reached is not None, (
        f"PPO ({sampler} sampler, seed {SEED}) never reached an evaluation return >= "
        f"{THRESHOLD} within {N_STEPS} steps; evals: {history}")
    assert_stopped_at(result, reached)  # stop_return ended training right there
