"""Tests for CpuSampler: forked workers writing their env slices of the shared samples buffer
with the shared-memory agent."""
import numpy as np
import psutil
import pytest
import torch

from rlfast.agents import CategoricalPgAgent, RecurrentCategoricalPgAgent
from rlfast.envs import make
from rlfast.samplers import CpuSampler, CpuWaitResetCollector
from rlfast.utils.buffer import buffer_func
from rlfast.utils.seed import set_seed
from tests.samplers._counting_env import CountingEnv

TWO_WORKERS = dict(workers_cpus=[[0], [1]])
STEP, RESETS, TAG = 0, 1, 2  # observation components of CountingEnv


def new_agent():
    return CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))


def worker_pids(sampler):
    return [p.pid for p in sampler.workers]


def assert_no_worker_alive(pids):
    alive = [pid for pid in pids if psutil.pid_exists(pid)
             and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
    assert alive == []
    children = {c.pid for c in psutil.Process().children(recursive=True)}
    assert children.isdisjoint(pids)


@pytest.fixture(autouse=True)
def _seeded():
    set_seed(99)


@pytest.fixture
def samplers():
    """Build samplers through this; every one is shut down, and its workers checked gone."""
    made = []

    def factory(**kwargs):
        sampler = CpuSampler(**kwargs)
        made.append(sampler)
        return sampler

    yield factory
    pids = []
    for sampler in made:
        pids += worker_pids(sampler) if getattr(sampler, "workers", None) else []
        sampler.shutdown()
    assert_no_worker_alive(pids)


def counting_kwargs(B, T=6, life_len=100, lives=1, **kwargs):
    return dict(EnvCls=CountingEnv, env_kwargs=dict(life_len=life_len, lives=lives),
                batch_T=T, batch_B=B, max_decorrelation_steps=0, **kwargs)


def cartpole_kwargs(B, T=8, max_episode_steps=None, **kwargs):
    env_kwargs = dict(id="CartPole-v1")
    if max_episode_steps:
        env_kwargs["max_episode_steps"] = max_episode_steps
    return dict(EnvCls=make, env_kwargs=env_kwargs, batch_T=T, batch_B=B,
                max_decorrelation_steps=5, **kwargs)


@pytest.mark.parametrize("B, split", [(4, [2, 2]), (3, [2, 1])])
def test_every_worker_writes_its_env_slice(samplers, B, split):
    T = 6
    sampler = samplers(**counting_kwargs(B, T))
    sampler.initialize(new_agent(), seed=50, affinity=TWO_WORKERS)
    assert sampler.n_envs_list == split and len(sampler.workers) == 2
    assert len(set(worker_pids(sampler))) == 2
    for itr in range(2):
        samples, _ = sampler.obtain_samples(itr)
        obs = samples.env.observation.numpy()
        assert obs.shape == (T, B, 3)
        # Column b was written by env b (seeded seed + b) at every time step.
        assert np.array_equal(obs[:, :, TAG], np.tile(50.0 + np.arange(B), (T, 1)))
        assert np.array_equal(obs[:, :, STEP], np.tile((itr * T + np.arange(T))[:, None], (1, B)))
        assert np.array_equal(samples.env.reward.numpy(), 1.0 + samples.agent.action.numpy())
        assert torch.all(samples.agent.agent_info.value != 0)
    # The master's sampler object shares the buffer memory the workers write into.
    assert np.shares_memory(sampler.samples_np.env.observation, samples.env.observation.numpy())


def test_agent_info_matches_master_recomputation(samplers):
    T, B = 8, 4
    sampler = samplers(**cartpole_kwargs(B, T, max_episode_steps=6))
    agent = new_agent()
    sampler.initialize(agent, seed=51, affinity=TWO_WORKERS)
    for itr in range(2):
        samples, _ = sampler.obtain_samples(itr)
        with torch.no_grad():
            dist_info, value = agent(samples.env.observation, samples.agent.prev_action,
                                     samples.env.prev_reward)
        assert torch.allclose(dist_info.prob, samples.agent.agent_info.dist_info.prob, atol=1e-6)
        assert torch.allclose(value, samples.agent.agent_info.value, atol=1e-6)
        done = samples.env.done
        action = samples.agent.action
        assert torch.equal(samples.agent.prev_action[1:], torch.where(done[:-1], 0, action[:-1]))


def test_workers_see_parameter_changes_made_in_the_master(samplers):
    T, B = 6, 2
    sampler = samplers(**cartpole_kwargs(B, T))
    agent = new_agent()
    sampler.initialize(agent, seed=52, affinity=TWO_WORKERS)
    samples, _ = sampler.obtain_samples(0)
    assert torch.all(samples.agent.agent_info.dist_info.prob.max(-1).values < 0.9)
    assert set(samples.agent.action.unique().tolist()) == {0, 1}
    with torch.no_grad():  # in place, like an optimizer step on the shared parameters
        agent.model.pi.model[-1].bias.copy_(torch.tensor([30.0, -30.0]))
    samples, _ = sampler.obtain_samples(1)
    assert torch.all(samples.agent.agent_info.dist_info.prob[..., 0] > 0.999)
    assert torch.all(samples.agent.action == 0)
    optimizer = torch.optim.SGD(agent.parameters(), lr=1.0)
    optimizer.zero_grad()
    (-agent.model.value.model[-1].bias.sum() * 100).backward()
    optimizer.step()
    samples, _ = sampler.obtain_samples(2)
    with torch.no_grad():
        _, value = agent(samples.env.observation, samples.agent.prev_action,
                         samples.env.prev_reward)
    assert torch.allclose(value, samples.agent.agent_info.value, atol=1e-5)
    assert torch.all(samples.agent.agent_info.value > 50)


def test_bootstrap_value_computed_by_workers(samplers):
    T, B = 5, 3
    sampler = samplers(**counting_kwargs(B, T))
    agent = new_agent()
    sampler.initialize(agent, seed=53, affinity=TWO_WORKERS, bootstrap_value=True)
    samples, _ = sampler.obtain_samples(0)
    bootstrap = samples.agent.bootstrap_value
    assert bootstrap.shape == (1, B)
    # No done in the batch: the next observation is the last one, one step further on.
    assert not samples.env.done.any()
    next_obs = samples.env.observation[-1].clone()
    next_obs[:, STEP] += 1
    with torch.no_grad():
        expected = agent.value(next_obs, samples.agent.action[-1], samples.env.reward[-1])
    assert torch.allclose(bootstrap[0], expected, atol=1e-6)


def test_traj_infos_from_workers(samplers):
    T, B = 16, 4
    sampler = samplers(**cartpole_kwargs(B, T, max_episode_steps=8))
    sampler.initialize(new_agent(), seed=54, affinity=TWO_WORKERS)
    for itr in range(2):
        samples, trajs = sampler.obtain_samples(itr)
        assert len(trajs) == int(samples.env.done.sum()) >= B
        assert all(t.Return == t.Length and 1 <= t.Length <= 8 for t in trajs)


def test_wait_reset_collector_in_workers(samplers):
    T, B = 10, 2
    sampler = samplers(**cartpole_kwargs(B, T, max_episode_steps=4,
                                         CollectorCls=CpuWaitResetCollector))
    assert sampler.mid_batch_reset is False
    sampler.initialize(new_agent(), seed=55, affinity=TWO_WORKERS)
    for itr in range(3):
        samples, trajs = sampler.obtain_samples(itr)
        done = samples.env.done.numpy()
        reward = samples.env.reward.numpy()
        assert np.array_equal(done.sum(0), [1, 1])  # episodes of <= 4 steps, once per batch
        for b in range(B):
            t_done = int(np.argmax(done[:, b]))
            assert np.all(reward[t_done + 1:, b] == 0) and np.all(reward[:t_done + 1, b] == 1)
            if itr > 0:
                assert np.all(np.abs(samples.env.observation[0, b].numpy()) <= 0.05 + 1e-6)
        assert len(trajs) == B


def test_evaluation_in_workers(samplers):
    limited = samplers(**cartpole_kwargs(2, max_episode_steps=5, eval_n_envs=2,
                                         eval_max_steps=40, eval_max_trajectories=2))
    limited.initialize(new_agent(), seed=56, affinity=TWO_WORKERS)
    limited.obtain_samples(0)
    trajs = limited.evaluate_agent(0)
    assert len(trajs) == 2 and all(t.Return == t.Length == 5 for t in trajs)
    samples, _ = limited.obtain_samples(1)  # sampling resumes after evaluation
    assert samples.env.observation.abs().sum() > 0
    unlimited = samplers(**cartpole_kwargs(2, max_episode_steps=5, eval_n_envs=2,
                                           eval_max_steps=40))
    unlimited.initialize(new_agent(), seed=56, affinity=TWO_WORKERS)
    trajs = unlimited.evaluate_agent(0)
    assert len(trajs) == 8 and all(t.Length == 5 for t in trajs)


def test_evaluation_with_fewer_eval_envs_than_workers(samplers):
    sampler = samplers(**cartpole_kwargs(2, max_episode_steps=5, eval_n_envs=1,
                                         eval_max_steps=20))
    sampler.initialize(new_agent(), seed=57, affinity=TWO_WORKERS)
    trajs = sampler.evaluate_agent(0)
    assert len(trajs) == 4 and all(t.Length == 5 for t in trajs)


def test_recurrent_sample_state_survives_evaluation_in_workers(samplers):
    T, B = 4, 2
    kwargs = counting_kwargs(B, T, eval_n_envs=2, eval_max_steps=8)
    sampler = samplers(**kwargs)
    agent = RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=4))
    sampler.initialize(agent, seed=58, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    sampler.evaluate_agent(0)
    samples, _ = sampler.obtain_samples(1)
    # No env was done, so batch 1 starts from the state batch 0 ended with: not zeros.
    assert not samples.env.done.any()
    start_state = samples.agent.agent_info.prev_rnn_state.h[0]
    assert torch.all(start_state.abs().sum(-1) > 0)


def test_recurrent_state_carries_over_between_batches(samplers):
    T, B = 4, 2
    sampler = samplers(**counting_kwargs(B, T))
    agent = RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=4))
    sampler.initialize(agent, seed=59, affinity=TWO_WORKERS)
    first, _ = sampler.obtain_samples(0)
    first = buffer_func(first, torch.clone)
    second, _ = sampler.obtain_samples(1)
    assert torch.all(first.agent.agent_info.prev_rnn_state.h[0] == 0)  # fresh start
    # Replaying batch 0 in the master from its recorded start state gives the state that
    # batch 1 recorded at its start, for every env in both workers.
    init = first.agent.agent_info.prev_rnn_state[0]
    init = type(init)(*(s.transpose(0, 1).contiguous() for s in init))
    with torch.no_grad():
        _, _, next_state = agent(first.env.observation, first.agent.prev_action,
                                 first.env.prev_reward, init)
    recorded = second.agent.agent_info.prev_rnn_state.h[0]  # [B, N, H]
    assert torch.allclose(recorded, next_state.h.transpose(0, 1), atol=1e-5)


def test_fewer_envs_than_workers_raises(samplers):
    sampler = samplers(**counting_kwargs(1))
    before = {c.pid for c in psutil.Process().children(recursive=True)}
    with pytest.raises(ValueError, match="batch_B"):
        sampler.initialize(new_agent(), seed=0, affinity=TWO_WORKERS)
    after = {c.pid for c in psutil.Process().children(recursive=True)}
    assert after <= before


def test_shutdown_stops_workers_and_is_idempotent(samplers):
    sampler = samplers(**counting_kwargs(2))
    sampler.initialize(new_agent(), seed=0, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    pids = worker_pids(sampler)
    assert all(psutil.pid_exists(pid) for pid in pids)
    sampler.shutdown()
    assert_no_worker_alive(pids)
    sampler.shutdown()


class _MarkerAgent(CategoricalPgAgent):
    """Acts with its ``marker`` attribute, a setting an algorithm gives after the fork."""

    marker = 0

    def sampling_state(self):
        return dict(marker=self.marker)

    def step(self, observation, prev_action, prev_reward):
        step = super().step(observation, prev_action, prev_reward)
        return step._replace(action=torch.full_like(step.action, self.marker))


def test_workers_follow_sampling_state_set_after_fork():
    """Settings the algorithm gives the agent after the workers forked (e.g. DQN's epsilon
    schedule, QPG pretraining) reach the workers' agent copies with each batch."""
    sampler = CpuSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4, batch_B=2)
    agent = _MarkerAgent(model_kwargs=dict(hidden_sizes=[8]))
    sampler.initialize(agent, affinity=TWO_WORKERS, seed=0)
    try:
        agent.marker = 1  # as an algorithm's initialize would, after the fork
        samples, _ = sampler.obtain_samples(0)
        assert np.all(samples.agent.action.numpy() == 1)
        agent.marker = 0
        samples, _ = sampler.obtain_samples(1)
        assert np.all(samples.agent.action.numpy() == 0)
    finally:
        sampler.shutdown()
