"""Seeded learning check: Categorical DQN (C51) reaches a return of 400 on CartPole-v1 within 100k
steps.

Acceptance criterion: with ``SerialSampler`` and a fixed seed, a greedy evaluation
(``MinibatchRlEval``, ``eps_eval=0``: 8 eval envs, at most 500 steps each, 8 completed episodes,
every 5000 steps) at or before 100,000 env steps has mean return >= 400 (the maximum is 500).
Training stops at that evaluation (``stop_return``): the run is deterministic, so it is the
evaluation a full run would make (nothing after it was ever checked).

Config (``_dqn_configs.CAT_DQN_CARTPOLE`` / ``CAT_DQN_AGENT``): the DQN test's settings
(8 envs x 4 steps; 64x64 ReLU MLP; batch 64, replay ratio 8, replay 100k, start after 1000
steps; double DQN; 10-step returns, discount 0.99; hard target update every 250 updates;
epsilon 1 -> 0.01 over 20k steps) with ``CatDqnAgent`` (51 atoms on [V_min, V_max] = [0, 100])
and Adam lr 1e-3 (epsilon 0.01 / 64, the C51 default); cross-entropy loss on the projected
target distribution.

Tuning record (2-core machine, one torch thread; first eval >= 400 / best / final eval return):
- smoke config (lr 1e-3, 3-step, eps_final 0.02, V_max 100): 80k/471/382, 65k/448/400 (seeds
  1-2), mostly 250-400 on the way.
- lr 5e-4, 10-step, V_max 100, seeds 1-5: 65k, 15k, 30k, 25k, 80k (seed 5 sat at ~160 until 45k).
- lr 5e-4, 10-step, V_max 200, seeds 1-5: 15k, 60k, 80k, 70k, 5k (seed 5: 408 at 5k, then
  ~120-200 until 85k).
- lr 5e-4 with 128x128 or replay ratio 16: seeds 1 / 5 at 15k / 25k and 15k / 50k.
- chosen (lr 1e-3, 10-step, V_max 100), seeds 1-6:
  15k/500/500, 35k/500/500, 40k/500/491, 35k/500/500, 25k/500/500, 25k/500/473.
Each run takes ~23-25 s (CPU time) on an idle machine.
"""
from __future__ import annotations

from tests.learning._configs import (assert_evaluated_every, assert_stopped_at, describe,
                                     first_step_reaching, train)
from tests.learning._dqn_configs import dqn_cartpole_runner

SEED = 1
N_STEPS = 100_000
LOG_INTERVAL = 5_000
THRESHOLD = 400.0


def test_cat_dqn_cartpole_reaches_400_within_100k_steps(tmp_path, record_property):
    runner = dqn_cartpole_runner(seed=SEED, n_steps=N_STEPS, categorical=True,
                                 log_interval_steps=LOG_INTERVAL, stop_return=THRESHOLD)
    result = train(runner, tmp_path, "cat_dqn_cartpole")
    evals = result["eval_returns"]
    history = describe(result)
    print(f"Categorical DQN CartPole-v1 (seed {SEED}) evals (steps:return): {history}")

    # Evaluation happened before training and at every 5000-step interval until the run ended.
    assert_evaluated_every(result, LOG_INTERVAL)
    # The untrained agent (uniformly random actions at the first evaluation) is far below.
    assert evals[0][1] < 100, history

    reached = first_step_reaching(evals, THRESHOLD, N_STEPS)
    record_property("steps_to_400", reached)
    print(f"first eval >= {THRESHOLD}: step {reached}")
    assert reached is not None, (
        f"Categorical DQN (seed {SEED}) never reached an evaluation return >= {THRESHOLD} "
        f"within {N_STEPS} steps; evals: {history}")
    assert_stopped_at(result, reached)  # stop_return ended training right there
