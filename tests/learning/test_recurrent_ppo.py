"""Seeded learning check: recurrent PPO solves velocity-masked CartPole, feedforward PPO cannot.

The environment (``masked_envs.make_masked_cartpole``) shows only the cart position and pole
angle, so balancing needs velocities inferred from the observation history.

Acceptance criterion, both runs with seed 1 and a 150,000 env-step budget on the same env, the
score of a run being its BEST greedy evaluation return (``MinibatchRlEval``: 4 eval envs, up to
8 completed episodes, every 10,240 steps, counting only evaluations at or before 150,000 steps):
the recurrent agent scores >= 200, and >= 1.5x the feedforward agent's score. The recurrent
run stops at its first evaluation >= 200 (``stop_return``; the runs are deterministic, so that
evaluation is the one a full run makes, and its score, the best so far, makes the 1.5x
comparison no easier); the feedforward run trains its whole budget.

Config (``_configs.masked_cartpole_runner``; both runs: SerialSampler, 8 envs x 64 steps,
normalized observations, PPO lr 1e-3 linearly annealed, 4 epochs x 2 minibatches, clip 0.2,
discount 0.9, GAE lambda 0.95, value coeff 0.05, no entropy bonus, normalized advantages):
recurrent = RecurrentCategoricalPgAgent + CategoricalPgLstmModel (MLP [64] -> LSTM 64),
CpuWaitResetCollector, minibatches of 4 whole 64-step sequences; feedforward =
CategoricalPgAgent with 64x64 MLPs and the default (mid-batch reset) collector.

Tuning record (2-core machine; seeds 1-3 checked identical with one and two torch
threads; first eval >= 200 / best):
recurrent seeds 1-6: 51k/500, 51k/500, 31k/500, 72k/500, 41k/500, 61k/500;
feedforward seeds 1-3: best 47, 49, 51. With discount 0.99 and value coeff 0.5 the LSTM
agent stayed below 20 (its LSTM saturates fitting the value), hence the settings above.
Runs take ~17 s (recurrent) and ~10 s (feedforward) on an idle machine; with
``stop_return=200`` the recurrent run of seed 1 stops at 51,200 steps (score 500), ~6 s.
"""
from __future__ import annotations

from tests.learning._configs import (assert_evaluated_every, assert_stopped_at, best_return,
                                     describe, first_step_reaching, masked_cartpole_runner,
                                     train)

SEED = 1
N_STEPS = 150_000
THRESHOLD = 200.0
RATIO = 1.5
LOG_INTERVAL = 10_240


def test_recurrent_ppo_beats_feedforward_on_masked_cartpole(tmp_path, record_property):
    rnn_result = train(masked_cartpole_runner(recurrent=True, seed=SEED, n_steps=N_STEPS,
                                              log_interval_steps=LOG_INTERVAL,
                                              stop_return=THRESHOLD),
                       tmp_path / "recurrent", "recurrent_ppo_masked_cartpole")
    ff_result = train(masked_cartpole_runner(recurrent=False, seed=SEED, n_steps=N_STEPS,
                                             log_interval_steps=LOG_INTERVAL),
                      tmp_path / "feedforward", "ff_ppo_masked_cartpole")
    rnn_history, ff_history = describe(rnn_result), describe(ff_result)
    print(f"recurrent PPO evals (steps:return): {rnn_history}")
    print(f"feedforward PPO evals (steps:return): {ff_history}")

    for history, result in ((rnn_history, rnn_result), (ff_history, ff_result)):
        evals = result["eval_returns"]
        # Evaluated before training, then every log interval until the run ended.
        assert_evaluated_every(result, LOG_INTERVAL)
        assert evals[0][1] < 100, history  # the untrained policies fail quickly
    # The feedforward run trained its whole budget.
    assert ff_result["cum_steps"] >= N_STEPS, ff_history
    assert len([s for s, _ in ff_result["eval_returns"] if s <= N_STEPS]) >= 14, ff_history

    rnn_best = best_return(rnn_result["eval_returns"], N_STEPS)
    ff_best = best_return(ff_result["eval_returns"], N_STEPS)
    reached = first_step_reaching(rnn_result["eval_returns"], THRESHOLD, N_STEPS)
    record_property("recurrent_best", rnn_best)
    record_property("feedforward_best", ff_best)
    record_property("recurrent_steps_to_200", reached)
    print(f"best eval return within {N_STEPS} steps: recurrent {rnn_best:.1f} (first >= "
          f"{THRESHOLD} at step {reached}, where training stopped), feedforward {ff_best:.1f}")

    assert rnn_best >= THRESHOLD, (
        f"recurrent PPO's best evaluation return {rnn_best:.1f} < {THRESHOLD} within "
        f"{N_STEPS} steps; evals: {rnn_history}")
    assert_stopped_at(rnn_result, reached)  # stop_return ended training right there
    assert rnn_best >= RATIO * ff_best, (
        f"recurrent PPO's best evaluation return {rnn_best:.1f} is not >= {RATIO}x the "
        f"feedforward agent's {ff_best:.1f}; recurrent: {rnn_history}; feedforward: {ff_history}")
