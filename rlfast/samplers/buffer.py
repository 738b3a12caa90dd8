"""Build the samples buffer from one example step of the environment and the agent."""
from __future__ import annotations

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.samplers.collections import (AgentSamples, AgentSamplesBsv, BatchSpec, EnvSamples,
                                         Samples)
from rlfast.utils.buffer import buffer_from_example, numpify_buffer, torchify_buffer
from rlfast.utils.collections import AttrDict


def get_example_outputs(agent, env) -> AttrDict:
    """One reset + step of ``env`` and one ``agent.step``: examples of every sampled field.

    The examples carry no leading dims; they size every buffer (samples, replay) downstream.
    """
    observation = env.reset()
    action = env.action_space.sample()
    observation, reward, done, env_info = env.step(action)
    reward = np.asarray(reward, dtype=np.float32)
    agent.reset()
    agent_inputs = torchify_buffer(AgentInputs(np.asarray(observation) if not hasattr(observation, "_fields") else observation,
                                               np.asarray(action), reward))
    agent_action, agent_info = agent.step(*agent_inputs)
    agent_info = numpify_buffer(agent_info)
    if agent_info is not None and "prev_rnn_state" in agent_info:
        # Stored per environment as [N, H]: drop the B=1 dim the model added.
        agent_info = agent_info._replace(prev_rnn_state=agent_info.prev_rnn_state[0])
    agent.reset()
    return AttrDict(observation=observation, action=np.asarray(numpify_buffer(agent_action)),
                    reward=reward, done=np.asarray(done, dtype=bool), env_info=env_info,
                    agent_info=agent_info)


def build_samples_buffer(agent, env, batch_spec: BatchSpec, bootstrap_value: bool = False,
                         agent_shared: bool = True, env_shared: bool = True):
    """Allocate the ``[T, B]`` samples buffer; returns (samples_pyt, samples_np, examples).

    ``samples_pyt`` and ``samples_np`` are torch and numpy views of the same memory, which lives
    in OS shared memory when ``*_shared`` so that worker processes write into it directly.
    """
    examples = get_example_outputs(agent, env)
    T, B = batch_spec
    action = buffer_from_example(examples.action, (T, B), agent_shared)
    prev_action = buffer_from_example(examples.action, (T, B), agent_shared)
    agent_info = buffer_from_example(examples.agent_info, (T, B), agent_shared)
    if bootstrap_value:
        value_example = np.zeros((), dtype=np.float32)
        bootstrap = buffer_from_example(value_example, (1, B), agent_shared)
        agent_buffer = AgentSamplesBsv(action=action, prev_action=prev_action,
                                       agent_info=agent_info, bootstrap_value=bootstrap)
    else:
        agent_buffer = AgentSamples(action=action, prev_action=prev_action, agent_info=agent_info)
    env_buffer = EnvSamples(
        observation=buffer_from_example(examples.observation, (T, B), env_shared),
        reward=buffer_from_example(examples.reward, (T, B), env_shared),
        prev_reward=buffer_from_example(examples.reward, (T, B), env_shared),
        done=buffer_from_example(examples.done, (T, B), env_shared),
        env_info=buffer_from_example(examples.env_info, (T, B), env_shared),
    )
    samples_np = Samples(agent=agent_buffer, env=env_buffer)
    samples_pyt = torchify_buffer(samples_np)
    return samples_pyt, samples_np, examples
