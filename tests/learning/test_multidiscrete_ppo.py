"""Seeded learning check: the ``ppo`` preset learns a MultiDiscrete task with the per-dimension
categorical agent.

Task (``tests.envs._space_envs.MatchTargetEnv``, id ``rlfast_test/MatchTarget-v0``): action space
``MultiDiscrete([3, 4, 2])``; each step shows one random one-hot context per action dimension,
the target of dimension ``d`` is ``(context_d + d + 1) % nvec[d]``, and the reward is the number
of dimensions that hit their target. Episodes last 16 steps, so the best return is 48 and a
uniformly random policy averages 16 * (1/3 + 1/4 + 1/2) = 17.3.

Acceptance criterion: with the ``ppo`` preset (its "discrete" family: 16 envs x 64 steps =
1024 steps per iteration, 64x64 tanh MLPs, lr 3e-3 annealed, 4 epochs x 4 minibatches, clip
0.2, GAE lambda 0.95), the serial sampler and seed 1, a greedy evaluation (8 episodes, every
2048 steps) at or before 20,000 env steps has mean return >= 47 (of 48).
Training stops at that evaluation (``stop_return``): the run is deterministic, so it is the
evaluation a full run would make (nothing after it was ever checked).

Tuning record (2-core machine, one torch thread as in tests/conftest.py; first eval >= 47):
seeds 1-6 reached it at 10240, 6144, 16384, 4096, 4096 and 4096 steps; the best evals were
48 (seed 5: 47.6). Each 20k-step run takes 4-7 s. Before this check the preset gave this env a
Gaussian agent, whose actions (e.g. [-1 0 1]) are not even valid MultiDiscrete actions.
"""
from __future__ import annotations

import time

import tests.envs._space_envs  # noqa: F401  (registers rlfast_test/MatchTarget-v0)
from rlfast.agents import MultiCategoricalPgAgent
from rlfast.experiments.presets import build_experiment, get_preset
from tests.learning._configs import (assert_evaluated_every, assert_stopped_at, describe,
                                     first_step_reaching, train)

ENV_ID = "rlfast_test/MatchTarget-v0"
SEED = 1
N_STEPS = 20_000
LOG_INTERVAL = 2048
THRESHOLD = 47.0
RANDOM_RETURN = 16 * (1 / 3 + 1 / 4 + 1 / 2)


def test_ppo_preset_learns_multidiscrete_task(tmp_path, record_property):
    config = get_preset("ppo", ENV_ID)
    config["runner"].update(n_steps=N_STEPS, log_interval_steps=LOG_INTERVAL)
    runner = build_experiment("ppo", ENV_ID, config, sampler="serial", seed=SEED)
    runner.progress_bar = False
    runner.stop_return = THRESHOLD  # the preset has no runner.stop_return key
    assert type(runner.agent) is MultiCategoricalPgAgent
    start = time.time()
    result = train(runner, tmp_path, "ppo_multidiscrete")
    evals = result["eval_returns"]
    history = describe(result)
    print(f"PPO {ENV_ID} (serial, seed {SEED}) evals (steps:return): {history}; "
          f"{time.time() - start:.1f} s")

    assert_evaluated_every(result, LOG_INTERVAL)  # at 0, then every 2048 steps
    assert evals[0][1] < RANDOM_RETURN + 8, history  # the untrained policy is near random
    reached = first_step_reaching(evals, THRESHOLD, N_STEPS)
    record_property("steps_to_47", reached)
    assert reached is not None, (
        f"PPO (seed {SEED}) never reached an evaluation return >= {THRESHOLD} (of 48) within "
        f"{N_STEPS} steps; evals: {history}")
    assert_stopped_at(result, reached)  # stop_return ended training right there
