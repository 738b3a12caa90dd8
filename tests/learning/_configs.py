"""Configurations and helpers shared by the seeded learning tests.

Each builder returns a ready ``MinibatchRlEval`` runner for one experiment; ``train`` runs it in a
logger context under the test's ``tmp_path`` and returns the runner's result dict, whose
``eval_returns`` is a list of ``(env steps, mean greedy-evaluation return)``. The hyperparameters
here were tuned on a 2-core CPU machine (the tuning record is in each test module's docstring).
"""
from __future__ import annotations

import os
from typing import Optional

import torch

from rlfast.agents import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlfast.algos import A2C, PPO
from rlfast.envs import make
from rlfast.models.pg import CategoricalPgLstmModel
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import CpuSampler, CpuWaitResetCollector, SerialSampler
from rlfast.utils.logging import logger_context

from tests.learning.masked_envs import make_masked_cartpole

CARTPOLE = dict(id="CartPole-v1")
# Greedy evaluation: 4 environments, at most 500 steps each (one full CartPole-v1 episode),
# stopping after 8 completed episodes. Only completed episodes count, so the mean is never
# inflated by unfinished (possibly long) ones.
EVAL_KWARGS = dict(eval_n_envs=4, eval_max_steps=4 * 500, eval_max_trajectories=8)
TWO_WORKERS = dict(workers_cpus=[[0], [1]])
SAMPLERS = {"serial": SerialSampler, "cpu": CpuSampler}


def _sampler_cls(sampler: str):
    if sampler not in SAMPLERS:
        raise ValueError(f"sampler must be one of {sorted(SAMPLERS)}, got {sampler!r}")
    return SAMPLERS[sampler]


def _affinity(sampler: str) -> Optional[dict]:
    return TWO_WORKERS if sampler == "cpu" else None


def ppo_cartpole_runner(sampler: str, seed: int, n_steps: int = 100_000,
                        log_interval_steps: int = 5_000,
                        stop_return: Optional[float] = None, EnvCls=make,
                        env_kwargs: Optional[dict] = None,
                        max_worker_restarts: int = 0) -> MinibatchRlEval:
    """Feedforward PPO on CartPole-v1: 8 envs x 125 steps = 1000 steps per iteration.
    ``stop_return``: end training at the first evaluation reaching it. ``EnvCls`` and
    ``env_kwargs``: another CartPole maker (one that injects faults)."""
    SamplerCls = _sampler_cls(sampler)
    sampler_obj = SamplerCls(EnvCls=EnvCls, env_kwargs=env_kwargs or CARTPOLE, batch_T=125,
                             batch_B=8, max_decorrelation_steps=100,
                             max_worker_restarts=max_worker_restarts, **EVAL_KWARGS)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64]))
    algo = PPO(discount=0.99, learning_rate=3e-3, gae_lambda=0.95, minibatches=4, epochs=4,
               ratio_clip=0.2, normalize_advantage=True, entropy_loss_coeff=0.0,
               value_loss_coeff=0.5, linear_lr_schedule=True)
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler_obj, n_steps=n_steps,
                           seed=seed, affinity=_affinity(sampler),
                           log_interval_steps=log_interval_steps, progress_bar=False,
                           stop_return=stop_return)


A2C_DEFAULTS = dict(discount=0.99, learning_rate=7e-4, gae_lambda=0.95, value_loss_coeff=0.5,
                    entropy_loss_coeff=0.0, normalize_advantage=True, clip_grad_norm=0.5,
                    OptimCls=torch.optim.RMSprop, optim_kwargs=dict(alpha=0.99, eps=1e-5))


def a2c_cartpole_runner(seed: int, n_steps: int = 200_000, sampler: str = "serial",
                        batch_T: int = 5, batch_B: int = 16, log_interval_steps: int = 10_240,
                        hidden_sizes=(64, 64), stop_return: Optional[float] = None,
                        **algo_overrides) -> MinibatchRlEval:
    """A2C on CartPole-v1 (one gradient step per ``batch_T * batch_B`` batch).
    ``stop_return``: end training at the first evaluation reaching it."""
    SamplerCls = _sampler_cls(sampler)
    sampler_obj = SamplerCls(EnvCls=make, env_kwargs=CARTPOLE, batch_T=batch_T, batch_B=batch_B,
                             max_decorrelation_steps=100, **EVAL_KWARGS)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=list(hidden_sizes)))
    algo = A2C(**{**A2C_DEFAULTS, **algo_overrides})
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler_obj, n_steps=n_steps,
                           seed=seed, affinity=_affinity(sampler),
                           log_interval_steps=log_interval_steps, progress_bar=False,
                           stop_return=stop_return)


# Tuned for the shared-trunk LSTM model: its LSTM feeds both the policy and the value head, and
# large value targets (CartPole at discount 0.99: 20-100) make the value loss saturate the LSTM
# (|h| ~ 1, the cell counting time steps), which leaves the policy near uniform. A short horizon
# (discount 0.9: values <= 10), a small value-loss weight and observation normalization (the pole
# angle spans only +-0.21 rad) keep the LSTM features useful to the policy. The feedforward
# comparison uses exactly the same settings.
MASKED_PPO_DEFAULTS = dict(discount=0.9, learning_rate=1e-3, gae_lambda=0.95, minibatches=2,
                           epochs=4, ratio_clip=0.2, normalize_advantage=True,
                           entropy_loss_coeff=0.0, value_loss_coeff=0.05, linear_lr_schedule=True)


def masked_cartpole_runner(recurrent: bool, seed: int, n_steps: int = 150_000,
                           sampler: str = "serial", batch_T: int = 64, batch_B: int = 8,
                           lstm_size: int = 64, hidden_sizes=(64,),
                           log_interval_steps: int = 10_240,
                           stop_return: Optional[float] = None,
                           **algo_overrides) -> MinibatchRlEval:
    """PPO on velocity-masked CartPole-v1. Recurrent: ``RecurrentCategoricalPgAgent`` with
    ``CategoricalPgLstmModel`` (MLP ``hidden_sizes`` -> LSTM ``lstm_size``), the wait-reset
    collector, and minibatches of whole ``batch_T``-step sequences (``minibatches`` splits the
    ``batch_B`` columns). Feedforward: ``CategoricalPgAgent`` (64x64 MLPs) with the default
    mid-batch-reset collector. Both normalize observations and use the same PPO settings.
    ``stop_return``: end training at the first evaluation reaching it."""
    SamplerCls = _sampler_cls(sampler)
    if recurrent:
        agent = RecurrentCategoricalPgAgent(
            ModelCls=CategoricalPgLstmModel,
            model_kwargs=dict(hidden_sizes=list(hidden_sizes), lstm_size=lstm_size,
                              normalize_observation=True))
        collector = dict(CollectorCls=CpuWaitResetCollector)
    else:
        agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[64, 64],
                                                     normalize_observation=True))
        collector = {}
    sampler_obj = SamplerCls(EnvCls=make_masked_cartpole, env_kwargs={}, batch_T=batch_T,
                             batch_B=batch_B, max_decorrelation_steps=100, **collector,
                             **EVAL_KWARGS)
    algo = PPO(**{**MASKED_PPO_DEFAULTS, **algo_overrides})
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler_obj, n_steps=n_steps,
                           seed=seed, affinity=_affinity(sampler),
                           log_interval_steps=log_interval_steps, progress_bar=False,
                           stop_return=stop_return)


def train(runner: MinibatchRlEval, log_dir, name: str) -> dict:
    """Run ``runner.train()`` with the logger writing into ``log_dir``; return its result."""
    with logger_context(os.fspath(log_dir), 0, name, {}, override_prefix=True):
        return runner.train()


def first_step_reaching(eval_returns: list, threshold: float, max_steps: int) -> Optional[int]:
    """Env steps of the first evaluation at or before ``max_steps`` whose mean return is
    ``>= threshold``, or None if there is none."""
    for steps, ret in eval_returns:
        if steps <= max_steps and ret >= threshold:
            return steps
    return None


def best_return(eval_returns: list, max_steps: int) -> float:
    """Highest mean evaluation return among evaluations at or before ``max_steps``."""
    values = [ret for steps, ret in eval_returns if steps <= max_steps and ret == ret]
    if not values:
        raise AssertionError(f"no evaluation at or before {max_steps} steps: {eval_returns}")
    return max(values)


def assert_evaluated_every(result: dict, interval_steps: int) -> None:
    """The run evaluated before training (at step 0) and then at least every
    ``interval_steps`` environment steps until it ended (at its budget, or earlier at the
    evaluation that reached ``stop_return``)."""
    history = describe(result)
    steps = [s for s, _ in result["eval_returns"]]
    assert steps and steps[0] == 0, history
    assert all(0 < b - a <= interval_steps for a, b in zip(steps, steps[1:])), history
    assert steps[-1] == result["cum_steps"], (result["cum_steps"], history)


def assert_stopped_at(result: dict, reached: int) -> None:
    """``stop_return`` ended training at the evaluation that first reached it (step
    ``reached``): that evaluation is the last one, and no step was trained after it."""
    assert result["eval_returns"][-1][0] == reached == result["cum_steps"], (
        result["cum_steps"], describe(result))


def describe(result: dict) -> str:
    """Compact evaluation history for assertion messages."""
    return ", ".join(f"{s}:{r:.0f}" for s, r in result["eval_returns"])
