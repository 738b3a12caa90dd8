"""Tests for the policy-gradient agents (rlfast.agents.pg): stepping, values, modes, recurrence."""
import math

import numpy as np
import pytest
import torch

from rlfast.agents import (AgentInfo, AgentInfoRnn, AgentStep,
                           AlternatingRecurrentCategoricalPgAgent, CategoricalPgAgent,
                           GaussianPgAgent, MujocoFfAgent, MujocoLstmAgent,
                           RecurrentCategoricalPgAgent, RecurrentGaussianPgAgent)
from rlfast.distributions import DistInfo, DistInfoStd
from rlfast.envs import make
from rlfast.models.pg import MujocoFfModel, MujocoLstmModel

SMALL_FF = dict(hidden_sizes=[8])
SMALL_LSTM = dict(hidden_sizes=[8], lstm_size=6)
LSTM_SIZE = 6

# name -> (factory, env id, discrete, recurrent)
AGENTS = {
    "categorical": (lambda: CategoricalPgAgent(model_kwargs=SMALL_FF), "CartPole-v1", True, False),
    "recurrent_categorical": (lambda: RecurrentCategoricalPgAgent(model_kwargs=SMALL_LSTM),
                              "CartPole-v1", True, True),
    "gaussian": (lambda: GaussianPgAgent(ModelCls=MujocoFfModel, model_kwargs=SMALL_FF),
                 "Pendulum-v1", False, False),
    "mujoco_ff": (lambda: MujocoFfAgent(model_kwargs=SMALL_FF), "Pendulum-v1", False, False),
    "mujoco_lstm": (lambda: MujocoLstmAgent(model_kwargs=SMALL_LSTM), "Pendulum-v1", False, True),
    "recurrent_gaussian": (lambda: RecurrentGaussianPgAgent(ModelCls=MujocoLstmModel,
                                                            model_kwargs=SMALL_LSTM),
                           "Pendulum-v1", False, True),
}
_SPACES = {}


@pytest.fixture(autouse=True)
def _seeded():
    """Deterministic model initialization and sampling for every test."""
    torch.manual_seed(1234)


def spaces_of(env_id):
    if env_id not in _SPACES:
        _SPACES[env_id] = make(env_id).spaces
    return _SPACES[env_id]


def build(name, share_memory=False):
    factory, env_id, discrete, recurrent = AGENTS[name]
    agent = factory()
    agent.initialize(spaces_of(env_id), share_memory=share_memory)
    return agent, spaces_of(env_id), discrete, recurrent


def inputs(spaces, lead, discrete, seed=0):
    """Random observations, valid previous actions and rewards with leading dims ``lead``."""
    g = torch.Generator().manual_seed(seed)
    obs = torch.randn(*lead, *spaces.observation.shape, generator=g)
    if discrete:
        prev_action = torch.randint(0, spaces.action.n, lead, generator=g)
    else:
        prev_action = torch.rand(*lead, *spaces.action.shape, generator=g) * 4 - 2
    prev_reward = torch.randn(*lead, generator=g)
    return obs, prev_action, prev_reward


def check_dist_info(dist_info, discrete, lead):
    if discrete:
        assert isinstance(dist_info, DistInfo)
        assert dist_info.prob.shape == (*lead, 2)
        assert torch.allclose(dist_info.prob.sum(-1), torch.ones(lead))
        assert torch.all(dist_info.prob >= 0)
    else:
        assert isinstance(dist_info, DistInfoStd)
        assert dist_info.mean.shape == (*lead, 1) and dist_info.log_std.shape == (*lead, 1)


@pytest.mark.parametrize("name", list(AGENTS))
def test_step_shapes_and_agent_info(name):
    agent, spaces, discrete, recurrent = build(name)
    agent.sample_mode(0)
    B = 5
    step = agent.step(*inputs(spaces, (B,), discrete))
    assert isinstance(step, AgentStep)
    if discrete:
        assert step.action.shape == (B,) and step.action.dtype == torch.int64
    else:
        assert step.action.shape == (B, 1) and step.action.dtype == torch.float32
    for a in step.action.numpy():  # Gaussian samples are kept as drawn; the env clips them
        assert spaces.action.contains(a if discrete else np.clip(a, -2.0, 2.0))
    info = step.agent_info
    assert isinstance(info, AgentInfoRnn if recurrent else AgentInfo)
    check_dist_info(info.dist_info, discrete, (B,))
    assert info.value.shape == (B,) and info.value.dtype == torch.float32
    assert not info.value.requires_grad and step.action.device.type == "cpu"
    if recurrent:
        assert info.prev_rnn_state.h.shape == (B, 1, LSTM_SIZE)
        assert info.prev_rnn_state.c.shape == (B, 1, LSTM_SIZE)
        assert torch.all(info.prev_rnn_state.h == 0)  # first step after reset: zero state


@pytest.mark.parametrize("name", list(AGENTS))
def test_value_matches_step_and_does_not_advance_state(name):
    agent, spaces, discrete, recurrent = build(name)
    agent.sample_mode(0)
    B = 4
    agent.step(*inputs(spaces, (B,), discrete, seed=1))  # give recurrent agents a state
    state_before = agent.prev_rnn_state if recurrent else None
    saved = None if state_before is None else [s.clone() for s in state_before]
    x = inputs(spaces, (B,), discrete, seed=2)
    v1 = agent.value(*x)
    v2 = agent.value(*x)
    assert v1.shape == (B,) and torch.equal(v1, v2)
    if recurrent:
        assert agent.prev_rnn_state is state_before
        assert all(torch.equal(s, t) for s, t in zip(agent.prev_rnn_state, saved))
    step = agent.step(*x)
    assert torch.allclose(step.agent_info.value, v1, atol=1e-6)


def test_value_depends_on_recurrent_state():
    agent, spaces, discrete, _ = build("recurrent_categorical")
    agent.sample_mode(0)
    x = inputs(spaces, (3,), discrete, seed=3)
    v_zero = agent.value(*x)
    for seed in range(3):
        agent.step(*inputs(spaces, (3,), discrete, seed=10 + seed))
    assert not torch.allclose(agent.value(*x), v_zero)


def _sharpen_categorical(agent):
    """Make the policy far from uniform so that argmax and sampling differ visibly."""
    with torch.no_grad():
        agent.model.pi.model[-1].weight.mul_(300.0)


@pytest.mark.parametrize("name", ["categorical", "recurrent_categorical"])
def test_categorical_greedy_eval_is_argmax_and_sampling_is_stochastic(name):
    agent, spaces, discrete, recurrent = build(name)
    if not recurrent:
        _sharpen_categorical(agent)
    B = 256
    x = inputs(spaces, (B,), discrete, seed=4)
    agent.eval_mode(0)
    first = agent.step(*x)
    agent.reset()
    second = agent.step(*x)
    expected = first.agent_info.dist_info.prob.argmax(-1)
    assert torch.equal(first.action, expected)
    assert torch.equal(second.action, first.action)
    agent.sample_mode(0)
    agent.reset()
    draws = torch.stack([agent.step(*x).action for _ in range(10)])
    prob = first.agent_info.dist_info.prob
    # Sampling reaches the non-argmax action where it has real probability.
    uncertain = prob.min(-1).values > 0.2
    assert uncertain.sum() > 20, "test setup: need several uncertain states"
    assert (draws[:, uncertain] != expected[uncertain]).any()


def test_greedy_eval_false_samples_in_eval_mode():
    factory = lambda: CategoricalPgAgent(model_kwargs=SMALL_FF, greedy_eval=False)  # noqa: E731
    agent = factory()
    agent.initialize(spaces_of("CartPole-v1"))
    agent.eval_mode(0)
    x = inputs(spaces_of("CartPole-v1"), (256,), True, seed=5)
    actions = agent.step(*x).action
    greedy = agent.step(*x).agent_info.dist_info.prob.argmax(-1)
    assert (actions != greedy).any()


@pytest.mark.parametrize("name", ["gaussian", "mujoco_ff", "mujoco_lstm"])
def test_gaussian_greedy_eval_is_mean_and_sampling_is_stochastic(name):
    agent, spaces, discrete, recurrent = build(name)
    B = 64
    x = inputs(spaces, (B,), discrete, seed=6)
    agent.eval_mode(0)
    step = agent.step(*x)
    mean = step.agent_info.dist_info.mean
    assert torch.equal(step.action, mean.clamp(-2.0, 2.0))
    agent.reset()
    assert torch.equal(agent.step(*x).action, step.action)
    agent.sample_mode(0)
    agent.reset()
    sampled = agent.step(*x)
    noise = sampled.action - sampled.agent_info.dist_info.mean
    assert noise.abs().max() > 0.1 and noise.std() > 0.3  # std starts at exp(0) = 1


def test_gaussian_samples_are_kept_as_drawn_and_the_greedy_mean_is_clamped():
    agent = MujocoFfAgent(model_kwargs=dict(hidden_sizes=[8], mu_nonlinearity=None,
                                            init_log_std=3.0))
    agent.initialize(spaces_of("Pendulum-v1"))
    with torch.no_grad():
        agent.model.mu.model[-1].bias.fill_(5.0)
    x = inputs(spaces_of("Pendulum-v1"), (200,), False, seed=7)
    agent.sample_mode(0)
    step = agent.step(*x)
    sampled, mean = step.action, step.agent_info.dist_info.mean
    # std e^3 = 20: samples go far past the bound 2 on both sides and are stored as drawn
    # (the env wrapper clips what the env gets), so their log-likelihood is the policy's own.
    assert (sampled > 10.0).any() and (sampled < -10.0).any()
    log_std = step.agent_info.dist_info.log_std
    z = (sampled - mean) / log_std.exp()
    expected = (-0.5 * z ** 2 - log_std - 0.5 * math.log(2 * math.pi)).sum(-1)
    got = agent.distribution.log_likelihood(sampled, step.agent_info.dist_info)
    torch.testing.assert_close(got, expected)
    agent.eval_mode(0)
    greedy = agent.step(*x)
    assert torch.all(greedy.agent_info.dist_info.mean > 2.0)
    assert torch.all(greedy.action == 2.0)


@pytest.mark.parametrize("name", ["categorical", "mujoco_lstm"])
def test_share_memory_parameters(name):
    agent, *_ = build(name, share_memory=True)
    params = list(agent.parameters())
    assert params and all(p.is_shared() for p in params)
    assert agent.shared_model is agent.model
    private, *_ = build(name, share_memory=False)
    assert not any(p.is_shared() for p in private.parameters())


@pytest.mark.parametrize("name", list(AGENTS))
def test_state_dict_round_trip_reproduces_outputs(name):
    agent, spaces, discrete, recurrent = build(name)
    other, *_ = build(name)
    x = inputs(spaces, (3,), discrete, seed=8)
    agent.eval_mode(0)
    other.eval_mode(0)
    reference = agent.step(*x).agent_info
    different = other.step(*x).agent_info
    assert not torch.allclose(reference.value, different.value)
    other.load_state_dict(agent.state_dict())
    other.reset()
    again = other.step(*x).agent_info
    assert torch.equal(again.value, reference.value)
    for mine, theirs in zip(again.dist_info, reference.dist_info):
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("name", ["recurrent_categorical", "mujoco_lstm"])
def test_recurrent_state_advances_and_is_recorded(name):
    agent, spaces, discrete, _ = build(name)
    agent.sample_mode(0)
    B = 3
    assert agent.prev_rnn_state is None
    agent.step(*inputs(spaces, (B,), discrete, seed=9))
    first_state = agent.prev_rnn_state
    assert first_state.h.shape == (1, B, LSTM_SIZE) and first_state.h.abs().sum() > 0
    second = agent.step(*inputs(spaces, (B,), discrete, seed=10))
    # The recorded state is the one the step started from, stored batch-first.
    assert torch.equal(second.agent_info.prev_rnn_state.h, first_state.h.transpose(0, 1))
    assert torch.equal(second.agent_info.prev_rnn_state.c, first_state.c.transpose(0, 1))
    assert not torch.equal(agent.prev_rnn_state.h, first_state.h)


@pytest.mark.parametrize("name", ["recurrent_categorical", "mujoco_lstm"])
def test_reset_one_zeros_one_env_column(name):
    agent, spaces, discrete, _ = build(name)
    agent.sample_mode(0)
    B = 4
    agent.step(*inputs(spaces, (B,), discrete, seed=11))
    before = [s.clone() for s in agent.prev_rnn_state]
    agent.reset_one(idx=2)
    for now, old in zip(agent.prev_rnn_state, before):
        assert torch.all(now[:, 2] == 0)
        for b in (0, 1, 3):
            assert torch.equal(now[:, b], old[:, b])
    # The next step starts env 2 from zeros and the others from their kept state.
    step = agent.step(*inputs(spaces, (B,), discrete, seed=12))
    stored = step.agent_info.prev_rnn_state
    assert torch.all(stored.h[2] == 0) and torch.equal(stored.h[0], before[0][:, 0])


@pytest.mark.parametrize("name", ["recurrent_categorical", "mujoco_lstm"])
def test_mode_switches_stash_and_restore_sample_state(name):
    agent, spaces, discrete, _ = build(name)
    agent.sample_mode(0)
    B = 2
    x = inputs(spaces, (B,), discrete, seed=13)
    agent.step(*x)
    sample_state = [s.clone() for s in agent.prev_rnn_state]
    value_in_sample_state = agent.value(*x)
    for switch in (agent.train_mode, agent.eval_mode):
        switch(1)
        assert agent.prev_rnn_state is None
        if switch == agent.eval_mode:
            agent.step(*inputs(spaces, (5,), discrete, seed=14))  # eval with its own batch size
            assert agent.prev_rnn_state.h.shape[1] == 5
    agent.sample_mode(2)
    assert all(torch.equal(s, t) for s, t in zip(agent.prev_rnn_state, sample_state))
    assert torch.equal(agent.value(*x), value_in_sample_state)


def test_alternating_categorical_agent_keeps_one_state_per_group():
    agent = AlternatingRecurrentCategoricalPgAgent(model_kwargs=SMALL_LSTM)
    spaces = spaces_of("CartPole-v1")
    agent.initialize(spaces)
    agent.sample_mode(0)
    xa, xb = inputs(spaces, (2,), True, seed=15), inputs(spaces, (3,), True, seed=16)
    step_a = agent.step(*xa)
    assert agent.prev_rnn_state is None  # group B has not stepped yet
    step_b = agent.step(*xb)
    assert torch.all(step_a.agent_info.prev_rnn_state.h == 0)
    assert torch.all(step_b.agent_info.prev_rnn_state.h == 0)
    assert agent.prev_rnn_state.h.shape == (1, 2, LSTM_SIZE)  # group A's state is next
    step_a2 = agent.step(*xa)
    assert step_a2.agent_info.prev_rnn_state.h.shape == (2, 1, LSTM_SIZE)
    assert step_a2.agent_info.prev_rnn_state.h.abs().sum() > 0
    step_b2 = agent.step(*xb)
    assert step_b2.agent_info.prev_rnn_state.h.shape == (3, 1, LSTM_SIZE)
    assert agent.prev_rnn_state.h.shape[1] == 2


@pytest.mark.parametrize("name", ["categorical", "mujoco_ff"])
def test_call_on_time_batch_matches_step(name):
    agent, spaces, discrete, _ = build(name)
    T, B = 4, 3
    obs, prev_action, prev_reward = inputs(spaces, (T, B), discrete, seed=17)
    agent.train_mode(0)
    dist_info, value = agent(obs, prev_action, prev_reward)
    check_dist_info(dist_info, discrete, (T, B))
    assert value.shape == (T, B) and value.requires_grad
    agent.sample_mode(0)
    for t in range(T):
        info = agent.step(obs[t], prev_action[t], prev_reward[t]).agent_info
        assert torch.allclose(info.value, value[t].detach(), atol=1e-6)
        for a, b in zip(info.dist_info, dist_info):
            assert torch.allclose(a, b[t].detach(), atol=1e-6)


@pytest.mark.parametrize("name", ["recurrent_categorical", "mujoco_lstm"])
def test_recurrent_call_on_time_batch_replays_sampled_steps(name):
    agent, spaces, discrete, _ = build(name)
    T, B = 5, 3
    agent.sample_mode(0)
    agent.step(*inputs(spaces, (B,), discrete, seed=18))  # start from a nonzero state
    obs, prev_action, prev_reward = inputs(spaces, (T, B), discrete, seed=19)
    infos = [agent.step(obs[t], prev_action[t], prev_reward[t]).agent_info for t in range(T)]
    init = infos[0].prev_rnn_state  # [B, N, H]
    init_rnn_state = type(init)(*(s.transpose(0, 1).contiguous() for s in init))
    agent.train_mode(0)
    dist_info, value, next_state = agent(obs, prev_action, prev_reward, init_rnn_state)
    check_dist_info(dist_info, discrete, (T, B))
    assert value.shape == (T, B) and value.requires_grad
    assert next_state.h.shape == (1, B, LSTM_SIZE)
    for t in range(T):
        assert torch.allclose(infos[t].value, value[t].detach(), atol=1e-5)
        for a, b in zip(infos[t].dist_info, dist_info):
            assert torch.allclose(a, b[t].detach(), atol=1e-5)
    # Starting from zeros instead gives different outputs (the state matters).
    _, value_zero, _ = agent(obs, prev_action, prev_reward, None)
    assert not torch.allclose(value_zero[0], value[0])


def test_wrong_action_space_raises():
    with pytest.raises(TypeError, match="discrete"):
        CategoricalPgAgent().initialize(spaces_of("Pendulum-v1"))
    with pytest.raises(TypeError):
        MujocoFfAgent().initialize(spaces_of("CartPole-v1"))
    with pytest.raises(ValueError, match="ModelCls"):
        GaussianPgAgent().initialize(spaces_of("Pendulum-v1"))


# ---- policy strategies ------------------------------------------------------------------------
def test_policies_name_model_kwargs_and_build_distributions():
    from rlfast.agents.pg import CategoricalPolicy, GaussianPolicy
    from rlfast.distributions import Categorical, Gaussian
    cartpole, pendulum = spaces_of("CartPole-v1"), spaces_of("Pendulum-v1")
    assert CategoricalPolicy().make_env_to_model_kwargs(cartpole) == dict(observation_shape=(4,),
                                                                          action_size=2)
    assert CategoricalPolicy(image_model=True).make_env_to_model_kwargs(cartpole) == dict(
        image_shape=(4,), output_size=2)
    assert isinstance(CategoricalPolicy().make_distribution(cartpole), Categorical)
    gaussian = GaussianPolicy().make_distribution(pendulum)
    assert isinstance(gaussian, Gaussian) and gaussian.dim == 1
    assert gaussian.clip is None and gaussian.mean_bound == 2.0  # samples as drawn
    with pytest.raises(TypeError, match="flat continuous"):
        GaussianPolicy().make_env_to_model_kwargs(cartpole)


def test_pg_agent_takes_a_policy_object():
    from rlfast.agents.pg import GaussianPolicy, PgAgent
    torch.manual_seed(7)
    agent = PgAgent(ModelCls=MujocoFfModel, model_kwargs=SMALL_FF, policy=GaussianPolicy())
    agent.initialize(spaces_of("Pendulum-v1"))
    torch.manual_seed(7)
    reference = MujocoFfAgent(model_kwargs=SMALL_FF)
    reference.initialize(spaces_of("Pendulum-v1"))
    x = inputs(spaces_of("Pendulum-v1"), (3,), False)
    (dist_info, value), (ref_dist_info, ref_value) = agent(*x), reference(*x)
    torch.testing.assert_close(dist_info.mean, ref_dist_info.mean)
    torch.testing.assert_close(dist_info.log_std, ref_dist_info.log_std)
    torch.testing.assert_close(value, ref_value)
    with pytest.raises(ValueError, match="policy"):
        PgAgent(ModelCls=MujocoFfModel)


@pytest.mark.parametrize("name", ["categorical", "recurrent_categorical", "mujoco_lstm"])
def test_device_step_is_step_without_the_bookkeeping(name):
    """``device_step`` from the agent's state gives step's action and agent_info (same draws
    from the same generator state) and its next state, and changes nothing in the agent;
    ``step`` then advances the state to exactly that next state."""
    agent, spaces, discrete, recurrent = build(name)
    agent.sample_mode(0)
    agent.step(*inputs(spaces, (3,), discrete, seed=1))  # a non-zero state
    before = None if not recurrent else [s.clone() for s in agent.prev_rnn_state]
    x = inputs(spaces, (3,), discrete, seed=2)
    torch.manual_seed(7)
    action, info, next_state = agent.device_step(*x, agent.prev_rnn_state)
    if recurrent:
        assert all(torch.equal(s, t) for s, t in zip(agent.prev_rnn_state, before))
        assert torch.equal(info.prev_rnn_state.h, before[0].transpose(0, 1))
    else:
        assert next_state is None
    torch.manual_seed(7)
    step = agent.step(*x)
    assert torch.equal(step.action, action)
    for want, have in zip(step.agent_info, info):
        for w, h in zip(want if isinstance(want, tuple) else [want],
                        have if isinstance(have, tuple) else [have]):
            assert torch.equal(w, h)
    if recurrent:
        assert all(torch.equal(s, t) for s, t in zip(agent.prev_rnn_state, next_state))


def test_graph_key_follows_what_the_step_branches_on():
    agent, _, _, _ = build("categorical")
    agent.sample_mode(0)
    sampling = agent.device_step_graph_key()
    agent.eval_mode(0)
    assert agent.device_step_graph_key() != sampling  # greedy actions in evaluation
    agent.greedy_eval = False
    assert agent.device_step_graph_key() == sampling
