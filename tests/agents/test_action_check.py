"""Agents are checked against the action space once, at startup.

``build_samples_buffer`` runs the agent on one example observation to size the buffers; an
example action outside the environment's action space (wrong shape, wrong dtype kind, out of
range) is a ValueError naming the agent class, the action and the space, before any sampling.
The PG policies also refuse action spaces they cannot act in, so the Gaussian agent no longer
sends actions such as [-1 0] to a MultiDiscrete env.
"""
import re

import numpy as np
import pytest
import torch

import tests.envs._space_envs  # noqa: F401  (registers the rlfast_test/ ids)
from rlfast.agents import (AgentStep, CategoricalPgAgent, GaussianPgAgent, MujocoFfAgent,
                           MultiCategoricalPgAgent, RandomAgent)
from rlfast.envs import make
from rlfast.samplers import BatchSpec, CpuResetCollector, SerialSampler
from rlfast.samplers.buffer import build_samples_buffer


class FixedActionAgent(RandomAgent):
    """Returns the same action at every step, whatever the action space."""

    def __init__(self, action):
        super().__init__()
        self.fixed = torch.as_tensor(action)

    def step(self, observation, prev_action, prev_reward):
        return AgentStep(action=self.fixed.clone(), agent_info=None)


def start(agent, env_id):
    env = make(env_id)
    agent.initialize(env.spaces)
    try:
        return build_samples_buffer(agent, env, BatchSpec(2, 1), agent_shared=False,
                                    env_shared=False)
    finally:
        env.close()


def f32(*values):
    return np.array(values, dtype=np.float32)


def i64(*values):
    return np.array(values, dtype=np.int64)


@pytest.mark.parametrize("env_id,action,problem", [
    # A Gaussian-style float action on a Discrete env, as a continuous agent would send.
    ("CartPole-v1", np.float32(0.3), r"it holds float32 values, but the space holds integers"),
    ("CartPole-v1", np.int64(2), r"outside the valid values \[low, high\) = \[0, 2\)"),
    ("CartPole-v1", i64(0, 1), r"its shape \(2,\) is not the space's shape \(\)"),
    ("rlfast_test/MatchTarget-v0", i64(-1, 0, 1),
     r"outside the valid values \[low, high\) = \[\[0, 0, 0\], \[3, 4, 2\]\)"),
    ("rlfast_test/MatchTarget-v0", f32(0, 1, 1), r"holds float32 values"),
    ("Pendulum-v1", f32(np.nan), r"it is not finite"),
])
def test_example_action_outside_the_space_fails_at_startup(env_id, action, problem):
    with pytest.raises(ValueError) as caught:
        start(FixedActionAgent(action), env_id)
    message = str(caught.value)
    assert message.startswith(f"FixedActionAgent returned the example action "
                              f"{action.tolist()!r} (shape {action.shape}, dtype {action.dtype})")
    assert "which is not in the action space GymSpaceWrapper(" in message and env_id in message
    assert "MultiCategoricalPgAgent for MultiDiscrete" in message
    assert re.search(problem, message), message


def test_sampler_startup_reports_the_bad_agent():
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=2, CollectorCls=CpuResetCollector, max_decorrelation_steps=0)
    with pytest.raises(ValueError, match=r"FixedActionAgent returned the example action 5 .*"
                                         r"Discrete\(2\).*CartPole-v1"):
        sampler.initialize(FixedActionAgent(np.int64(5)), seed=0)


def test_float_action_beyond_the_bounds_only_warns():
    with pytest.warns(UserWarning, match=r"FixedActionAgent .*\[3.0\].*outside the bounds"):
        start(FixedActionAgent(np.array([3.0], np.float32)), "Pendulum-v1")


@pytest.mark.parametrize("AgentCls,env_id", [
    (GaussianPgAgent, "CartPole-v1"), (MujocoFfAgent, "rlfast_test/MatchTarget-v0"),
    (MujocoFfAgent, "rlfast_test/MultiBinaryAct-v0"), (CategoricalPgAgent, "Pendulum-v1"),
    (CategoricalPgAgent, "rlfast_test/MatchTarget-v0"), (MultiCategoricalPgAgent, "Pendulum-v1"),
    (MultiCategoricalPgAgent, "CartPole-v1"),
])
def test_pg_agents_refuse_action_spaces_they_cannot_act_in(AgentCls, env_id):
    env = make(env_id)
    agent = AgentCls(ModelCls=None) if AgentCls is GaussianPgAgent else AgentCls()
    with pytest.raises(TypeError, match=r"action space.*MultiCategoricalPgAgent for a vector of "
                                        r"discrete actions"):
        agent.make_env_to_model_kwargs(env.spaces)


@pytest.mark.parametrize("AgentCls,env_id", [
    (CategoricalPgAgent, "CartPole-v1"), (MultiCategoricalPgAgent, "rlfast_test/MatchTarget-v0"),
    (MultiCategoricalPgAgent, "rlfast_test/MultiBinaryAct-v0"), (MujocoFfAgent, "Pendulum-v1"),
])
def test_fitting_agents_pass_the_startup_check(AgentCls, env_id):
    _, samples_np, examples = start(AgentCls(), env_id)
    assert make(env_id).action_space.contains(examples.action)
    assert samples_np.agent.action.shape[2:] == examples.action.shape
