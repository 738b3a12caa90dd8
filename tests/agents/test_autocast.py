"""PgAgent(autocast="bf16"): forward passes under torch.autocast in bfloat16, outputs back in
float32, close to the float32 agent's with the same weights; gradients reach the float32
parameters; the presets' ``agent.autocast`` and ``runner.overlap`` keys."""

import pytest
import torch

from rlfast.agents import AtariFfAgent, CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlfast.algos import PPO
from rlfast.experiments.config import apply_overrides
from rlfast.experiments.presets import build_experiment, get_preset

from tests.algos import _pg_batch as pg
from tests.agents._spaces import spaces_of

BF16_TOL = 2e-2

# name -> (agent class, model kwargs, spaces key)
AGENTS = {
    "categorical": (CategoricalPgAgent, dict(hidden_sizes=[16]), "cartpole"),
    "atari": (AtariFfAgent, dict(fc_sizes=16), "pong"),
}


def pair(name):
    """A float32 agent and a bf16 agent with the same weights."""
    cls, model_kwargs, key = AGENTS[name]
    torch.manual_seed(11)
    f32 = cls(model_kwargs=model_kwargs)
    f32.initialize(spaces_of(key))
    bf16 = cls(model_kwargs=model_kwargs, autocast="bf16",
               initial_model_state_dict=f32.state_dict())
    bf16.initialize(spaces_of(key))
    return f32, bf16


def inputs(name, spaces, B, seed=0):
    g = torch.Generator().manual_seed(seed)
    shape = (B,) + tuple(spaces.observation.shape)
    if name == "atari":
        obs = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    else:
        obs = 2 * torch.randn(shape, generator=g)
    prev_action = torch.randint(0, int(spaces.action.n), (B,), generator=g)
    return obs, prev_action, torch.randn(B, generator=g)


def first_layer_dtypes(agent, layer_type):
    """Output dtypes of the first ``layer_type`` module of the agent's model, as recorded."""
    seen = []
    layer = next(m for m in agent.model.modules() if isinstance(m, layer_type))
    layer.register_forward_hook(lambda m, i, out: seen.append(out.dtype))
    return seen


def pg_loss(dist_info, value, action, advantage, return_):
    """A policy-gradient loss: -advantage * log pi(a|s) plus a squared value error."""
    log_prob = torch.log(dist_info.prob.gather(-1, action.unsqueeze(-1)).squeeze(-1))
    return -(log_prob * advantage).mean() + 0.5 * ((value - return_) ** 2).mean()


@pytest.mark.parametrize("name", list(AGENTS))
def test_call_outputs_are_float32_and_close_to_float32_agent(name):
    f32, bf16 = pair(name)
    layer_type = torch.nn.Conv2d if name == "atari" else torch.nn.Linear
    seen = first_layer_dtypes(bf16, layer_type)
    seen_f32 = first_layer_dtypes(f32, layer_type)
    x = inputs(name, bf16.env_spaces, B=4)
    dist_a, value_a = f32(*x)
    dist_b, value_b = bf16(*x)
    # autocast is on, and only there
    assert seen == [torch.bfloat16] and seen_f32 == [torch.float32]
    assert dist_b.prob.dtype == torch.float32 and value_b.dtype == torch.float32
    assert dist_b.prob.shape == dist_a.prob.shape and value_b.shape == value_a.shape == (4,)
    torch.testing.assert_close(dist_b.prob, dist_a.prob, rtol=BF16_TOL, atol=BF16_TOL)
    torch.testing.assert_close(value_b, value_a, rtol=BF16_TOL, atol=BF16_TOL)
    torch.testing.assert_close(dist_b.prob.sum(-1), torch.ones(4), rtol=0, atol=1e-2)
    assert not torch.equal(value_b, value_a)  # bf16 rounding really happened
    assert all(p.dtype == torch.float32 for p in bf16.parameters())


@pytest.mark.parametrize("name", list(AGENTS))
def test_gradients_reach_float32_parameters_and_match_float32(name):
    f32, bf16 = pair(name)
    spaces = bf16.env_spaces
    x = inputs(name, spaces, B=4, seed=1)
    g = torch.Generator().manual_seed(2)
    action = torch.randint(0, int(spaces.action.n), (4,), generator=g)
    advantage, return_ = torch.randn(4, generator=g), torch.randn(4, generator=g)
    grads = []
    for agent in (f32, bf16):
        agent.train_mode(0)
        agent.model.zero_grad()
        pg_loss(*agent(*x), action, advantage, return_).backward()
        grads.append([p.grad for p in agent.parameters()])
    for p, ga, gb in zip(bf16.parameters(), *grads):
        assert gb is not None and gb.dtype == torch.float32 and gb.shape == p.shape
        assert torch.isfinite(gb).all() and gb.abs().max() > 0
        cos = torch.nn.functional.cosine_similarity(ga.flatten(), gb.flatten(), dim=0)
        assert cos > 0.995
        assert (ga - gb).abs().max() <= 0.1 * ga.abs().max()


@pytest.mark.parametrize("name", list(AGENTS))
def test_step_and_value_return_float32(name):
    f32, bf16 = pair(name)
    x = inputs(name, bf16.env_spaces, B=3, seed=4)
    bf16.sample_mode(0)
    step = bf16.step(*x)
    assert step.agent_info.dist_info.prob.dtype == torch.float32
    assert step.agent_info.value.dtype == torch.float32
    assert step.action.dtype == torch.int64 and step.action.shape == (3,)
    assert step.action.device.type == "cpu"
    f32.sample_mode(0)
    torch.testing.assert_close(step.agent_info.value, f32.step(*x).agent_info.value,
                               rtol=BF16_TOL, atol=BF16_TOL)
    value = bf16.value(*x)
    assert value.dtype == torch.float32
    torch.testing.assert_close(value, f32.value(*x), rtol=BF16_TOL, atol=BF16_TOL)


def test_recurrent_agent_rnn_state_is_float32():
    spaces = spaces_of("cartpole")
    model_kwargs = dict(hidden_sizes=[8], lstm_size=6)
    torch.manual_seed(5)
    f32 = RecurrentCategoricalPgAgent(model_kwargs=model_kwargs)
    f32.initialize(spaces)
    bf16 = RecurrentCategoricalPgAgent(model_kwargs=model_kwargs, autocast="bf16",
                                       initial_model_state_dict=f32.state_dict())
    bf16.initialize(spaces)
    g = torch.Generator().manual_seed(6)
    obs, prev_action = torch.randn(3, 2, 4, generator=g), torch.randint(0, 2, (3, 2), generator=g)
    prev_reward = torch.randn(3, 2, generator=g)

    dist_b, value_b, state_b = bf16(obs, prev_action, prev_reward)
    dist_a, value_a, state_a = f32(obs, prev_action, prev_reward)
    assert type(state_b) is type(state_a)
    for s_b, s_a in zip(state_b, state_a):
        assert s_b.dtype == torch.float32 and s_b.shape == s_a.shape == (1, 2, 6)
        torch.testing.assert_close(s_b, s_a, rtol=BF16_TOL, atol=BF16_TOL)
    assert dist_b.prob.dtype == value_b.dtype == torch.float32
    torch.testing.assert_close(value_b, value_a, rtol=BF16_TOL, atol=BF16_TOL)

    bf16.sample_mode(0)
    bf16.reset()
    step = bf16.step(obs[0], prev_action[0], prev_reward[0])
    step = bf16.step(obs[1], step.action, prev_reward[1])  # from a bf16-computed state
    assert all(s.dtype == torch.float32 for s in step.agent_info.prev_rnn_state)
    assert all(s.dtype == torch.float32 for s in bf16.prev_rnn_state)
    assert step.agent_info.value.dtype == torch.float32


@pytest.mark.parametrize("bad", ["fp16", "float16", "bfloat16", True, torch.bfloat16])
def test_other_autocast_values_are_value_errors_naming_bf16(bad):
    with pytest.raises(ValueError, match="bf16"):
        CategoricalPgAgent(autocast=bad)
    with pytest.raises(ValueError, match="bf16"):
        AtariFfAgent(autocast=bad)


def test_none_is_float32():
    agent = CategoricalPgAgent(autocast=None)
    assert agent.autocast is None and CategoricalPgAgent().autocast is None


def _bf16_batch_agent(kind):
    """``_pg_batch.make_agent`` with ``autocast="bf16"``: same seed, so the same weights."""
    torch.manual_seed(0)
    if kind == "categorical":
        agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]), autocast="bf16")
    else:
        agent = RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=6),
                                            autocast="bf16")
    agent.initialize(pg.SPACES[kind])
    return agent


@pytest.mark.parametrize("kind", ["categorical", "recurrent"])
def test_ppo_optimize_agent_with_a_bf16_agent(kind):
    """One epoch of one minibatch: the logged (pre-step) loss of the bf16 agent is close to
    the float32 agent's on the same batch and weights, and the step moves the parameters."""
    f32 = pg.make_agent(kind, seed=0)
    bf16 = _bf16_batch_agent(kind)
    for a, b in zip(f32.state_dict().values(), bf16.state_dict().values()):
        assert torch.equal(a, b)
    samples = pg.make_samples(bf16, kind, T=6, B=3)
    assert samples.agent.agent_info.value.dtype == torch.float32
    infos = []
    for agent in (f32, bf16):
        pg.perturb(agent, seed=1)
        agent.train_mode(0)
        algo = PPO(minibatches=1, epochs=1, learning_rate=1e-2)
        algo.initialize(agent, n_itr=10, batch_spec=pg.BatchSpec(6, 3), mid_batch_reset=True)
        before = [p.detach().clone() for p in agent.parameters()]
        infos.append(algo.optimize_agent(0, samples))
        assert all(p.dtype == torch.float32 for p in agent.parameters())
        assert any(not torch.equal(p, q) for p, q in zip(agent.parameters(), before))
        assert all(torch.isfinite(p).all() for p in agent.parameters())
    info_f32, info_bf16 = infos
    for field in ("loss", "entropy", "gradNorm"):
        got, want = getattr(info_bf16, field)[0], getattr(info_f32, field)[0]
        assert got == pytest.approx(want, rel=BF16_TOL, abs=BF16_TOL), field
        assert want != 0


# ---- presets -------------------------------------------------------------------------------

@pytest.mark.parametrize("algo", ["ppo", "a2c"])
@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1", "atari:pong"])
def test_on_policy_presets_have_autocast_none_and_overlap_false(algo, env_id):
    config = get_preset(algo, env_id)
    assert "autocast" in config["agent"] and config["agent"]["autocast"] is None
    assert "overlap" in config["runner"] and config["runner"]["overlap"] is False


@pytest.mark.parametrize("algo, env_id", [("dqn", "CartPole-v1"), ("dqn", "atari:pong"),
                                          ("r2d1", "CartPole-v1"), ("sac", "Pendulum-v1")])
def test_replay_presets_have_neither_key(algo, env_id):
    config = get_preset(algo, env_id)
    assert "autocast" not in config["agent"]
    assert "overlap" not in config.get("runner", {})


def test_overrides_set_bf16_and_overlap_and_reach_the_agent():
    config = apply_overrides(get_preset("ppo", "CartPole-v1"),
                             ["agent.autocast=bf16", "runner.overlap=True"])
    assert config["agent"]["autocast"] == "bf16" and isinstance(config["agent"]["autocast"], str)
    assert config["runner"]["overlap"] is True
    runner = build_experiment("ppo", "CartPole-v1", config, sampler="serial", seed=0)
    assert runner.agent.autocast == "bf16"
    with pytest.raises(ValueError, match="bf16"):
        build_experiment("ppo", "CartPole-v1",
                         apply_overrides(config, ["agent.autocast=fp16"]), sampler="serial")
