"""Preset configurations for ``rlfast train ALGO ENV`` and the builder that assembles them.

A preset is a nested dict with sections ``agent``, ``algo``, ``sampler`` and ``runner``;
every leaf can be overridden from the command line by its dotted key. The agent and model are
chosen from the environment: categorical on discrete actions, Gaussian on continuous ones.
"""
from __future__ import annotations

import copy
import os

from rlfast.agents import (CategoricalPgAgent, MujocoFfAgent, MujocoLstmAgent,
                           RecurrentCategoricalPgAgent)
from rlfast.algos import A2C, PPO
from rlfast.envs import make as make_gym_env
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import (CpuSampler, CpuWaitResetCollector, SerialSampler)
from rlfast.samplers.parallel.cpu.collectors import CpuEvalCollector, CpuResetCollector
from rlfast.samplers.serial.collectors import SerialEvalCollector

_COMMON_SAMPLER = dict(max_decorrelation_steps=100, eval_n_envs=4, eval_max_steps=4 * 500,
                       eval_max_trajectories=8)

PRESETS: dict[str, dict] = {
    "ppo": dict(
        discrete=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64]), greedy_eval=True,
                       recurrent=False),
            algo=dict(discount=0.99, learning_rate=3e-3, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.0, clip_grad_norm=1.0, gae_lambda=0.95,
                      minibatches=4, epochs=4, ratio_clip=0.2, linear_lr_schedule=True,
                      normalize_advantage=True),
            sampler=dict(batch_T=128, batch_B=8, **_COMMON_SAMPLER),
            runner=dict(n_steps=100_000, log_interval_steps=10_240),
        ),
        continuous=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64], normalize_observation=True),
                       greedy_eval=True, recurrent=False),
            algo=dict(discount=0.99, learning_rate=1e-3, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.0, clip_grad_norm=1.0, gae_lambda=0.95,
                      minibatches=32, epochs=10, ratio_clip=0.2, linear_lr_schedule=True,
                      normalize_advantage=True),
            sampler=dict(batch_T=256, batch_B=8, **_COMMON_SAMPLER),
            runner=dict(n_steps=200_000, log_interval_steps=20_480),
        ),
    ),
    "a2c": dict(
        discrete=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64]), greedy_eval=True,
                       recurrent=False),
            algo=dict(discount=0.99, learning_rate=1e-3, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.01, clip_grad_norm=0.5, gae_lambda=1.0,
                      normalize_advantage=False),
            sampler=dict(batch_T=5, batch_B=16, **_COMMON_SAMPLER),
            runner=dict(n_steps=200_000, log_interval_steps=20_000),
        ),
        continuous=dict(
            agent=dict(model_kwargs=dict(hidden_sizes=[64, 64], normalize_observation=True),
                       greedy_eval=True, recurrent=False),
            algo=dict(discount=0.99, learning_rate=7e-4, value_loss_coeff=0.5,
                      entropy_loss_coeff=0.0, clip_grad_norm=0.5, gae_lambda=0.95,
                      normalize_advantage=True),
            sampler=dict(batch_T=16, batch_B=16, **_COMMON_SAMPLER),
            runner=dict(n_steps=200_000, log_interval_steps=20_480),
        ),
    ),
}

ALGOS = {"ppo": PPO, "a2c": A2C}
SAMPLERS = ("serial", "cpu")


def action_kind(env_id: str) -> str:
    """'discrete' or 'continuous', read from the environment's action space."""
    env = make_gym_env(env_id)
    try:
        return "discrete" if getattr(env.action_space, "n", None) is not None and \
            tuple(env.action_space.shape) == () else "continuous"
    finally:
        env.close()


def get_preset(algo: str, env_id: str) -> dict:
    """The preset for ``algo`` matched to ``env_id``'s action space (a deep copy)."""
    if algo not in PRESETS:
        raise ValueError(f"unknown algorithm {algo!r}; choose from {sorted(PRESETS)}")
    return copy.deepcopy(PRESETS[algo][action_kind(env_id)])


def default_affinity(n_envs: int, sampler: str) -> dict:
    """Use every available core: one worker per core (at most one per env)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:
        cpus = list(range(os.cpu_count() or 1))
    if sampler == "serial":
        return dict(master_cpus=cpus, master_torch_threads=1)
    n_workers = max(1, min(len(cpus), n_envs))
    return dict(master_cpus=cpus, master_torch_threads=1,
                workers_cpus=[[c] for c in cpus[:n_workers]], worker_torch_threads=1)


def build_experiment(algo_name: str, env_id: str, config: dict, sampler: str = "cpu",
                     seed: int | None = None, affinity: dict | None = None) -> MinibatchRlEval:
    """Assemble sampler, agent, algorithm and runner from a (possibly overridden) preset."""
    if sampler not in SAMPLERS:
        raise ValueError(f"unknown sampler {sampler!r}; choose from {list(SAMPLERS)}")
    kind = action_kind(env_id)
    agent_cfg = dict(config["agent"])
    recurrent = agent_cfg.pop("recurrent", False)
    if kind == "discrete":
        AgentCls = RecurrentCategoricalPgAgent if recurrent else CategoricalPgAgent
    else:
        AgentCls = MujocoLstmAgent if recurrent else MujocoFfAgent
    agent = AgentCls(**agent_cfg)
    sampler_cfg = dict(config["sampler"])
    # Recurrent agents replay whole sequences, so environments wait for the batch end to reset.
    collector = CpuWaitResetCollector if recurrent else CpuResetCollector
    SamplerCls, EvalCollectorCls = ((SerialSampler, SerialEvalCollector) if sampler == "serial"
                                    else (CpuSampler, CpuEvalCollector))
    sampler_obj = SamplerCls(EnvCls=make_gym_env, env_kwargs=dict(id=env_id),
                             CollectorCls=collector, eval_CollectorCls=EvalCollectorCls,
                             **sampler_cfg)
    algo = ALGOS[algo_name](**config["algo"])
    affinity = affinity or default_affinity(sampler_cfg["batch_B"], sampler)
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler_obj, seed=seed,
                           affinity=affinity, **config["runner"])
