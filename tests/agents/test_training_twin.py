"""BaseAgent.training_twin() and publish_to(): a learner's private copy of a sampling agent,
trained without touching the sampler's (shared-memory) parameters, then published back in
place."""

import pytest
import torch
import torch.distributed as dist

from rlfast.agents import (AtariFfAgent, CategoricalPgAgent, DqnAgent, MujocoFfAgent,
                           RecurrentCategoricalPgAgent)
from tests.agents._spaces import spaces_of

# name -> (factory, spaces key, observation kind, discrete actions, recurrent)
AGENTS = {
    "categorical": (lambda: CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8])),
                    "cartpole", True, False),
    "atari": (lambda: AtariFfAgent(model_kwargs=dict(fc_sizes=16)), "pong", True, False),
    "gaussian_norm": (lambda: MujocoFfAgent(model_kwargs=dict(hidden_sizes=[8],
                                                              normalize_observation=True)),
                      "pendulum", False, False),
    "recurrent": (lambda: RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8],
                                                                        lstm_size=6)),
                  "cartpole", True, True),
    "dqn": (lambda: DqnAgent(model_kwargs=dict(hidden_sizes=[8])), "cartpole", True, False),
}


@pytest.fixture(autouse=True)
def _seeded():
    torch.manual_seed(99)


def build(name, share_memory=True):
    factory, key, _, _ = AGENTS[name]
    spaces = spaces_of(key)
    agent = factory()
    agent.initialize(spaces, share_memory=share_memory)
    return agent


def inputs(name, agent, seed=0):
    """Observations, previous actions and rewards: ``[T=3, B=2]`` for recurrent agents, else
    ``[B=4]``."""
    _, _, discrete, recurrent = AGENTS[name]
    spaces = agent.env_spaces
    lead = (3, 2) if recurrent else (4,)
    g = torch.Generator().manual_seed(seed)
    obs_shape = tuple(spaces.observation.shape)
    if name == "atari":
        obs = torch.randint(0, 256, lead + obs_shape, generator=g, dtype=torch.uint8)
    else:
        obs = 3 * torch.randn(lead + obs_shape, generator=g) + 1  # far from mean 0, var 1
    if discrete:
        prev_action = torch.randint(0, int(spaces.action.n), lead, generator=g)
    else:
        prev_action = torch.rand(lead + tuple(spaces.action.shape), generator=g) * 4 - 2
    return obs, prev_action, torch.randn(lead, generator=g)


def outputs(agent, name, seed=0):
    """The agent's training forward pass as a flat list of float tensors."""
    result = agent(*inputs(name, agent, seed))
    flat = []

    def visit(x):
        if isinstance(x, torch.Tensor):
            if x.is_floating_point():
                flat.append(x)
        elif isinstance(x, tuple):
            for item in x:
                visit(item)

    visit(result)
    return flat


def tensors(agent):
    """Every parameter and buffer of the agent's models, by name (DQN: the target too)."""
    found = {f"model.{k}": v for k, v in agent.model.state_dict(keep_vars=True).items()}
    target = getattr(agent, "target_model", None)
    if target is not None:
        found.update({f"target.{k}": v for k, v in target.state_dict(keep_vars=True).items()})
    return found


def snapshot(agent):
    return {k: v.detach().clone() for k, v in tensors(agent).items()}


def train_twin(twin, name, steps=2):
    """A few SGD steps on a loss of the twin's outputs (plus observation statistics and, for
    DQN, a target update), as a learner would."""
    optimizer = torch.optim.SGD(twin.parameters(), lr=0.1)
    twin.train_mode(1)
    for step in range(steps):
        optimizer.zero_grad()
        loss = sum(out.pow(2).mean() for out in outputs(twin, name, seed=step))
        loss.backward()
        optimizer.step()
    if name == "gaussian_norm":
        twin.update_obs_rms(inputs(name, twin, seed=5)[0])
    if name == "dqn":
        twin.update_target()


@pytest.mark.parametrize("name", list(AGENTS))
def test_twin_has_equal_parameters_in_private_memory(name):
    agent = build(name, share_memory=True)
    twin = agent.training_twin()
    assert type(twin) is type(agent) and twin is not agent
    assert twin.model is not agent.model and twin.device == agent.device
    assert twin.shared_model is None and twin.share_memory is False
    assert agent.shared_model is agent.model and agent.share_memory is True
    mine, theirs = tensors(agent), tensors(twin)
    assert list(mine) == list(theirs)
    for key in mine:
        assert torch.equal(mine[key], theirs[key]), key
        assert mine[key].dtype == theirs[key].dtype and mine[key].device == theirs[key].device
        assert mine[key].data_ptr() != theirs[key].data_ptr(), key
        assert not theirs[key].is_shared(), key
        if key.startswith("model."):
            assert mine[key].is_shared(), key
    assert all(p.requires_grad for p in twin.parameters())
    # Same outputs on the same inputs.
    with torch.no_grad():
        for a, b in zip(outputs(agent, name), outputs(twin, name)):
            assert torch.equal(a, b)


def test_twin_of_an_unshared_agent_is_a_separate_copy():
    agent = build("categorical", share_memory=False)
    twin = agent.training_twin()
    for key, value in tensors(agent).items():
        assert torch.equal(value, tensors(twin)[key])
        assert value.data_ptr() != tensors(twin)[key].data_ptr()


@pytest.mark.parametrize("name", list(AGENTS))
def test_training_the_twin_then_publishing(name):
    agent = build(name, share_memory=True)
    agent.sample_mode(0)
    twin = agent.training_twin()
    before = snapshot(agent)
    ptrs = {k: v.data_ptr() for k, v in tensors(agent).items()}
    train_twin(twin, name)

    # The sampling agent is untouched; the twin moved.
    for key, value in tensors(agent).items():
        assert torch.equal(value, before[key]), key
    changed = [k for k, v in tensors(twin).items() if not torch.equal(v, before[k])]
    assert any(k.startswith("model.") for k in changed)
    if name == "dqn":
        assert any(k.startswith("target.") for k in changed)
    if name == "gaussian_norm":
        assert {"model.obs_norm.rms.mean", "model.obs_norm.rms.var",
                "model.obs_norm.rms.count"} <= set(changed)

    twin.publish_to(agent)
    trained = tensors(twin)
    for key, value in tensors(agent).items():
        assert torch.equal(value, trained[key]), key
        assert value.data_ptr() == ptrs[key], key  # in place: the workers' memory
        if key.startswith("model."):
            assert value.is_shared(), key
    assert agent.shared_model is agent.model
    with torch.no_grad():
        for a, b in zip(outputs(agent, name, seed=7), outputs(twin, name, seed=7)):
            assert torch.equal(a, b)
    # Published copies, not aliases: training on leaves the sampling agent alone again.
    published = snapshot(agent)
    train_twin(twin, name, steps=1)
    for key, value in tensors(agent).items():
        assert torch.equal(value, published[key]), key


def test_observation_statistics_are_published():
    agent = build("gaussian_norm", share_memory=True)
    rms = agent.model.obs_norm.rms
    mean_ptr = rms.mean.data_ptr()
    twin = agent.training_twin()
    obs = inputs("gaussian_norm", twin, seed=3)[0]
    twin.update_obs_rms(obs)
    assert float(rms.count) == 0 and torch.equal(rms.mean, torch.zeros_like(rms.mean))
    twin.publish_to(agent)
    flat = obs.reshape(-1, obs.shape[-1]).double()
    assert float(rms.count) == flat.shape[0]
    torch.testing.assert_close(rms.mean.double(), flat.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rms.var.double(), flat.var(0, unbiased=False), rtol=1e-5,
                               atol=1e-6)
    assert rms.mean.data_ptr() == mean_ptr and rms.mean.is_shared()


def test_dqn_sampling_state_is_handed_over():
    agent = build("dqn", share_memory=True)
    assert agent.sampling_state() == dict(eps_itr_min=50, eps_itr_max=1000)
    twin = agent.training_twin()
    twin.set_epsilon_itr_min_max(7, 70)  # what the DQN algorithm's initialize does
    assert (agent.eps_itr_min, agent.eps_itr_max) == (50, 1000)
    agent.sample_mode(70)
    assert agent.eps_sample == pytest.approx(1 + (20 / 950) * (0.01 - 1))
    twin.publish_to(agent)
    assert (agent.eps_itr_min, agent.eps_itr_max) == (7, 70)
    agent.sample_mode(70)  # the schedule now ends at 70
    assert agent.eps_sample == pytest.approx(0.01)
    agent.sample_mode(7)
    assert agent.eps_sample == pytest.approx(1.0)


def test_publish_hands_over_whatever_sampling_state_the_twin_reports():
    agent = build("categorical", share_memory=True)
    twin = agent.training_twin()
    twin.sampling_state = lambda: {"greedy_eval": False}
    assert agent.greedy_eval is True
    twin.publish_to(agent)
    assert agent.greedy_eval is False


def test_async_shared_params_board_is_not_copied():
    agent = build("categorical", share_memory=False)
    agent.async_share()
    board = agent.shared_params
    twin = agent.training_twin()
    assert agent.shared_params is board  # restored on the original
    assert getattr(twin, "shared_params", None) is None


def test_unbuilt_agent_is_a_value_error():
    agent = CategoricalPgAgent()
    with pytest.raises(ValueError, match="built model"):
        agent.training_twin()


def test_ddp_wrapped_model_is_a_value_error(tmp_path):
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    agent = build("categorical", share_memory=False)
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        agent.data_parallel()
        assert isinstance(agent.model, torch.nn.parallel.DistributedDataParallel)
        with pytest.raises(ValueError, match="DistributedDataParallel"):
            agent.training_twin()
    finally:
        agent.undo_data_parallel()
        dist.destroy_process_group()
    twin = agent.training_twin()  # unwrapped again: fine
    assert not isinstance(twin.model, torch.nn.parallel.DistributedDataParallel)
