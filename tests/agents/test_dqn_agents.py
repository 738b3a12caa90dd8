"""Tests for the DQN-family agents (rlfast.agents.dqn): epsilon schedules, target networks, R2D1
state."""
import math

import numpy as np
import pytest
import torch

from rlfast.agents import (AgentStep, AlternatingAtariR2d1Agent, AlternatingR2d1Agent,
                           AtariCatDqnAgent, AtariDqnAgent, AtariR2d1Agent, CatDqnAgent, DqnAgent,
                           EpsilonGreedyAgentMixin, R2d1Agent)
from rlfast.agents.dqn import AgentInfo, AgentInfoRnn, CatAgentInfo, CategoricalQPolicy
from rlfast.agents.param_sharing import sync_shared_model
from rlfast.distributions import CategoricalEpsilonGreedy, EpsilonGreedy
from rlfast.envs import EnvSpaces
from rlfast.models.dqn import (AtariCatDqnModel, AtariDqnModel, AtariR2d1Model, CatDqnMlpModel,
                               DqnMlpModel, R2d1MlpModel)
from rlfast.spaces import FloatBox, IntBox

OBS_SHAPE = (4,)
A = 3
SPACES = EnvSpaces(observation=FloatBox(-1, 1, shape=OBS_SHAPE), action=IntBox(0, A))
IMAGE_SHAPE = (4, 104, 80)
ATARI_SPACES = EnvSpaces(observation=IntBox(0, 256, shape=IMAGE_SHAPE, dtype="uint8"),
                         action=IntBox(0, A))
SMALL_CONV = dict(channels=[4, 8], kernel_sizes=[8, 4], strides=[4, 2], paddings=[0, 1])
LSTM = 6


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(2024)


def make_dqn(**kwargs):
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8, 8]), **kwargs)
    agent.initialize(SPACES)
    return agent


def make_r2d1(**kwargs):
    agent = R2d1Agent(model_kwargs=dict(hidden_sizes=[8], lstm_size=LSTM, head_size=8), **kwargs)
    agent.initialize(SPACES)
    return agent


def inputs(lead, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(*lead, *OBS_SHAPE, generator=g), torch.randint(0, A, lead, generator=g),
            torch.randn(lead, generator=g))


# ---- epsilon schedules ---------------------------------------------------------------------------
def test_epsilon_anneals_linearly_between_itr_min_and_max():
    agent = make_dqn(eps_init=1.0, eps_final=0.1, eps_itr_min=10, eps_itr_max=20)
    assert isinstance(agent.distribution, EpsilonGreedy)
    expected = {0: 1.0, 10: 1.0, 12: 0.82, 15: 0.55, 20: 0.1, 500: 0.1}
    for itr, eps in expected.items():
        agent.sample_mode(itr)
        assert float(agent.distribution.epsilon) == pytest.approx(eps)
    agent.set_epsilon_itr_min_max(0, 4)
    agent.sample_mode(1)
    assert float(agent.distribution.epsilon) == pytest.approx(1.0 - 0.25 * 0.9)
    agent.set_epsilon_itr_min_max(5, 5)  # a step change at itr 5
    agent.sample_mode(4)
    assert float(agent.distribution.epsilon) == pytest.approx(1.0)
    agent.sample_mode(5)
    assert float(agent.distribution.epsilon) == pytest.approx(0.1)


def test_eval_epsilon_and_pretraining_eval():
    agent = make_dqn(eps_eval=0.05)
    agent.eval_mode(3)
    assert float(agent.distribution.epsilon) == pytest.approx(0.05)
    agent.eval_mode(0)  # evaluation before any training acts randomly
    assert float(agent.distribution.epsilon) == 1.0
    agent.sample_mode(10_000)
    assert float(agent.distribution.epsilon) == pytest.approx(0.01)
    trained = DqnAgent(model_kwargs=dict(hidden_sizes=[8, 8]), eps_eval=0.05,
                       initial_model_state_dict=agent.state_dict())
    trained.initialize(SPACES)
    trained.eval_mode(0)  # loaded weights: evaluate them, even at itr 0
    assert float(trained.distribution.epsilon) == pytest.approx(0.05)


def test_vector_epsilon_log_spaced_over_global_B_with_env_ranks_slice():
    global_B, eps_min, eps_final = 8, 0.001, 0.1
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8]), eps_init=1.0, eps_final=eps_final,
                     eps_final_min=eps_min, eps_itr_min=0, eps_itr_max=10)
    agent.initialize(SPACES, global_B=global_B, env_ranks=list(range(global_B)))
    reference = [eps_min * (eps_final / eps_min) ** (k / (global_B - 1)) for k in range(global_B)]
    np.testing.assert_allclose(agent.eps_final.numpy(), reference, rtol=1e-6)
    # A collector in a worker keeps its own environments' entries.
    agent.collector_initialize(global_B=global_B, env_ranks=[2, 3, 4])
    np.testing.assert_allclose(agent.eps_final.numpy(), reference[2:5], rtol=1e-6)
    agent.sample_mode(10)
    np.testing.assert_allclose(agent.distribution.epsilon.numpy(), reference[2:5], rtol=1e-6)
    agent.sample_mode(5)  # halfway: each env halfway from eps_init to its own final
    np.testing.assert_allclose(agent.distribution.epsilon.numpy(),
                               [1.0 + 0.5 * (e - 1.0) for e in reference[2:5]], rtol=1e-6)
    action, _ = agent.step(*inputs((3,)))
    assert action.shape == (3,)
    with pytest.raises(ValueError, match="vector epsilon of length 3"):
        agent.step(*inputs((4,)))
    agent.eval_mode(7)  # evaluation uses one scalar epsilon for any number of envs
    assert agent.distribution.epsilon.dim() == 0
    assert agent.step(*inputs((5,))).action.shape == (5,)


def test_scalar_epsilon_ignores_env_ranks():
    agent = make_dqn()
    agent.collector_initialize(global_B=8, env_ranks=[0, 1])
    agent.sample_mode(0)
    assert agent.distribution.epsilon.dim() == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(eps_init=1.5), "eps_init"), (dict(eps_eval=-0.1), "eps_eval"),
    (dict(eps_final_min=0.0), "eps_final_min"),
    (dict(eps_itr_min=10, eps_itr_max=5), "eps_itr_min"),
])
def test_invalid_epsilon_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DqnAgent(**kwargs)


def test_invalid_env_ranks():
    agent = DqnAgent(model_kwargs=dict(hidden_sizes=[8]), eps_final_min=0.001)
    with pytest.raises(ValueError, match="env_ranks"):
        agent.initialize(SPACES, global_B=2, env_ranks=[1, 2])


# ---- DqnAgent ----------------------------------------------------------------------------------
def test_dqn_step_call_and_greedy_actions():
    agent = make_dqn(eps_eval=0.0)
    assert isinstance(agent, EpsilonGreedyAgentMixin)
    obs, prev_action, prev_reward = inputs((5,))
    agent.eval_mode(1)
    step = agent.step(obs, prev_action, prev_reward)
    assert isinstance(step, AgentStep) and isinstance(step.agent_info, AgentInfo)
    assert step.agent_info._fields == ("q",)
    q = agent(obs, prev_action, prev_reward)
    assert q.shape == (5, A) and q.requires_grad
    torch.testing.assert_close(step.agent_info.q, q.detach())
    assert torch.equal(step.action, q.argmax(-1))
    assert agent.target(obs, prev_action, prev_reward).requires_grad is False


def test_target_network_hard_and_soft_updates():
    agent = make_dqn()
    assert agent.target_model is not agent.model
    for p, tp in zip(agent.model.parameters(), agent.target_model.parameters()):
        assert torch.equal(p, tp) and p.data_ptr() != tp.data_ptr()
    old_target = {k: v.clone() for k, v in agent.target_model.state_dict().items()}
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(torch.randn_like(p))
    obs = inputs((4,))
    assert not torch.allclose(agent(*obs), agent.target(*obs))
    for k, v in agent.target_model.state_dict().items():  # unchanged until updated
        assert torch.equal(v, old_target[k])
    tau = 0.3
    agent.update_target(tau=tau)
    online = agent.model.state_dict()
    for k, v in agent.target_model.state_dict().items():
        torch.testing.assert_close(v, tau * online[k] + (1 - tau) * old_target[k])
    agent.update_target()
    torch.testing.assert_close(agent.target(*obs), agent(*obs).detach())


def test_state_dict_round_trip():
    agent = make_dqn()
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(1.0)  # model and target now differ
    state = agent.state_dict()
    assert set(state) == {"model", "target"}
    other = make_dqn()
    other.load_state_dict(state)
    obs = inputs((2,))
    torch.testing.assert_close(other(*obs), agent(*obs))
    torch.testing.assert_close(other.target(*obs), agent.target(*obs))
    assert not torch.allclose(other(*obs), other.target(*obs))
    # A plain model state dict loads into both networks.
    other.load_state_dict(agent.model.state_dict())
    torch.testing.assert_close(other.target(*obs), agent(*obs).detach())
    # An agent state dict works as initial_model_state_dict, target included.
    resumed = DqnAgent(model_kwargs=dict(hidden_sizes=[8, 8]), initial_model_state_dict=state)
    resumed.initialize(SPACES)
    torch.testing.assert_close(resumed.target(*obs), agent.target(*obs))
    torch.testing.assert_close(resumed(*obs), agent(*obs))


def test_sync_shared_model_copies_the_model_only():
    agent = make_dqn()
    agent.shared_model = DqnMlpModel(OBS_SHAPE, A, hidden_sizes=[8, 8])
    sync_shared_model(agent)
    for k, v in agent.shared_model.state_dict().items():
        assert torch.equal(v, agent.model.state_dict()[k])


def test_discrete_action_space_required():
    spaces = EnvSpaces(observation=FloatBox(-1, 1, shape=OBS_SHAPE),
                       action=FloatBox(-1, 1, shape=(2,)))
    with pytest.raises(TypeError, match="discrete action space"):
        DqnAgent().initialize(spaces)


def test_default_models_and_env_kwargs():
    for Agent, Model in [(DqnAgent, DqnMlpModel), (CatDqnAgent, CatDqnMlpModel),
                         (R2d1Agent, R2d1MlpModel)]:
        agent = Agent()
        assert agent.ModelCls is Model
        assert agent.make_env_to_model_kwargs(SPACES) == dict(observation_shape=OBS_SHAPE,
                                                              output_size=A)
    assert AlternatingR2d1Agent().ModelCls is R2d1MlpModel
    for Agent, Model in [(AtariDqnAgent, AtariDqnModel), (AtariCatDqnAgent, AtariCatDqnModel),
                         (AtariR2d1Agent, AtariR2d1Model),
                         (AlternatingAtariR2d1Agent, AtariR2d1Model)]:
        agent = Agent()
        assert agent.ModelCls is Model
        assert agent.make_env_to_model_kwargs(ATARI_SPACES) == dict(image_shape=IMAGE_SHAPE,
                                                                    output_size=A)


# ---- CatDqnAgent ---------------------------------------------------------------------------------
def make_cat(n_atoms=7, **model_kwargs):
    agent = CatDqnAgent(n_atoms=n_atoms, model_kwargs=dict(hidden_sizes=[8], **model_kwargs),
                        eps_eval=0.0)
    agent.initialize(SPACES)
    return agent


def test_cat_dqn_probabilities_and_support():
    agent = make_cat()
    assert isinstance(agent.distribution, CategoricalEpsilonGreedy)
    assert agent.model.n_atoms == 7 and agent.target_model.n_atoms == 7
    agent.give_V_min_max(-2.0, 4.0)
    torch.testing.assert_close(agent.z, torch.tensor([-2.0, -1.0, 0.0, 1.0, 2.0, 3.0, 4.0]))
    torch.testing.assert_close(agent.distribution.z, agent.z)
    obs = inputs((5,))
    p = agent(*obs)
    assert p.shape == (5, A, 7) and p.requires_grad
    torch.testing.assert_close(p.sum(-1), torch.ones(5, A))
    torch.testing.assert_close(agent(*obs, log_probs=True).exp(), p)
    torch.testing.assert_close(agent.target(*obs), p.detach())
    agent.eval_mode(1)
    step = agent.step(*obs)
    assert isinstance(step.agent_info, CatAgentInfo) and step.agent_info._fields == ("p",)
    torch.testing.assert_close(step.agent_info.p, p.detach())
    expected_q = (p.detach().numpy() * np.linspace(-2, 4, 7)).sum(-1)
    np.testing.assert_array_equal(step.action.numpy(), expected_q.argmax(-1))
    with pytest.raises(ValueError, match="V_min < V_max"):
        agent.give_V_min_max(1.0, 1.0)


def test_cat_dqn_placeholder_support_before_V_min_max():
    agent = make_cat()
    assert agent.distribution.z is not None  # the sampler's example step comes before the algorithm
    agent.eval_mode(1)
    obs = inputs((6,))
    before = agent.step(*obs).action
    agent.give_V_min_max(-100.0, 3.0)
    # any increasing support: same greedy action
    assert torch.equal(agent.step(*obs).action, before)


def test_cat_dqn_n_atoms_conflict():
    with pytest.raises(ValueError, match="n_atoms"):
        CatDqnAgent(n_atoms=51, model_kwargs=dict(n_atoms=11))


# ---- noisy nets ---------------------------------------------------------------------------------
def test_noisy_agent_resamples_noise_while_sampling_and_not_in_eval():
    agent = make_cat(noisy=True, dueling=True)
    assert agent.noisy
    obs = inputs((2,))
    agent.sample_mode(0)
    p1 = agent.step(*obs).agent_info.p
    p2 = agent.step(*obs).agent_info.p
    assert not torch.allclose(p1, p2)
    agent.eval_mode(1)
    e1 = agent.step(*obs).agent_info.p
    torch.testing.assert_close(agent.step(*obs).agent_info.p, e1)
    agent.sample_mode(1)
    assert not torch.allclose(agent.step(*obs).agent_info.p, e1)
    still = CatDqnAgent(n_atoms=5, noisy_reset=False,
                        model_kwargs=dict(hidden_sizes=[8], noisy=True))
    still.initialize(SPACES)
    still.sample_mode(0)
    torch.testing.assert_close(still.step(*obs).agent_info.p, still.step(*obs).agent_info.p)
    before = still.target(*obs)
    still.reset_noise()  # the algorithm resamples both networks' noise
    assert not torch.allclose(still.target(*obs), before)


# ---- R2d1Agent ---------------------------------------------------------------------------------
def test_r2d1_step_records_and_advances_state():
    agent = make_r2d1()
    assert agent.recurrent
    B = 3
    agent.reset()
    agent.sample_mode(0)
    obs1, obs2 = inputs((B,), seed=1), inputs((B,), seed=2)
    s1 = agent.step(*obs1)
    assert isinstance(s1.agent_info, AgentInfoRnn)
    assert s1.agent_info._fields == ("q", "prev_rnn_state")
    assert s1.agent_info.prev_rnn_state.h.shape == (B, 1, LSTM)  # stored as [B, N, H]
    assert torch.count_nonzero(s1.agent_info.prev_rnn_state.h) == 0
    state_after_1 = agent.prev_rnn_state
    assert state_after_1.h.shape == (1, B, LSTM)
    s2 = agent.step(*obs2)
    torch.testing.assert_close(s2.agent_info.prev_rnn_state.h, state_after_1.h.transpose(0, 1))
    torch.testing.assert_close(s2.agent_info.prev_rnn_state.c, state_after_1.c.transpose(0, 1))
    # The same two steps as one [T=2, B] sequence from a zero state.
    seq = [torch.stack([a, b]) for a, b in zip(obs1, obs2)]
    q_seq, final = agent(*seq, None)
    torch.testing.assert_close(q_seq[0], s1.agent_info.q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(q_seq[1], s2.agent_info.q, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(final.h, agent.prev_rnn_state.h, atol=1e-5, rtol=1e-5)
    q_t, _ = agent.target(*seq, None)
    torch.testing.assert_close(q_t, q_seq.detach())


def test_r2d1_reset_one_and_reset():
    agent = make_r2d1()
    agent.sample_mode(0)
    agent.step(*inputs((3,)))
    agent.step(*inputs((3,), seed=1))
    agent.reset_one(1)
    h = agent.prev_rnn_state.h
    assert torch.count_nonzero(h[:, 1]) == 0 and torch.count_nonzero(h[:, 0]) > 0
    assert torch.count_nonzero(agent.prev_rnn_state.c[:, 1]) == 0
    step = agent.step(*inputs((3,), seed=2))
    assert torch.count_nonzero(step.agent_info.prev_rnn_state.h[1]) == 0
    agent.reset()
    assert agent.prev_rnn_state is None


def test_r2d1_sampling_state_survives_evaluation():
    agent = make_r2d1()
    agent.sample_mode(0)
    agent.step(*inputs((2,)))
    kept = agent.prev_rnn_state
    agent.eval_mode(1)
    assert agent.prev_rnn_state is None
    agent.step(*inputs((4,)))
    agent.sample_mode(1)
    assert agent.prev_rnn_state is kept


def test_r2d1_vector_epsilon_and_greedy_eval():
    agent = R2d1Agent(model_kwargs=dict(hidden_sizes=[8], lstm_size=LSTM, head_size=8),
                      eps_final_min=0.01, eps_final=0.5, eps_eval=0.0)
    agent.initialize(SPACES, global_B=4, env_ranks=[0, 1, 2, 3])
    agent.sample_mode(10_000)
    np.testing.assert_allclose(agent.distribution.epsilon.numpy(),
                               [0.01 * 50 ** (k / 3) for k in range(4)], rtol=1e-6)
    agent.eval_mode(1)
    step = agent.step(*inputs((4,)))
    assert torch.equal(step.action, step.agent_info.q.argmax(-1))


# ---- Atari agents -------------------------------------------------------------------------------
def atari_inputs(lead, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, 256, (*lead, *IMAGE_SHAPE), generator=g, dtype=torch.uint8),
            torch.randint(0, A, lead, generator=g), torch.randn(lead, generator=g))


@pytest.mark.parametrize("Agent,model_kwargs,field", [
    (AtariDqnAgent, dict(fc_sizes=16, **SMALL_CONV), "q"),
    (AtariCatDqnAgent, dict(fc_sizes=16, **SMALL_CONV), "p"),
    (AtariR2d1Agent, dict(fc_size=16, lstm_size=LSTM, head_size=8, **SMALL_CONV), "q"),
])
def test_atari_agents_step(Agent, model_kwargs, field):
    kwargs = dict(n_atoms=5) if Agent is AtariCatDqnAgent else {}
    agent = Agent(model_kwargs=model_kwargs, **kwargs)
    agent.initialize(ATARI_SPACES)
    agent.sample_mode(0)
    step = agent.step(*atari_inputs((2,)))
    assert step.action.shape == (2,) and int(step.action.max()) < A
    out = getattr(step.agent_info, field)
    assert out.shape[:2] == (2, A)
    assert math.isfinite(float(out.sum()))


# ---- alternating R2D1 ----------------------------------------------------------------------------
def make_alternating_r2d1(**kwargs):
    agent = AlternatingR2d1Agent(model_kwargs=dict(hidden_sizes=[8], lstm_size=LSTM, head_size=8),
                                 **kwargs)
    agent.initialize(SPACES)
    return agent


def test_alternating_r2d1_sets_epsilon_in_every_mode():
    agent = make_alternating_r2d1(eps_init=1.0, eps_final=0.1, eps_itr_min=0, eps_itr_max=10,
                                  eps_eval=0.05)
    assert isinstance(agent, EpsilonGreedyAgentMixin) and agent.recurrent and agent.alternating
    agent.sample_mode(5)
    assert float(agent.distribution.epsilon) == pytest.approx(0.55)
    agent.eval_mode(5)
    assert float(agent.distribution.epsilon) == pytest.approx(0.05)
    agent.eval_mode(0)  # pre-training evaluation: uniformly random
    assert float(agent.distribution.epsilon) == 1.0
    agent.sample_mode(20)
    assert float(agent.distribution.epsilon) == pytest.approx(0.1)


def test_alternating_r2d1_keeps_one_state_per_group():
    agent = make_alternating_r2d1()
    agent.sample_mode(0)
    group_a, group_b = inputs((2,), seed=1), inputs((2,), seed=2)
    step_a = agent.step(*group_a)
    assert agent.prev_rnn_state is None  # group B has not stepped yet
    step_b = agent.step(*group_b)
    assert torch.count_nonzero(step_a.agent_info.prev_rnn_state.h) == 0
    assert torch.count_nonzero(step_b.agent_info.prev_rnn_state.h) == 0
    state_b = agent.rnn_states.states[1]
    # Back at group A: its second step starts from its own first step's state.
    step_a2 = agent.step(*inputs((2,), seed=3))
    _, expected_a = agent(*group_a, None)
    torch.testing.assert_close(step_a2.agent_info.prev_rnn_state.h, expected_a.h.transpose(0, 1))
    agent.use_group(1)
    assert agent.prev_rnn_state is state_b
    # The same two groups through a plain R2D1 agent with the same weights give the same values.
    single = make_r2d1()
    single.load_state_dict(agent.state_dict())
    single.sample_mode(0)
    torch.testing.assert_close(single.step(*group_a).agent_info.q, step_a.agent_info.q)


def test_alternating_atari_r2d1_steps():
    agent = AlternatingAtariR2d1Agent(model_kwargs=dict(fc_size=16, lstm_size=LSTM, head_size=8,
                                                        **SMALL_CONV))
    agent.initialize(ATARI_SPACES)
    agent.sample_mode(0)
    for seed in range(3):
        step = agent.step(*atari_inputs((2,), seed=seed))
        assert step.action.shape == (2,) and step.agent_info.q.shape == (2, A)
    assert agent.rnn_states.n_groups == 2 and all(s is not None for s in agent.rnn_states.states)


# ---- policies ---------------------------------------------------------------------------------
def test_value_agents_refuse_distributional_calls():
    agent = make_dqn()
    assert agent.n_atoms is None and agent.z is None
    with pytest.raises(TypeError, match="give_V_min_max"):
        agent.give_V_min_max(-1.0, 1.0)
    with pytest.raises(ValueError, match="log_probs"):
        agent(*inputs((2,)), log_probs=True)
    with pytest.raises(TypeError, match="init_rnn_state"):
        agent(*inputs((2,)), torch.zeros(1))
    with pytest.raises(TypeError, match="recurrent"):
        R2d1Agent(policy=CategoricalQPolicy(5))


def test_atari_cat_dqn_support_and_n_atoms_checks():
    agent = AtariCatDqnAgent(n_atoms=5, model_kwargs=dict(fc_sizes=16, **SMALL_CONV))
    agent.initialize(ATARI_SPACES)
    assert agent.n_atoms == 5 and agent.model.n_atoms == 5
    agent.give_V_min_max(0.0, 4.0)
    torch.testing.assert_close(agent.distribution.z, torch.arange(5.0))
    assert (agent.V_min, agent.V_max) == (0.0, 4.0)
    with pytest.raises(ValueError, match="n_atoms"):
        AtariCatDqnAgent(n_atoms=1)


@pytest.mark.parametrize("recurrent", [False, True], ids=["dqn", "r2d1"])
def test_device_step_is_step_without_the_bookkeeping(recurrent):
    """``device_step`` gives step's epsilon-greedy actions and agent_info from the same
    generator state, without advancing the agent's state; step advances it to the next
    state device_step returned."""
    agent = make_r2d1(eps_init=0.5) if recurrent else make_dqn(eps_init=0.5)
    agent.sample_mode(0)
    x = inputs((4,), seed=1)
    agent.step(*x)
    before = agent.prev_rnn_state
    torch.manual_seed(3)
    action, info, next_state = agent.device_step(*inputs((4,), seed=2), before)
    assert agent.prev_rnn_state is before
    torch.manual_seed(3)
    step = agent.step(*inputs((4,), seed=2))
    assert torch.equal(step.action, action) and torch.equal(step.agent_info.q, info.q)
    if recurrent:
        assert all(torch.equal(s, t) for s, t in zip(agent.prev_rnn_state, next_state))
        assert torch.equal(step.agent_info.prev_rnn_state.h, info.prev_rnn_state.h)
    else:
        assert next_state is None
