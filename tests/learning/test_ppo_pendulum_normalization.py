"""Seeded learning checks for PPO on a continuous task with observation and reward
normalization (the ``rlfast train ppo`` preset for continuous actions).

1. The default preset (observation normalization in the agent, reward normalization in the
   algorithm) reaches a greedy evaluation return of -250 on Pendulum-v1 within 100k steps.
2. Without reward normalization (``algo.normalize_reward=False``), the same settings trained
   for half those steps stay at least 100 below the normalized run's best: a cheap check that
   the option changes learning (the tuning record below compares equal budgets).

Serial sampler, one seed (deterministic; see below). Tuning record (2-core machine, 100k steps,
greedy evaluations every 20,480 steps): with reward normalization seeds 1 / 2 evaluate -1382, -953,
-361, -298, -123, -211 / -1345, -815, -371, -241, -181, -210; without it -1382, -990, -1163,
-817, -485, -307 / -1345, -1007, -1052, -982, -720, -419. Each run took 22-25 s.
Measured with the test (stop_return=-250, evaluations every 20,480 steps): seed 1 reaches
-123 at 81,920 steps, its raw run trains 40,960 (best -952); seed 2 reaches -241 at 61,440,
its raw run trains 30,720 (best -887): 92k steps in all instead of 123k, 37-40 s instead of
46 s back to back on the loaded 2-core machine. Chosen then: seed 2.

Re-chosen for issue 37, which changed PPO's minibatch order (its own generator on the
learner's device) and made the default Adam fused. With the test's settings, the first
evaluation at or above -250 per seed: seed 0 at 81,920 steps (-152), 1 at 81,920 (-138),
2 at 100,352 (-225, the end-of-run evaluation, past the budget), 3 at 61,440 (-229),
4 at 100,352 (-153). Chosen: seed 3, the earliest (3 of seeds 0-4 reach -250 within the
100k budget).

Evaluations every 10,240 steps since (twice the preset's rate, so that the run can stop
sooner; the seeded run is then not the same as with evaluations every 20,480): seed 3
evaluates -1260, -954, -930, -540, -305, then -153 at 51,200 steps (97 above the
threshold); its raw run trains 26,624 steps (25,600 rounded up to whole 2,048-step
iterations; best -1028). 78k steps in all instead of 92k: about 44 s of CPU instead of 62.

Since PPO keeps Gaussian samples as drawn (the env wrapper clips what Pendulum gets):
seed 3 evaluates -1260, -981, -861, -307, -260, then -153 at 51,200 steps; its raw run
best -1033.
"""
import csv
import os

from rlfast.cli import main

SEED = 3
THRESHOLD = -250.0
BUDGET = 100_000
# Twice as often as the preset: the first run stops at the first evaluation reaching -250.
EVAL_INTERVAL = 10_240


def _evals(run_dir) -> list[tuple[int, float]]:
    with open(os.path.join(run_dir, "progress.csv"), newline="") as f:
        return [(int(float(r["Diagnostics/CumSteps"])), float(r["ReturnAverage"]))
                for r in csv.DictReader(f)]


def _train(run_dir, steps, *sets) -> list[tuple[int, float]]:
    argv = ["train", "ppo", "Pendulum-v1", "--sampler", "serial", "--seed", str(SEED),
            "--steps", str(steps), "--log-dir", str(run_dir), "--no-progress",
            "--set", f"runner.log_interval_steps={EVAL_INTERVAL}"]
    for item in sets:
        argv += ["--set", item]
    assert main(argv) == 0
    return _evals(run_dir)


def test_ppo_pendulum_with_observation_and_reward_normalization(tmp_path):
    normalized = _train(tmp_path / "normalized", BUDGET, f"runner.stop_return={THRESHOLD}")
    history = ", ".join(f"{s}:{r:.0f}" for s, r in normalized)
    assert normalized[0][0] == 0 and normalized[0][1] < -900, history  # untrained: far off
    reached = next((s for s, r in normalized if r >= THRESHOLD), None)
    assert reached is not None and reached <= BUDGET, history

    # The same settings without reward normalization, for half the steps the first run took
    # to reach -250 (its best evaluation then is still far below the normalized run's).
    raw = _train(tmp_path / "raw", max(reached // 2, 20_480), "algo.normalize_reward=False")
    best_raw = max(r for _, r in raw)
    best_normalized = max(r for _, r in normalized)
    assert best_normalized >= best_raw + 100, (history, raw)
