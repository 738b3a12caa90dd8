"""Tests for the Atari policy-gradient agents (rlfast.agents.pg.atari)."""
import pickle

import pytest
import torch

from rlfast.agents import (AgentInfo, AgentInfoRnn, AlternatingAtariLstmAgent, AtariFfAgent,
                           AtariLstmAgent)
from rlfast.agents.param_sharing import AsyncParams, use_own_cpu_model
from rlfast.agents.pg import CategoricalPolicy
from rlfast.distributions import DistInfo
from rlfast.envs import EnvSpaces
from rlfast.models.pg import AtariFfModel, AtariLstmModel
from rlfast.spaces import FloatBox, IntBox

IMAGE_SHAPE = (4, 104, 80)
N_ACTIONS = 6
LSTM_SIZE = 8
SPACES = EnvSpaces(observation=IntBox(0, 256, shape=IMAGE_SHAPE, dtype="uint8"),
                   action=IntBox(0, N_ACTIONS))

AGENTS = {
    "ff": lambda: AtariFfAgent(model_kwargs=dict(fc_sizes=16)),
    "lstm": lambda: AtariLstmAgent(model_kwargs=dict(fc_sizes=16, lstm_size=LSTM_SIZE)),
    "alternating": lambda: AlternatingAtariLstmAgent(model_kwargs=dict(fc_sizes=16,
                                                                       lstm_size=LSTM_SIZE)),
}
RECURRENT = ("lstm", "alternating")


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(4321)


def build(name, **init_kwargs):
    agent = AGENTS[name]()
    agent.initialize(SPACES, **init_kwargs)
    return agent


def inputs(lead, seed=0):
    """uint8 observations, previous actions and rewards with leading dims ``lead``."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randint(0, 256, (*lead, *IMAGE_SHAPE), generator=g, dtype=torch.uint8)
    prev_action = torch.randint(0, N_ACTIONS, lead, generator=g)
    prev_reward = torch.randn(lead, generator=g)
    return obs, prev_action, prev_reward


@pytest.mark.parametrize("name", list(AGENTS))
def test_model_kwargs_and_distribution_come_from_spaces(name):
    agent = build(name)
    expected_model = AtariFfModel if name == "ff" else AtariLstmModel
    assert type(agent.model) is expected_model
    assert dict(agent.env_model_kwargs) == dict(image_shape=IMAGE_SHAPE, output_size=N_ACTIONS)
    assert agent.model.image_shape == IMAGE_SHAPE and agent.model.output_size == N_ACTIONS
    assert agent.distribution.dim == N_ACTIONS
    assert isinstance(agent.policy, CategoricalPolicy) and agent.policy.image_model
    assert agent.recurrent == (name in RECURRENT)
    assert agent.alternating == (name == "alternating")


@pytest.mark.parametrize("name", list(AGENTS))
def test_step_returns_valid_actions_and_agent_info(name):
    agent = build(name)
    agent.sample_mode(0)
    B = 4
    step = agent.step(*inputs((B,)))
    assert step.action.shape == (B,) and step.action.dtype == torch.int64
    assert torch.all((step.action >= 0) & (step.action < N_ACTIONS))
    for a in step.action.numpy():
        assert SPACES.action.contains(a)
    info = step.agent_info
    assert isinstance(info, AgentInfoRnn if name in RECURRENT else AgentInfo)
    assert isinstance(info.dist_info, DistInfo)
    assert info.dist_info.prob.shape == (B, N_ACTIONS)
    assert torch.allclose(info.dist_info.prob.sum(-1), torch.ones(B))
    assert info.value.shape == (B,) and info.value.dtype == torch.float32
    assert not info.value.requires_grad and step.action.device.type == "cpu"
    if name in RECURRENT:
        assert info.prev_rnn_state.h.shape == (B, 1, LSTM_SIZE)
        assert torch.all(info.prev_rnn_state.h == 0) and torch.all(info.prev_rnn_state.c == 0)


@pytest.mark.parametrize("name", list(AGENTS))
def test_greedy_eval_is_deterministic_argmax_and_sampling_varies(name):
    agent = build(name)
    x = inputs((32,), seed=1)
    agent.eval_mode(0)
    first = agent.step(*x)
    agent.reset()
    second = agent.step(*x)
    assert torch.equal(first.action, first.agent_info.dist_info.prob.argmax(-1))
    assert torch.equal(first.action, second.action)
    agent.sample_mode(0)
    agent.reset()
    sampled = agent.step(*x).action
    # The initial policy is near uniform over 6 actions, so 32 draws are not all the argmax.
    assert (sampled != first.action).any()


@pytest.mark.parametrize("name", list(AGENTS))
def test_value_matches_step(name):
    agent = build(name)
    agent.sample_mode(0)
    x = inputs((3,), seed=2)
    value = agent.value(*x)
    step = agent.step(*x)
    assert value.shape == (3,)
    assert torch.allclose(step.agent_info.value, value, atol=1e-6)


def test_ff_call_on_time_batch_matches_step():
    agent = build("ff")
    agent.sample_mode(0)
    T, B = 2, 3
    obs, prev_action, prev_reward = inputs((T, B), seed=3)
    agent.train_mode(0)
    dist_info, value = agent(obs, prev_action, prev_reward)
    assert dist_info.prob.shape == (T, B, N_ACTIONS) and value.shape == (T, B)
    assert value.requires_grad
    agent.sample_mode(0)
    step = agent.step(obs[1], prev_action[1], prev_reward[1])
    assert torch.allclose(step.agent_info.value, value[1].detach(), atol=1e-5)


def test_lstm_call_on_time_batch_replays_sampled_steps():
    agent = build("lstm")
    agent.sample_mode(0)
    T, B = 3, 2
    obs, prev_action, prev_reward = inputs((T, B), seed=4)
    values = torch.stack([agent.step(obs[t], prev_action[t], prev_reward[t]).agent_info.value
                          for t in range(T)])
    agent.train_mode(0)
    zero = agent.model.body.core.lstm.weight_ih_l0.new_zeros(1, B, LSTM_SIZE)
    dist_info, value, state = agent(obs, prev_action, prev_reward, (zero, zero))
    assert dist_info.prob.shape == (T, B, N_ACTIONS) and state.h.shape == (1, B, LSTM_SIZE)
    assert torch.allclose(value.detach(), values, atol=1e-5)


@pytest.mark.parametrize("name", RECURRENT)
def test_recurrent_state_advances_and_reset_one_zeros_one_env(name):
    agent = build(name)
    agent.sample_mode(0)
    B = 4
    assert agent.prev_rnn_state is None
    agent.step(*inputs((B,), seed=5))
    if name == "alternating":
        agent.step(*inputs((B,), seed=6))  # the other group; back to the first group's state
    state = agent.prev_rnn_state
    assert state.h.shape == (1, B, LSTM_SIZE) and state.h.abs().sum() > 0
    before = [s.clone() for s in state]
    agent.reset_one(idx=1)
    for now, old in zip(agent.prev_rnn_state, before):
        assert torch.all(now[:, 1] == 0)
        for b in (0, 2, 3):
            assert torch.equal(now[:, b], old[:, b])
    expected_h = before[0].clone()
    expected_h[:, 1] = 0
    step = agent.step(*inputs((B,), seed=7))
    assert torch.equal(step.agent_info.prev_rnn_state.h, expected_h.transpose(0, 1))
    agent.reset()
    assert agent.prev_rnn_state is None


def test_alternating_agent_keeps_one_state_per_group():
    agent = build("alternating")
    plain = build("lstm")
    plain.load_state_dict(agent.state_dict())
    agent.sample_mode(0)
    plain.sample_mode(0)
    B = 2
    x_a = inputs((B,), seed=8)
    agent.step(*x_a)
    plain.step(*x_a)  # the state group A should get back on its next step
    assert agent.prev_rnn_state is None  # group B has not stepped yet
    step_b = agent.step(*inputs((B,), seed=9))
    assert torch.all(step_b.agent_info.prev_rnn_state.h == 0)
    step_a = agent.step(*inputs((B,), seed=10))
    assert torch.equal(step_a.agent_info.prev_rnn_state.h, plain.prev_rnn_state.h.transpose(0, 1))
    assert torch.equal(step_a.agent_info.prev_rnn_state.c, plain.prev_rnn_state.c.transpose(0, 1))


@pytest.mark.parametrize("name", ["ff", "lstm"])
def test_published_parameters_reach_a_sampler_copy(name):
    agent = build(name)
    params = AsyncParams(agent)
    sampler = build(name)  # a sampler process's agent (other initial weights)
    use_own_cpu_model(sampler, share_memory=True)
    assert all(p.is_shared() for p in sampler.model.parameters())
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(0.5)
    params.send(agent, updates=3)
    assert params.recv(sampler) and params.sampler_updates == 3
    for mine, trained in zip(sampler.model.parameters(), agent.model.parameters()):
        assert torch.equal(mine, trained)


def test_model_kwargs_survive_pickling():
    agent = build("ff")
    kwargs = pickle.loads(pickle.dumps(agent.env_model_kwargs))
    assert agent.distribution.dim == N_ACTIONS
    assert dict(kwargs) == dict(image_shape=IMAGE_SHAPE, output_size=N_ACTIONS)


def test_non_discrete_action_space_raises():
    spaces = EnvSpaces(observation=SPACES.observation, action=FloatBox(-1.0, 1.0, shape=(2,)))
    with pytest.raises(TypeError, match="discrete"):
        AtariFfAgent().initialize(spaces)
