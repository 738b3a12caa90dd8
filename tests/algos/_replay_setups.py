"""Small replay learners fed by a real (serial, in-process) sampler, for the host-read tests.

Each setup builds an agent, a ``SerialSampler`` on a real environment, the algorithm with a
replay small enough to start learning after a few iterations, and returns a function that
samples one batch and calls ``optimize_agent`` on it. The learners run on the CPU; what the
tests count (host reads) is what the same code does on a GPU.
"""
from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from rlfast.agents import CatDqnAgent, DqnAgent, R2d1Agent, SacAgent, Td3Agent
from rlfast.algos import DQN, R2D1, SAC, TD3, CategoricalDQN
from rlfast.envs import EnvSpaces, make
from rlfast.samplers import CpuWaitResetCollector, SerialSampler
from rlfast.spaces import FloatBox, IntBox

CARTPOLE_SPACES = EnvSpaces(observation=FloatBox(-5.0, 5.0, shape=(4,)), action=IntBox(0, 2))
KINDS = ("dqn", "catdqn", "r2d1", "sac")  # the four the host-read bound names
ALL_KINDS = KINDS + ("td3",)


def _sampler(env_id: str, T: int, B: int, wait_reset: bool = False, **env_kwargs: Any):
    kwargs = dict(EnvCls=make, env_kwargs=dict(id=env_id, **env_kwargs), batch_T=T,
                  batch_B=B, max_decorrelation_steps=0)
    if wait_reset:
        kwargs["CollectorCls"] = CpuWaitResetCollector
    return SerialSampler(**kwargs)


def setup(kind: str, seed: int = 0, **algo_kwargs: Any) -> tuple[Any, Callable[[int], Any]]:
    """``(algo, sample)`` where ``sample(itr)`` returns the sampler's batch of iteration
    ``itr`` (the agent back in train mode). Learning starts at iteration 2 (the replay holds
    ``min_steps_learn`` steps by then)."""
    torch.manual_seed(seed)
    np.random.seed(seed)  # the host replays draw from numpy's global generator
    if kind in ("dqn", "catdqn"):
        sampler = _sampler("CartPole-v1", T=8, B=2)
        if kind == "dqn":
            agent = DqnAgent(model_kwargs=dict(hidden_sizes=[16]))
            algo = DQN(**dict(dict(batch_size=8, min_steps_learn=16, replay_size=512,
                                   replay_ratio=2, target_update_interval=2,
                                   learning_rate=1e-3), **algo_kwargs))
        else:
            agent = CatDqnAgent(n_atoms=11, model_kwargs=dict(hidden_sizes=[16]))
            algo = CategoricalDQN(**dict(dict(batch_size=8, min_steps_learn=16,
                                              replay_size=512, replay_ratio=2,
                                              target_update_interval=2, learning_rate=1e-3,
                                              V_min=-5, V_max=5), **algo_kwargs))
    elif kind == "r2d1":
        sampler = _sampler("CartPole-v1", T=8, B=2, wait_reset=True)
        agent = R2d1Agent(model_kwargs=dict(hidden_sizes=[16], lstm_size=8))
        algo = R2D1(**dict(dict(batch_T=4, batch_B=2, warmup_T=2, store_rnn_state_interval=2,
                                n_step_return=2, min_steps_learn=16, replay_size=512,
                                replay_ratio=1, target_update_interval=2), **algo_kwargs))
    elif kind == "sac":
        sampler = _sampler("Pendulum-v1", T=4, B=2, final_observation=True)
        agent = SacAgent(model_kwargs=dict(hidden_sizes=[16, 16]),
                         q_model_kwargs=dict(hidden_sizes=[16, 16]))
        algo = SAC(**dict(dict(batch_size=8, min_steps_learn=8, replay_size=512,
                               replay_ratio=4), **algo_kwargs))
    elif kind == "td3":
        sampler = _sampler("Pendulum-v1", T=4, B=2, final_observation=True)
        agent = Td3Agent(model_kwargs=dict(hidden_sizes=[16, 16]),
                         q_model_kwargs=dict(hidden_sizes=[16, 16]))
        algo = TD3(**dict(dict(batch_size=8, min_steps_learn=8, replay_size=512,
                               replay_ratio=4, policy_update_interval=2), **algo_kwargs))
    else:
        raise ValueError(f"unknown kind {kind!r}; choose from {ALL_KINDS}")
    examples = sampler.initialize(agent, seed=seed)
    algo.initialize(agent, n_itr=100, batch_spec=sampler.batch_spec,
                    mid_batch_reset=kind != "r2d1", examples=examples)

    def sample(itr: int) -> Any:
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        agent.train_mode(itr)
        return samples

    sample.sampler = sampler
    return algo, sample
