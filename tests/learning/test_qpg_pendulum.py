"""Seeded learning checks: SAC and TD3 reach an evaluation return of -250 on Pendulum-v1
within 20k environment steps (SAC also with the device replay).

Each run is exactly ``rlfast train {sac,td3} Pendulum-v1`` (the Pendulum-tuned preset from
``rlfast.experiments.qpg_presets``, serial sampler, one environment, one gradient update per
step once learning starts), with ``stop_return=-250``: training ends at the first evaluation
(5 deterministic episodes, every 1000 steps here) whose mean return reaches -250, so the test
takes as long as learning does. An untrained policy scores about -1200 to -1500; a good one
about -150 (Pendulum's random start states spread single-episode returns from 0 to -400).

Tuning record: see the module docstring of rlfast/experiments/qpg_presets.py.
"""
from __future__ import annotations

import pytest
import torch

from rlfast.experiments.presets import build_experiment, get_preset
from tests.learning._configs import describe, train

BUDGET = 20_000
THRESHOLD = -250.0
SEEDS = {"sac": 0, "td3": 0}


def _run(algo: str, seed: int, tmp_path, replay_device: str = "auto"):
    config = get_preset(algo, "Pendulum-v1")
    config["runner"].update(n_steps=BUDGET, log_interval_steps=1000)
    config["algo"]["replay_device"] = replay_device
    runner = build_experiment(algo, "Pendulum-v1", config, sampler="serial", seed=seed,
                              affinity=dict(master_torch_threads=torch.get_num_threads()))
    runner.progress_bar = False
    runner.stop_return = THRESHOLD
    return train(runner, tmp_path, f"{algo}_pendulum")


@pytest.mark.parametrize("algo, replay_device", [("sac", "auto"), ("td3", "auto"),
                                                  ("sac", "device")])
def test_reaches_minus_250_on_pendulum_within_20k_steps(algo, replay_device, tmp_path,
                                                       record_property):
    """``device``: the replay in torch tensors (here on the CPU, the GPU path's code), which
    draws its batches from torch's generator instead of numpy's: another learning run."""
    seed = SEEDS[algo]
    result = _run(algo, seed, tmp_path, replay_device)
    evals = result["eval_returns"]
    history = describe(result)
    print(f"{algo.upper()} Pendulum-v1 (seed {seed}) evals (steps:return): {history}")
    # The first evaluation (before training) is far below the threshold.
    assert evals[0][0] == 0 and evals[0][1] < -700, history
    reached = next((s for s, r in evals[1:] if r >= THRESHOLD), None)
    record_property("steps_to_minus_250", reached)
    assert reached is not None and reached <= BUDGET, (
        f"{algo.upper()} (seed {seed}) never reached an evaluation return >= {THRESHOLD} within "
        f"{BUDGET} steps; evals: {history}")
    # stop_return ended training at that evaluation.
    assert result["cum_steps"] == reached, (result["cum_steps"], history)
