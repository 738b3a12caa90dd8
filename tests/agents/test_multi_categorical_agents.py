"""The per-dimension categorical agents for MultiDiscrete and MultiBinary actions."""
import numpy as np
import pytest
import torch
from gymnasium import spaces as gs

import tests.envs._space_envs  # noqa: F401  (registers the rlfast_test/ ids)
from rlfast.agents import (AgentInfo, AgentInfoRnn, MultiCategoricalPgAgent,
                           RecurrentMultiCategoricalPgAgent)
from rlfast.agents.pg import MultiCategoricalPolicy
from rlfast.distributions import DistInfo, MultiCategorical
from rlfast.envs import EnvSpaces, GymEnvWrapper, make
from rlfast.spaces import GymSpaceWrapper
from tests.envs._space_envs import MatchTargetEnv

NVEC = (3, 4, 2)
START = (1, -2, 0)


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(4321)


def spaces(start=START):
    return GymEnvWrapper(MatchTargetEnv(nvec=NVEC, start=start)).spaces


def inputs(lead, seed=0, start=START):
    g = torch.Generator().manual_seed(seed)
    obs = torch.rand(*lead, sum(NVEC), generator=g)
    prev_action = torch.stack([torch.randint(n, lead, generator=g) + s
                               for n, s in zip(NVEC, start)], dim=-1)
    return obs, prev_action, torch.randn(*lead, generator=g)


def test_policy_reads_nvec_and_start_from_the_space():
    policy = MultiCategoricalPolicy()
    env_spaces = spaces()
    assert policy.make_env_to_model_kwargs(env_spaces) == dict(
        observation_shape=(9,), action_size=9, action_nvec=NVEC)
    dist = policy.make_distribution(env_spaces)
    assert isinstance(dist, MultiCategorical) and dist.nvec == NVEC and dist.start == START
    binary = EnvSpaces(observation=env_spaces.observation,
                       action=GymSpaceWrapper(gs.MultiBinary(4), name="act"))
    assert policy.make_env_to_model_kwargs(binary)["action_nvec"] == (2, 2, 2, 2)


@pytest.mark.parametrize("AgentCls,model_kwargs", [
    (MultiCategoricalPgAgent, dict(hidden_sizes=[16])),
    (RecurrentMultiCategoricalPgAgent, dict(hidden_sizes=[16], lstm_size=8)),
])
def test_step_gives_actions_in_the_space_and_per_dimension_probabilities(AgentCls, model_kwargs):
    env_spaces = spaces()
    agent = AgentCls(model_kwargs=model_kwargs)
    agent.initialize(env_spaces)
    agent.sample_mode(0)
    B = 64
    step = agent.step(*inputs((B,)))
    assert step.action.shape == (B, 3) and step.action.dtype == torch.int64
    assert all(env_spaces.action.contains(a) for a in step.action.numpy())
    info = step.agent_info
    assert isinstance(info, AgentInfoRnn if agent.recurrent else AgentInfo)
    assert isinstance(info.dist_info, DistInfo) and info.dist_info.prob.shape == (B, 9)
    for part in info.dist_info.prob.split(list(NVEC), dim=-1):
        torch.testing.assert_close(part.sum(-1), torch.ones(B))
    # Every value of every dimension is drawn (the policy starts near uniform).
    draws = torch.cat([agent.step(*inputs((B,), seed=s)).action for s in range(5)])
    for d, (n, s) in enumerate(zip(NVEC, START)):
        assert set(draws[:, d].tolist()) == set(range(s, s + n))


def test_greedy_eval_takes_the_argmax_of_each_dimension():
    agent = MultiCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[16]))
    agent.initialize(spaces())
    with torch.no_grad():
        agent.model.pi.model[-1].weight.mul_(300.0)
    agent.eval_mode(0)
    x = inputs((32,), seed=3)
    step = agent.step(*x)
    for d, part in enumerate(step.agent_info.dist_info.prob.split(list(NVEC), dim=-1)):
        assert torch.equal(step.action[:, d], part.argmax(-1) + START[d])
    assert torch.equal(agent.step(*x).action, step.action)


def test_training_call_matches_sampling_and_has_gradients():
    agent = RecurrentMultiCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[16], lstm_size=8))
    agent.initialize(spaces())
    agent.sample_mode(0)
    T, B = 4, 3
    obs, prev_action, prev_reward = inputs((T, B), seed=5)
    infos = [agent.step(obs[t], prev_action[t], prev_reward[t]).agent_info for t in range(T)]
    init = infos[0].prev_rnn_state
    init_rnn_state = type(init)(*(s.transpose(0, 1).contiguous() for s in init))
    agent.train_mode(0)
    dist_info, value, _ = agent(obs, prev_action, prev_reward, init_rnn_state)
    for t in range(T):
        torch.testing.assert_close(infos[t].dist_info.prob, dist_info.prob[t].detach(),
                                   atol=1e-5, rtol=1e-5)
    actions = torch.stack([agent.distribution.sample(info.dist_info) for info in infos])
    log_likelihood = agent.distribution.log_likelihood(actions, dist_info)
    assert log_likelihood.shape == (T, B)
    (-log_likelihood.mean() + value.pow(2).mean()).backward()
    assert all(p.grad is not None for p in agent.parameters())


def test_multibinary_env_steps_with_the_agent():
    env = make("rlfast_test/MultiBinaryAct-v0")
    agent = MultiCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(env.spaces)
    agent.sample_mode(0)
    env.reset()
    action = agent.step(torch.zeros(2), torch.zeros(3, dtype=torch.int8), torch.zeros(())).action
    assert action.shape == (3,) and set(action.tolist()) <= {0, 1}
    assert env.step(action.numpy().astype(np.int8)).done
