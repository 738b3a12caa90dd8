"""Tests for the serial sampler on CartPole: buffer layout, step bookkeeping, trajectories,
evaluation, wait-reset collection and seeded reproducibility."""
import numpy as np
import pytest
import torch

from rlfast.agents import CategoricalPgAgent
from rlfast.envs import make
from rlfast.samplers import CpuWaitResetCollector, SerialSampler, TrajInfo
from rlfast.utils.buffer import buffer_func
from rlfast.utils.seed import set_seed
from tests.samplers._counting_env import CountingEnv

T, B = 16, 3


def make_sampler(max_episode_steps=None, **kwargs):
    env_kwargs = dict(id="CartPole-v1")
    if max_episode_steps is not None:
        env_kwargs["max_episode_steps"] = max_episode_steps
    defaults = dict(EnvCls=make, env_kwargs=env_kwargs, batch_T=T, batch_B=B,
                    max_decorrelation_steps=10)
    defaults.update(kwargs)
    return SerialSampler(**defaults)


def new_agent():
    return CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))


def collect(sampler, n_batches, start_itr=0):
    """Copies of ``n_batches`` consecutive batches as numpy, plus all completed traj infos."""
    batches, trajs = [], []
    for itr in range(start_itr, start_itr + n_batches):
        samples, completed = sampler.obtain_samples(itr)
        batches.append(buffer_func(samples, lambda x: x.numpy().copy()))
        trajs.append(list(completed))
    return batches, trajs


def concat(batches, getter):
    return np.concatenate([getter(b) for b in batches], axis=0)


def is_reset_state(obs):
    """CartPole starts every episode uniformly in [-0.05, 0.05]^4."""
    return np.all(np.abs(obs) <= 0.05 + 1e-6, axis=-1)


@pytest.fixture(autouse=True)
def _seeded():
    set_seed(2024)


@pytest.fixture
def sampler_factory():
    made = []

    def factory(**kwargs):
        sampler = make_sampler(**kwargs)
        made.append(sampler)
        return sampler

    yield factory
    for sampler in made:
        sampler.shutdown()


def test_cartpole_buffer_fields_shapes_and_dtypes(sampler_factory):
    sampler = sampler_factory()
    agent = new_agent()
    examples = sampler.initialize(agent, seed=3)
    assert examples.observation.shape == (4,)
    samples, _ = sampler.obtain_samples(0)
    env, ag = samples.env, samples.agent
    assert env.observation.shape == (T, B, 4) and env.observation.dtype == torch.float32
    assert env.reward.shape == (T, B) and env.reward.dtype == torch.float32
    assert env.prev_reward.shape == (T, B) and env.prev_reward.dtype == torch.float32
    assert env.done.shape == (T, B) and env.done.dtype == torch.bool
    assert env.env_info.timeout.shape == (T, B) and env.env_info.timeout.dtype == torch.bool
    assert ag.action.shape == (T, B) and ag.action.dtype == torch.int64
    assert ag.prev_action.shape == (T, B) and ag.prev_action.dtype == torch.int64
    assert ag.agent_info.dist_info.prob.shape == (T, B, 2)
    assert ag.agent_info.value.shape == (T, B) and ag.agent_info.value.dtype == torch.float32
    assert "bootstrap_value" not in ag
    # Everything was written: CartPole observations are never exactly zero, rewards are 1.
    assert torch.all(env.observation.abs().sum(-1) > 0)
    assert torch.all(env.reward == 1.0)
    assert set(ag.action.unique().tolist()) <= {0, 1}
    assert torch.allclose(ag.agent_info.dist_info.prob.sum(-1), torch.ones(T, B))
    # The numpy and torch views are the same memory.
    assert np.shares_memory(sampler.samples_np.env.observation, env.observation.numpy())
    assert np.shares_memory(sampler.samples_np.agent.action, ag.action.numpy())


def test_prev_action_and_prev_reward_follow_previous_step(sampler_factory):
    sampler = sampler_factory(max_episode_steps=12)
    sampler.initialize(new_agent(), seed=4)
    batches, _ = collect(sampler, 3)
    action = concat(batches, lambda s: s.agent.action)
    prev_action = concat(batches, lambda s: s.agent.prev_action)
    reward = concat(batches, lambda s: s.env.reward)
    prev_reward = concat(batches, lambda s: s.env.prev_reward)
    done = concat(batches, lambda s: s.env.done)
    timeout = concat(batches, lambda s: s.env.env_info.timeout)
    observation = concat(batches, lambda s: s.env.observation)
    assert done.sum() >= B and timeout.any(), "test setup: need episode ends in the window"
    assert not np.any(timeout & ~done)  # a time-limit cut is a done
    expected_prev_action = np.where(done[:-1], 0, action[:-1])
    expected_prev_reward = np.where(done[:-1], 0.0, reward[:-1])
    assert np.array_equal(prev_action[1:], expected_prev_action)
    assert np.array_equal(prev_reward[1:], expected_prev_reward)
    # After a done the next observation is a fresh reset state.
    t_idx, b_idx = np.nonzero(done[:-1])
    assert np.all(is_reset_state(observation[t_idx + 1, b_idx]))


def test_bootstrap_value_is_value_of_next_observation(sampler_factory):
    sampler = sampler_factory()
    agent = new_agent()
    sampler.initialize(agent, seed=5, bootstrap_value=True)
    samples, _ = sampler.obtain_samples(0)
    bootstrap = samples.agent.bootstrap_value
    assert bootstrap.shape == (1, B) and bootstrap.dtype == torch.float32
    observation, prev_action, prev_reward = sampler.agent_inputs
    expected = agent.value(torch.as_tensor(observation), torch.as_tensor(prev_action),
                           torch.as_tensor(prev_reward))
    assert torch.allclose(bootstrap[0], expected, atol=1e-6)
    assert torch.all(bootstrap != 0)


def test_completed_trajectories_match_dones(sampler_factory):
    class HalfDiscountTrajInfo(TrajInfo):
        pass

    sampler = sampler_factory(max_episode_steps=10, max_decorrelation_steps=0,
                              TrajInfoCls=HalfDiscountTrajInfo)
    sampler.initialize(new_agent(), seed=6, traj_info_kwargs=dict(discount=0.5))
    batches, trajs = collect(sampler, 3)
    done = concat(batches, lambda s: s.env.done)
    flat_trajs = [t for batch in trajs for t in batch]
    assert [len(t) for t in trajs] == [int(b.env.done.sum()) for b in batches]
    assert len(flat_trajs) >= B
    for info in flat_trajs:
        assert isinstance(info, HalfDiscountTrajInfo)
        assert info.Return == info.Length == info.NonzeroRewards
        assert 1 <= info.Length <= 10
        assert info.DiscountedReturn == pytest.approx((1 - 0.5 ** info.Length) / (1 - 0.5))
    # No decorrelation: every episode starts at t=0, so its length is the gap between dones,
    # and trajectories complete in (time, env) order.
    it = iter(flat_trajs)
    last_end = np.zeros(B, dtype=int)
    for t in range(done.shape[0]):
        for b in range(B):
            if done[t, b]:
                assert next(it).Length == t + 1 - last_end[b]
                last_end[b] = t + 1
    # The discount is bound per sampler; no class is mutated.
    assert TrajInfo()._discount == 1.0 and HalfDiscountTrajInfo()._discount == 1.0


def test_evaluation_returns_trajectories_and_respects_max_trajectories(sampler_factory):
    limited = sampler_factory(max_episode_steps=5, eval_n_envs=2, eval_max_steps=40,
                              eval_max_trajectories=3)
    agent = new_agent()
    limited.initialize(agent, seed=7)
    trajs = limited.evaluate_agent(0)
    # 2 envs end an episode together every 5 steps: the 2nd round passes 3 and stops.
    assert len(trajs) == 4
    assert all(t.Length == t.Return == 5 for t in trajs)
    assert agent._mode == "eval"
    limited.obtain_samples(0)
    assert agent._mode == "sample"
    unlimited = sampler_factory(max_episode_steps=5, eval_n_envs=2, eval_max_steps=40)
    unlimited.initialize(new_agent(), seed=7)
    trajs = unlimited.evaluate_agent(0)
    assert len(trajs) == 8  # 40 steps over 2 envs: 20 each, 4 episodes of 5 each
    assert all(isinstance(t, TrajInfo) and t.Length == 5 for t in trajs)


class RightCountTrajInfo(TrajInfo):
    """Also counts how often action 1 (push right) was taken."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.Right = 0

    def step(self, observation, action, reward, done, agent_info, env_info):
        super().step(observation, action, reward, done, agent_info, env_info)
        self.Right += int(action == 1)


@pytest.mark.parametrize("greedy_eval", [True, False])
def test_evaluation_uses_greedy_actions(sampler_factory, greedy_eval):
    sampler = sampler_factory(max_episode_steps=30, eval_n_envs=2, eval_max_steps=120,
                              TrajInfoCls=RightCountTrajInfo)
    agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]), greedy_eval=greedy_eval)
    sampler.initialize(agent, seed=8)
    with torch.no_grad():  # p(right) ~ 0.7 everywhere: right is the argmax, left still likely
        agent.model.pi.model[-1].bias.copy_(torch.tensor([-0.42, 0.42]))
    trajs = sampler.evaluate_agent(0)
    assert len(trajs) >= 6
    always_right = [t.Right == t.Length for t in trajs]
    if greedy_eval:
        assert all(always_right)
    else:
        assert not all(always_right)


def test_evaluation_configuration_errors(sampler_factory):
    sampler = sampler_factory()
    sampler.initialize(new_agent(), seed=9)
    with pytest.raises(ValueError, match="eval_n_envs"):
        sampler.evaluate_agent(0)
    with pytest.raises(ValueError, match="eval_max_steps"):
        make_sampler(eval_n_envs=2)
    with pytest.raises(ValueError, match="batch_T"):
        make_sampler(batch_T=0)
    with pytest.raises(ValueError, match="batch_B"):
        make_sampler(batch_B=0)


def test_wait_reset_collector_idles_finished_envs_until_next_batch(sampler_factory):
    sampler = sampler_factory(max_episode_steps=6, CollectorCls=CpuWaitResetCollector,
                              max_decorrelation_steps=5)
    assert sampler.mid_batch_reset is False
    sampler.initialize(new_agent(), seed=10)
    batches, trajs = collect(sampler, 3)
    for k, batch in enumerate(batches):
        done, reward = batch.env.done, batch.env.reward
        observation = batch.env.observation
        # An episode is at most 6 < T steps, so every column finishes exactly once per batch.
        assert np.array_equal(done.sum(0), np.ones(B)), f"batch {k}"
        assert len(trajs[k]) == B
        for b in range(B):
            t_done = int(np.argmax(done[:, b]))
            assert np.all(reward[: t_done + 1, b] == 1.0)
            assert np.all(reward[t_done + 1:, b] == 0.0)
            assert not done[t_done + 1:, b].any()
            # The idle env is not stepped: its observation stays frozen.
            assert np.all(observation[t_done + 1:, b] == observation[min(t_done + 1, T - 1), b])
            if k > 0:
                # Reset at the start of this batch: fresh state, null action, zero reward.
                assert is_reset_state(observation[0, b])
                assert batch.agent.prev_action[0, b] == 0 and batch.env.prev_reward[0, b] == 0
                assert t_done <= 5
        lengths = sorted(t.Length for t in trajs[k])
        if k > 0:
            assert lengths == sorted(int(np.argmax(done[:, b])) + 1 for b in range(B))


def test_same_seed_gives_identical_samples():
    def run(seed):
        set_seed(seed)
        sampler = make_sampler(max_episode_steps=20)
        try:
            sampler.initialize(new_agent(), seed=seed)
            return collect(sampler, 3)
        finally:
            sampler.shutdown()

    first, first_trajs = run(11)
    second, second_trajs = run(11)
    other, _ = run(12)
    for a, b in zip(first, second):
        for x, y in zip(_leaves(a), _leaves(b)):
            assert np.array_equal(x, y)
    assert [[dict(t) for t in batch] for batch in first_trajs] == \
        [[dict(t) for t in batch] for batch in second_trajs]
    assert not np.array_equal(first[0].env.observation, other[0].env.observation)


def _leaves(x):
    if x is None:
        return []
    if hasattr(x, "_fields"):
        return [leaf for v in x for leaf in _leaves(v)]
    return [x]


def test_shutdown_closes_environments():
    sampler = SerialSampler(EnvCls=CountingEnv, env_kwargs=dict(life_len=4), batch_T=4,
                            batch_B=2, max_decorrelation_steps=0, eval_n_envs=1,
                            eval_max_steps=8)
    sampler.initialize(new_agent(), seed=0)
    envs = sampler.envs + sampler.eval_envs
    assert len(envs) == 3 and not any(env.closed for env in envs)
    sampler.shutdown()
    assert all(env.closed for env in envs)
    sampler.shutdown()  # idempotent
