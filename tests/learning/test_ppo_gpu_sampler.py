"""Seeded learning check: feedforward PPO with GpuSampler solves CartPole-v1 within 100k steps.

Acceptance criterion: with ``GpuSampler`` (agent batched in the master, on the CPU here; 2
worker processes stepping the environments), a greedy evaluation (``MinibatchRlEval``: 4 eval
envs, up to 8 completed episodes, every 5000 steps) at or before 100,000 env steps has mean
return >= 475 (CartPole-v1's maximum is 500).
Training stops at that evaluation (``stop_return``): the run is deterministic, so it is the
evaluation a full run would make (nothing after it was ever checked).

Config: exactly ``_configs.ppo_cartpole_runner``'s (8 envs x 125 steps per iteration, 64x64 tanh
MLPs, PPO lr 3e-3 linearly annealed, 4 epochs x 4 minibatches, clip 0.2, GAE lambda 0.95,
discount 0.99, normalized advantages, value coeff 0.5, no entropy bonus); that builder only
takes "serial" / "cpu", so the runner is built here with the same settings and sampler.

No retuning was needed. Record (2-core machine, one torch thread, first eval >= 475): GpuSampler
seeds 1-5: 10k, 10k, 5k, 15k, 15k steps, each run 10-14 s; every run's best eval return was 500.
AlternatingSampler and NoOverlapAlternatingSampler with seed 1 give the very same evaluation
history as GpuSampler (10k), as they should: same seeds, same actions, same data.
"""
from __future__ import annotations

import time

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import GpuSampler
from tests.learning._configs import (CARTPOLE, EVAL_KWARGS, TWO_WORKERS,
                                     assert_evaluated_every, assert_stopped_at, describe,
                                     first_step_reaching, train)

SEED = 1
N_STEPS = 100_000
LOG_INTERVAL = 5_000
THRESHOLD = 475.0


def ppo_cartpole_gpu_runner(seed: int, n_steps: int = N_STEPS, SamplerCls=GpuSampler,
                            log_interval_steps: int = LOG_INTERVAL,
                            stop_return: float | None = None) -> MinibatchRlEval:
    """``_configs.ppo_cartpole_runner`` with a GPU-agent sampler (agent on the CPU);
    ``stop_return``: end training at the first evaluation reaching it."""
    sampler = SamplerCls(EnvCls=make, env_kwargs=CARTPOLE, batch_T=125, batch_B=8,
                         max_decorrelation_steps=100, **EVAL_KWARGS)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64]))
    algo = PPO(discount=0.99, learning_rate=3e-3, gae_lambda=0.95, minibatches=4, epochs=4,
               ratio_clip=0.2, normalize_advantage=True, entropy_loss_coeff=0.0,
               value_loss_coeff=0.5, linear_lr_schedule=True)
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler, n_steps=n_steps, seed=seed,
                           affinity=TWO_WORKERS, log_interval_steps=log_interval_steps,
                           progress_bar=False, stop_return=stop_return)


def test_ppo_gpu_sampler_cartpole_reaches_475_within_100k_steps(tmp_path, record_property):
    runner = ppo_cartpole_gpu_runner(seed=SEED, stop_return=THRESHOLD)
    start = time.time()
    result = train(runner, tmp_path, "ppo_cartpole_gpu_sampler")
    runtime = time.time() - start
    evals = result["eval_returns"]
    history = describe(result)
    print(f"PPO CartPole-v1 (GpuSampler, seed {SEED}) evals (steps:return): {history}")

    # Evaluation happened before training and at every 5000-step interval until the run ended.
    assert_evaluated_every(result, LOG_INTERVAL)
    # The untrained policy is far from the threshold, so reaching it is learning.
    assert evals[0][1] < 200, history
    assert runner.sampler.workers == []  # the runner shut the sampler down

    reached = first_step_reaching(evals, THRESHOLD, N_STEPS)
    record_property("steps_to_475", reached)
    record_property("runtime_s", round(runtime, 1))
    print(f"first eval >= {THRESHOLD}: step {reached}; run took {runtime:.1f} s")
    assert reached is not None, (
        f"PPO (GpuSampler, seed {SEED}) never reached an evaluation return >= {THRESHOLD} "
        f"within {N_STEPS} steps; evals: {history}")
    assert_stopped_at(result, reached)  # stop_return ended training right there
