"""Configurations for the asynchronous learning tests (``test_async_learning.py``).

Each builder returns a ready ``AsyncRlEval`` runner (one sampler process feeding a shared
replay buffer, the optimizer throttled to the algorithm's replay ratio); run it with
``tests.learning._configs.train``. ``sampler_throttle=True`` also holds the sampler back so
that the replay ratio never falls below the algorithm's either (see ``AsyncRlBase``). The
settings are the synchronous tests' tuned ones:

- DQN on CartPole-v1: the ``dqn`` preset (= ``_dqn_configs.DQN_CARTPOLE``), built exactly as
  ``rlfast train dqn CartPole-v1 --runner async --sampler serial`` builds it;
- SAC on Pendulum-v1: the Pendulum-tuned ``sac`` preset (as ``test_qpg_pendulum.py``);
- R2D1 on velocity-masked CartPole: ``_r2d1_configs.R2D1_MASKED`` / ``R2D1_AGENT`` /
  ``R2D1_SAMPLER`` with the wait-reset collector (``CpuWaitResetCollector``).

Affinity: one torch thread in the optimizer and in the sampler process (neither pinned to a
core: the tests share a 2-core machine with other jobs), two workers (cores 0 and 1) for the
parallel samplers.
"""
from __future__ import annotations

from rlfast.agents import R2d1Agent
from rlfast.algos import R2D1
from rlfast.experiments.presets import build_experiment, get_preset
from rlfast.runners import AsyncRlEval
from rlfast.samplers import AsyncCpuSampler, AsyncSerialSampler, CpuWaitResetCollector

from tests.learning._r2d1_configs import (MASKED_DQN_EVAL_KWARGS, R2D1_AGENT, R2D1_MASKED,
                                          R2D1_SAMPLER)
from tests.learning.masked_envs import make_masked_cartpole


def async_affinity(n_workers: int = 0) -> dict:
    """Optimizer on the CPU with one torch thread; sampler process with one thread (not
    pinned); ``n_workers`` workers (parallel samplers) on cores 0, 1, 0, ..."""
    sampler = dict(master_torch_threads=1, worker_torch_threads=1)
    if n_workers:
        sampler["workers_cpus"] = [[i % 2] for i in range(n_workers)]
    return dict(optimizer=[dict(cuda_idx=None, master_torch_threads=1)], sampler=sampler)


def async_preset_runner(algo: str, env_id: str, seed: int, n_steps: int,
                        log_interval_steps: int, stop_return: float | None,
                        sampler: str = "serial", copier: str = "optimizer",
                        sampler_throttle: bool = False, **sections) -> AsyncRlEval:
    """``rlfast train ALGO ENV_ID --runner async --sampler SAMPLER --set async.copier=COPIER
    --set async.sampler_throttle=SAMPLER_THROTTLE`` as a runner object: the preset, with
    ``sections`` (``algo=dict(...)``, ``sampler=dict(...)``...) merged in."""
    config = get_preset(algo, env_id)
    config["runner"].update(n_steps=n_steps, log_interval_steps=log_interval_steps,
                            progress_bar=False, stop_return=stop_return)
    config["async"] = dict(config.get("async", {}), copier=copier,
                           sampler_throttle=sampler_throttle)
    for section, values in sections.items():
        config.setdefault(section, {}).update(values)
    n_workers = 2 if sampler != "serial" else 0
    return build_experiment(algo, env_id, config, sampler=sampler, seed=seed, runner="async",
                            affinity=async_affinity(n_workers))


def async_dqn_cartpole_runner(seed: int, n_steps: int = 100_000,
                              log_interval_steps: int = 5_000,
                              stop_return: float | None = 450.0,
                              sampler: str = "serial", sampler_throttle: bool = False,
                              **sections) -> AsyncRlEval:
    """Async DQN on CartPole-v1 with the tuned ``dqn`` preset (8 envs x 4 steps per batch,
    4 updates of 64 per batch: replay ratio 8)."""
    return async_preset_runner("dqn", "CartPole-v1", seed, n_steps, log_interval_steps,
                               stop_return, sampler=sampler, sampler_throttle=sampler_throttle,
                               **sections)


def async_sac_pendulum_runner(seed: int, n_steps: int = 20_000,
                              log_interval_steps: int = 1_000,
                              stop_return: float | None = -250.0,
                              sampler_throttle: bool = False) -> AsyncRlEval:
    """Async SAC on Pendulum-v1 with the Pendulum-tuned ``sac`` preset (one environment,
    one update of 256 per step: replay ratio 256; 64x64 networks; learning from 1000 steps)."""
    return async_preset_runner("sac", "Pendulum-v1", seed, n_steps, log_interval_steps,
                               stop_return, sampler_throttle=sampler_throttle)


def async_r2d1_masked_runner(seed: int, n_steps: int = 100_000,
                             log_interval_steps: int = 10_000,
                             stop_return: float | None = None, sampler: str = "serial",
                             sampler_throttle: bool = False,
                             **algo_overrides) -> AsyncRlEval:
    """Async R2D1 on velocity-masked CartPole with the synchronous test's tuned settings
    (8 envs x 20 steps per batch, 16 sequences of 10 + 20 steps per update, replay ratio 16:
    8 updates per batch; the replay holds the whole run)."""
    algo_cfg = dict(R2D1_MASKED, **algo_overrides)
    batch = R2D1_SAMPLER["batch_T"] * R2D1_SAMPLER["batch_B"]
    algo_cfg.setdefault("replay_size", -(-n_steps // batch) * batch + batch)
    agent_cfg = dict(R2D1_AGENT)
    eps = dict(eps_init=1.0, eps_final=agent_cfg.pop("eps_final"), eps_eval=0.0)
    model_kwargs = dict(agent_cfg, hidden_sizes=list(agent_cfg["hidden_sizes"]))
    SamplerCls = AsyncSerialSampler if sampler == "serial" else AsyncCpuSampler
    sampler_obj = SamplerCls(EnvCls=make_masked_cartpole, env_kwargs={},
                             CollectorCls=CpuWaitResetCollector, max_decorrelation_steps=0,
                             **R2D1_SAMPLER, **MASKED_DQN_EVAL_KWARGS)
    return AsyncRlEval(algo=R2D1(**algo_cfg), agent=R2d1Agent(model_kwargs=model_kwargs, **eps),
                       sampler=sampler_obj, n_steps=n_steps, seed=seed,
                       affinity=async_affinity(2 if sampler != "serial" else 0),
                       log_interval_steps=log_interval_steps, stop_return=stop_return,
                       sampler_throttle=sampler_throttle, progress_bar=False)
