"""Seeded learning check: PPO with a GRU core learns POPGym's RepeatPreviousEasy.

Task: ``popgym:RepeatPreviousEasy`` (popgym 1.0): a 52-card deck dealt one card per step; the
agent observes the current card's suit (Discrete(4), one-hot for the model) and is rewarded
+-1/48 per step for naming the suit dealt 4 steps earlier, so every answer needs memory. The
episode return is in [-1, 1]; a uniformly random policy scores about -0.49 (the issue's 20
episodes: -0.487), and a memoryless policy can do no better in expectation.

Acceptance criterion: the ``popgym`` preset (recurrent PPO, GRU of 128 over a 64-unit MLP,
32 envs x 64 steps, discount 0.9, entropy 0.01, lr 1e-3; the environments reset mid-batch
and the loss resets the GRU state where an episode starts) with the serial sampler and seed
0 reaches a greedy evaluation return (8 episodes) >= 0.9 within 250,000 environment steps;
the run stops at that evaluation (``stop_return``).

Measured (2-core AMD EPYC, serial sampler; evaluations every 10,240 steps): seed 0 reaches
0.91 at 133,120 steps in 30.5 s alone; seeds 1 and 2 reach 0.97 at 143,360 and 0.90 at
153,600 steps (46 s each, the two run side by side). The runs are deterministic, the same
with one torch thread or two.
"""
from __future__ import annotations

import time

import pytest

pytest.importorskip("popgym")

from rlfast.experiments.presets import build_experiment, get_preset  # noqa: E402
from tests.learning._configs import first_step_reaching, train  # noqa: E402

ENV_ID = "popgym:RepeatPreviousEasy"
SEED = 0
N_STEPS = 250_000
THRESHOLD = 0.9
RANDOM_RETURN = -0.49


def test_gru_ppo_learns_repeat_previous(tmp_path, record_property):
    config = get_preset("ppo", ENV_ID)
    assert config["agent"]["recurrent"] and config["agent"]["core"] == "gru"
    config["runner"].update(n_steps=N_STEPS, stop_return=THRESHOLD)
    runner = build_experiment("ppo", ENV_ID, config, sampler="serial", seed=SEED, device="cpu")
    runner.progress_bar = False
    start = time.time()
    result = train(runner, tmp_path, "gru_popgym")
    history = ", ".join(f"{steps}:{ret:.2f}" for steps, ret in result["eval_returns"])
    print(f"PPO-GRU {ENV_ID} (serial, seed {SEED}) evals (steps:return): {history}; "
          f"{time.time() - start:.1f} s")
    assert runner.agent.model.body.core.kind == "gru"
    first_eval = result["eval_returns"][0][1]
    assert first_eval < 0, history  # the untrained policy cannot repeat the suit
    reached = first_step_reaching(result["eval_returns"], THRESHOLD, N_STEPS)
    record_property("steps_to_threshold", reached)
    assert reached is not None, (
        f"PPO-GRU (seed {SEED}) never reached {THRESHOLD} on {ENV_ID} within {N_STEPS} steps "
        f"(random {RANDOM_RETURN}); evals: {history}")
