"""rlfast.agents.param_sharing: the training twin and its publication to the sampling agent
(a learner's private copy, trained without touching the sampler's shared-memory parameters,
then published back in place), DDP wrapping of the trained models on a real gloo group, the
shared CPU model of parallel samplers and the asynchronous runners' parameter board."""
import multiprocessing as mp

import pytest
import torch
import torch.distributed as dist

from rlfast.agents import (AtariFfAgent, CategoricalPgAgent, DqnAgent, MujocoFfAgent,
                           RecurrentCategoricalPgAgent, SacAgent, Td3Agent)
from rlfast.agents.param_sharing import (AsyncParams, publish_to, sync_shared_model,
                                         training_twin, unwrap_data_parallel,
                                         use_own_cpu_model, wrap_data_parallel)
from rlfast.agents.shared_params import SharedParams
from tests.agents._spaces import spaces_of

DDP = torch.nn.parallel.DistributedDataParallel

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
    twin = training_twin(agent)
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
    twin = training_twin(agent)
    for key, value in tensors(agent).items():
        assert torch.equal(value, tensors(twin)[key])
        assert value.data_ptr() != tensors(twin)[key].data_ptr()


@pytest.mark.parametrize("name", list(AGENTS))
def test_training_the_twin_then_publishing(name):
    agent = build(name, share_memory=True)
    agent.sample_mode(0)
    twin = training_twin(agent)
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

    publish_to(twin, agent)
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
    twin = training_twin(agent)
    obs = inputs("gaussian_norm", twin, seed=3)[0]
    twin.update_obs_rms(obs)
    assert float(rms.count) == 0 and torch.equal(rms.mean, torch.zeros_like(rms.mean))
    publish_to(twin, agent)
    flat = obs.reshape(-1, obs.shape[-1]).double()
    assert float(rms.count) == flat.shape[0]
    torch.testing.assert_close(rms.mean.double(), flat.mean(0), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(rms.var.double(), flat.var(0, unbiased=False), rtol=1e-5,
                               atol=1e-6)
    assert rms.mean.data_ptr() == mean_ptr and rms.mean.is_shared()


def test_dqn_sampling_state_is_handed_over():
    agent = build("dqn", share_memory=True)
    assert agent.sampling_state() == dict(eps_itr_min=50, eps_itr_max=1000)
    twin = training_twin(agent)
    twin.set_epsilon_itr_min_max(7, 70)  # what the DQN algorithm's initialize does
    assert (agent.eps_itr_min, agent.eps_itr_max) == (50, 1000)
    agent.sample_mode(70)
    assert agent.eps_sample == pytest.approx(1 + (20 / 950) * (0.01 - 1))
    publish_to(twin, agent)
    assert (agent.eps_itr_min, agent.eps_itr_max) == (7, 70)
    agent.sample_mode(70)  # the schedule now ends at 70
    assert agent.eps_sample == pytest.approx(0.01)
    agent.sample_mode(7)
    assert agent.eps_sample == pytest.approx(1.0)


def test_publish_hands_over_whatever_sampling_state_the_twin_reports():
    agent = build("categorical", share_memory=True)
    twin = training_twin(agent)
    twin.sampling_state = lambda: {"greedy_eval": False}
    assert agent.greedy_eval is True
    publish_to(twin, agent)
    assert agent.greedy_eval is False


def test_the_async_board_stays_off_the_agent():
    """The board is the runner's: making it leaves the agent's attributes as they were, so a
    twin taken afterwards copies no shared memory or lock."""
    agent = build("categorical", share_memory=False)
    before = dict(vars(agent))
    params = AsyncParams(agent)
    assert dict(vars(agent)) == before
    twin = training_twin(agent)
    assert not any(isinstance(v, (AsyncParams, SharedParams)) for v in vars(twin).values())
    assert params.board.version == 0


def test_unbuilt_agent_is_a_value_error():
    agent = CategoricalPgAgent()
    with pytest.raises(ValueError, match="built model"):
        training_twin(agent)


@pytest.fixture
def gloo_group(tmp_path):
    """A real gloo process group of world size 1 in this process, destroyed afterwards."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0,
                            world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_ddp_wrapped_model_is_a_value_error(gloo_group):
    agent = build("categorical", share_memory=False)
    try:
        wrap_data_parallel(agent)
        assert isinstance(agent.model, DDP)
        with pytest.raises(ValueError, match="DistributedDataParallel"):
            training_twin(agent)
    finally:
        unwrap_data_parallel(agent)
    twin = training_twin(agent)  # unwrapped again: fine
    assert not isinstance(twin.model, DDP)


def test_wrap_data_parallel_wraps_the_model_and_unwrap_restores_it(gloo_group):
    agent = build("categorical", share_memory=False)
    assert agent.trained_model_names == ("model",)
    model, state = agent.model, snapshot(agent)
    try:
        assert wrap_data_parallel(agent) == agent.device == torch.device("cpu")
        assert isinstance(agent.model, DDP) and agent.model.module is model
        assert [p for p in agent.parameters()] == [p for p in model.parameters()]
        assert list(agent.state_dict()) == list(model.state_dict())  # no "module." prefix
    finally:
        unwrap_data_parallel(agent)
    assert agent.model is model
    for key, value in tensors(agent).items():
        assert torch.equal(value, state[key]), key


def test_dqn_wraps_its_model_not_its_target(gloo_group):
    agent = build("dqn", share_memory=False)
    target = agent.target_model
    try:
        wrap_data_parallel(agent)
        assert isinstance(agent.model, DDP) and agent.target_model is target
    finally:
        unwrap_data_parallel(agent)
    assert not isinstance(agent.model, DDP)


@pytest.mark.parametrize("cls", [Td3Agent, SacAgent])
def test_qpg_agents_wrap_their_critic_and_drop_their_target_pairs(cls, gloo_group):
    agent = cls(model_kwargs=dict(hidden_sizes=[8]), q_model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(spaces_of("pendulum"))
    assert agent.trained_model_names == ("model", "q_model")
    policy, critic = agent.model, agent.q_model
    targets = {name: getattr(agent, name) for name in agent.target_names}
    agent.update_target(tau=0.5)  # caches the target/source pairs
    assert agent._target_pairs is not None
    try:
        wrap_data_parallel(agent)
        assert isinstance(agent.model, DDP) and agent.model.module is policy
        assert isinstance(agent.q_model, DDP) and agent.q_model.module is critic
        for name, target in targets.items():  # the targets follow by averaging: unwrapped
            assert getattr(agent, name) is target and not isinstance(target, DDP)
        assert agent._target_pairs is None
        with torch.no_grad():
            for p in critic.parameters():
                p.add_(1.0)
        agent.update_target(tau=1.0)  # rebuilt from the wrapped models: the same tensors
        for t, c in zip(agent.target_q_model.parameters(), critic.parameters()):
            assert torch.equal(t, c)
    finally:
        unwrap_data_parallel(agent)
    assert agent.model is policy and agent.q_model is critic
    assert agent._target_pairs is None


def test_sync_shared_model_strips_the_ddp_prefix(gloo_group):
    agent = build("categorical", share_memory=False)
    agent.shared_model = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))
    torch.manual_seed(5)
    agent.shared_model.initialize(agent.env_spaces)
    agent.shared_model = agent.shared_model.model
    try:
        wrap_data_parallel(agent)
        sync_shared_model(agent)
    finally:
        unwrap_data_parallel(agent)
    for key, value in agent.shared_model.state_dict().items():
        assert torch.equal(value, agent.model.state_dict()[key]), key


# ---- the shared CPU model of parallel samplers -----------------------------------------------
def _other_model(agent):
    """A model of ``agent``'s class with other weights (a shared CPU copy that went stale)."""
    torch.manual_seed(1234)
    return type(agent.model)(**agent.env_model_kwargs, **agent.model_kwargs)


@pytest.mark.parametrize("name", ["categorical", "dqn"])
def test_sync_shared_model_copies_the_model_only(name):
    agent = build(name, share_memory=False)
    agent.shared_model = _other_model(agent)
    shared_ptrs = {k: v.data_ptr() for k, v in agent.shared_model.state_dict().items()}
    assert not all(torch.equal(v, agent.model.state_dict()[k])
                   for k, v in agent.shared_model.state_dict().items())
    if name == "dqn":  # the target differs from the model: it must not be what is copied
        with torch.no_grad():
            for p in agent.target_model.parameters():
                p.add_(1.0)
    sync_shared_model(agent)
    for key, value in agent.shared_model.state_dict().items():
        assert torch.equal(value, agent.model.state_dict()[key]), key
        assert value.data_ptr() == shared_ptrs[key], key  # in place


def test_sync_shared_model_copies_a_qpg_policy_only():
    agent = Td3Agent(model_kwargs=dict(hidden_sizes=[8]), q_model_kwargs=dict(hidden_sizes=[8]))
    agent.initialize(spaces_of("pendulum"))
    agent.shared_model = _other_model(agent)
    sync_shared_model(agent)
    for key, value in agent.shared_model.state_dict().items():
        assert torch.equal(value, agent.model.state_dict()[key]), key


def test_sync_shared_model_without_a_separate_shared_model_is_a_no_op():
    agent = build("categorical", share_memory=True)
    before = snapshot(agent)
    sync_shared_model(agent)  # the same module: nothing to copy
    assert agent.shared_model is agent.model
    unshared = build("categorical", share_memory=False)
    sync_shared_model(unshared)  # no shared model at all
    assert unshared.shared_model is None
    for key, value in tensors(agent).items():
        assert torch.equal(value, before[key])


@pytest.mark.parametrize("share_memory", [True, False])
def test_use_own_cpu_model(share_memory):
    agent = build("categorical", share_memory=False)
    model = agent.model
    use_own_cpu_model(agent, share_memory=share_memory)
    assert agent.model is model and agent.share_memory is share_memory
    assert all(p.is_shared() is share_memory for p in agent.model.parameters())
    assert agent.shared_model is (model if share_memory else None)


# ---- the asynchronous runners' parameter board ------------------------------------------------
def _perturb(agent, value):
    with torch.no_grad():
        for p in agent.model.parameters():
            p.add_(value)


def _equal_models(a, b) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.model.state_dict().values(),
                                                  b.model.state_dict().values()))


@pytest.mark.parametrize("name", ["categorical", "recurrent", "dqn", "gaussian_norm"])
def test_async_params_send_then_recv_follows_the_version(name):
    optimizer = build(name, share_memory=False)  # the master's agent
    params = AsyncParams(optimizer)
    torch.manual_seed(7)
    sampler = build(name, share_memory=False)  # the sampler process's agent: other weights
    use_own_cpu_model(sampler, share_memory=True)
    assert params.sampler_updates == 0
    assert not params.recv(sampler)  # nothing published yet
    assert params.sampler_updates == 0
    _perturb(optimizer, 0.5)
    params.send(optimizer, updates=7)
    assert params.recv(sampler) and params.sampler_updates == 7
    assert _equal_models(sampler, optimizer)
    assert all(p.is_shared() for p in sampler.model.parameters())  # copied in place
    _perturb(sampler, 1.0)
    assert not params.recv(sampler)  # same version: no copy
    assert not _equal_models(sampler, optimizer)
    _perturb(optimizer, 0.25)
    params.send(optimizer, updates=9, wait=False)  # on the CPU: published at once
    assert params.recv(sampler) and params.sampler_updates == 9
    assert _equal_models(sampler, optimizer)


class _Event:
    """A CUDA event stand-in, under way until synchronized."""

    def __init__(self):
        self.waited = False

    def record(self) -> None:
        pass

    def query(self) -> bool:
        return self.waited

    def synchronize(self) -> None:
        self.waited = True


def test_async_params_send_without_wait_on_cuda_stages_then_publishes():
    optimizer = build("categorical", share_memory=False)
    params = AsyncParams(optimizer)
    params.board.staging_tensor = lambda like: torch.empty(like.shape, dtype=like.dtype)
    events = []
    params.board.new_event = lambda: events.append(_Event()) or events[-1]
    optimizer.device = torch.device("cuda", 0)  # the CUDA branch, run on the CPU
    sampler = build("categorical", share_memory=False)
    _perturb(optimizer, 0.5)
    params.send(optimizer, updates=3, wait=False)
    assert params.board.publishing and params.board.version == 0 and len(events) == 1
    assert not params.recv(sampler)  # staged, not yet published
    staged = {k: v.clone() for k, v in optimizer.model.state_dict().items()}
    _perturb(optimizer, 1.0)
    params.send(optimizer, updates=4)  # wait: the staged copy, then the current parameters
    assert events[0].waited and not params.board.publishing
    assert params.board.version == 2 and params.board.published_updates == 4
    assert params.recv(sampler) and params.sampler_updates == 4
    assert _equal_models(sampler, optimizer)
    assert not all(torch.equal(v, staged[k]) for k, v in sampler.model.state_dict().items())


def _forked_sampler(params, agent, queue) -> None:
    received = params.recv(agent)
    queue.put((received, params.sampler_updates,
               [t.numpy().copy() for t in agent.model.state_dict().values()]))  # plain pickles


def test_async_params_reach_a_forked_sampler_process():
    if "fork" not in mp.get_all_start_methods():
        pytest.skip("needs fork")
    ctx = mp.get_context("fork")
    optimizer = build("categorical", share_memory=False)
    params = AsyncParams(optimizer, ctx)
    sampler = build("categorical", share_memory=False)
    use_own_cpu_model(sampler, share_memory=True)
    _perturb(optimizer, 0.5)
    params.send(optimizer, updates=11)  # before the fork: the child's board holds version 0
    queue = ctx.Queue()
    child = ctx.Process(target=_forked_sampler, args=(params, sampler, queue))
    child.start()
    try:
        received, updates, state = queue.get(timeout=60)
    finally:
        child.join(timeout=60)
    assert child.exitcode == 0
    assert received and updates == 11
    for mine, theirs in zip(optimizer.model.state_dict().values(), state):
        assert torch.equal(mine, torch.from_numpy(theirs))
    assert params.sampler_updates == 0  # the master's record is its own
