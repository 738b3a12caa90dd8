"""Seeded learning check: independent DQN agents (the ``dqn`` preset for ``pz:`` envs) learn
PettingZoo's MPE Spread with 2 agents and discrete actions.

Task: ``pz:mpe2.simple_spread_v3`` with ``N=2`` (2 agents, 2 landmarks, 25 cycles, local
ratio 0.5, ``continuous_actions=False``): each agent's reward is half the team's (minus the
summed distance from every landmark to its nearest agent) and half its own collision penalty.
The logged ``Return`` is the mean per-agent episode return. A uniformly random policy scores
-20.7 (std 6.7 over 200 episodes, measured with mpe2 1.1.1), so the mean of 32 evaluation
episodes of a random policy lies within about +-1.2 of that.

The agents: :class:`rlfast.agents.dqn.multiagent.MultiAgentDqnAgent`, one batch column per
agent, one shared Q-network that reads the one-hot agent id (the autonomous-learning-library's
``IndependentMultiagent``, batched); each agent's transitions go into the one replay buffer
as its own. Everything but the budget, the log interval and the evaluation size is the
preset's (``PRESETS["dqn"]["multiagent"]``): 8 environments x 5 steps, replay ratio 16,
learning from 2,000 agent transitions, epsilon from 1 to 0.05 over 30,000.

Acceptance criterion: serial sampler, seed 0, 120,000 steps. The greedy evaluation is noisy
(a std of 4-8 over 32 episodes, and the greedy policy changes between evaluations), so it is
judged as the mean of the last two evaluations (100k and 120k, 64 episodes): at least 3 above
the random policy (>= -17.7) and at least 3 above the untrained network's evaluation. The
training return of the last log row (every episode of the last 20,000 steps, epsilon 0.05)
must reach -17.7 too.

Tuning record (2-core Intel Xeon, serial sampler, beside a CI run): evaluations at 0, 20k,
..., 140k steps; seed 0: -21.99, -22.65, -17.83, -17.01, -14.91, -17.31, -14.88, -13.41
(training return -15.25 at 120k); seed 1: -21.71, -21.70, -15.67, -15.81, -17.24, -14.62,
-17.64, -13.41 (training -14.60 at 120k). The judged means at 120k: -16.10 (seed 0) and
-16.13 (seed 1), margins of 1.6; the training returns, margins of 2.5 and 3.1. About 1,100-1,500
steps/s, 80-110 s.
"""
from __future__ import annotations

import csv
import time

import pytest

pytest.importorskip("mpe2")

from rlfast.agents.dqn.multiagent import MultiAgentDqnAgent  # noqa: E402
from rlfast.experiments.presets import build_experiment, get_preset  # noqa: E402
from tests.learning._configs import assert_evaluated_every, describe, train  # noqa: E402

ENV_ID = "pz:mpe2.simple_spread_v3"
SEED = 0
N_STEPS = 120_000
LOG_INTERVAL = 20_000
RANDOM_RETURN = -20.7
THRESHOLD = RANDOM_RETURN + 3.0
MIN_GAIN = 3.0


def test_independent_dqn_learns_spread_with_two_agents(tmp_path, record_property):
    config = get_preset("dqn", ENV_ID)
    config["env"]["kwargs"].update(N=2, max_cycles=25, continuous_actions=False)
    config["sampler"].update(eval_n_envs=8, eval_max_trajectories=32,
                             eval_max_steps=8 * 4 * 25)
    config["runner"].update(n_steps=N_STEPS, log_interval_steps=LOG_INTERVAL)
    runner = build_experiment("dqn", ENV_ID, config, sampler="serial", seed=SEED)
    runner.progress_bar = False
    assert type(runner.agent) is MultiAgentDqnAgent
    start = time.time()
    result = train(runner, tmp_path, "dqn_spread")
    history = describe(result)
    print(f"independent DQN {ENV_ID} N=2 (serial, seed {SEED}) evals (steps:return): "
          f"{history}; {time.time() - start:.1f} s")
    assert_evaluated_every(result, LOG_INTERVAL)
    (first_steps, untrained), (_, before_last), (final_steps, last) = (
        result["eval_returns"][0], *result["eval_returns"][-2:])
    judged = (before_last + last) / 2
    record_property("final_eval_return", judged)
    assert first_steps == 0 and final_steps == N_STEPS
    assert judged >= THRESHOLD, (
        f"independent DQN (seed {SEED}): the mean of the last two evaluations is {judged:.2f} "
        f"after {N_STEPS} steps, below {THRESHOLD:.1f} (random {RANDOM_RETURN}); evals: "
        f"{history}")
    assert judged - untrained >= MIN_GAIN, (untrained, judged, history)
    (progress,) = tmp_path.rglob("progress.csv")
    with open(progress) as f:
        train_return = float(list(csv.DictReader(f))[-1]["Diagnostics/TrainReturn"])
    assert train_return >= THRESHOLD, (train_return, history)
