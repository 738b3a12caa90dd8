"""Tests for the collectors (rlfast.samplers.collectors and .parallel.cpu.collectors), run in
process through the serial sampler or constructed directly, on a deterministic counting env."""
import numpy as np
import pytest
import torch

from rlfast.agents import RandomAgent, RecurrentCategoricalPgAgent
from rlfast.envs import make
from rlfast.samplers import (BatchSpec, CpuEvalCollector, CpuResetCollector,
                             CpuWaitResetCollector, SerialEvalCollector, SerialSampler,
                             TrajInfo)
from rlfast.samplers.buffer import build_samples_buffer
from rlfast.utils.buffer import buffer_func
from rlfast.utils.seed import set_seed
from tests.samplers._counting_env import CountingEnv

STEP, RESETS, TAG = 0, 1, 2  # observation components of CountingEnv


class SpyAgent(RandomAgent):
    """Random actions; records every per-env reset the collectors request."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.reset_ones = []
        self.n_resets = 0
        self.modes = []

    def reset_one(self, idx):
        self.reset_ones.append(int(idx))

    def reset(self):
        self.n_resets += 1

    def sample_mode(self, itr):
        super().sample_mode(itr)
        self.modes.append("sample")

    def eval_mode(self, itr):
        super().eval_mode(itr)
        self.modes.append("eval")


@pytest.fixture(autouse=True)
def _seeded():
    set_seed(77)


def counting_sampler(CollectorCls, T, B, life_len, lives, **kwargs):
    return SerialSampler(EnvCls=CountingEnv, env_kwargs=dict(life_len=life_len, lives=lives),
                         batch_T=T, batch_B=B, max_decorrelation_steps=0,
                         CollectorCls=CollectorCls, **kwargs)


def batches_of(sampler, n, agent=None):
    out = []
    for itr in range(n):
        calls_before = len(agent.reset_ones) if agent is not None else 0
        samples, completed = sampler.obtain_samples(itr)
        copy = buffer_func(samples, lambda x: x.numpy().copy())
        resets = agent.reset_ones[calls_before:] if agent is not None else []
        out.append((copy, list(completed), list(resets)))
    return out


# ---- CpuResetCollector ------------------------------------------------------------------------

def test_reset_collector_honours_traj_done():
    T, B, life_len, lives = 14, 2, 3, 2
    sampler = counting_sampler(CpuResetCollector, T, B, life_len, lives)
    agent = SpyAgent()
    sampler.initialize(agent, seed=40)
    (batch, completed, resets), = batches_of(sampler, 1, agent)
    obs, done = batch.env.observation, batch.env.done
    traj_done = batch.env.env_info.traj_done
    # Every life ends in done; only every second one ends the trajectory.
    expected_done = np.array([(t + 1) % life_len == 0 for t in range(T)])
    expected_traj_done = np.array([(t + 1) % (life_len * lives) == 0 for t in range(T)])
    for b in range(B):
        assert np.array_equal(done[:, b], expected_done)
        assert np.array_equal(traj_done[:, b], expected_traj_done)
        assert np.all(obs[:, b, TAG] == 40 + b)  # column b is env b
    for t in range(T - 1):
        if expected_traj_done[t]:
            # Trajectory over: the env was reset.
            assert np.all(obs[t + 1, :, STEP] == 0)
            assert np.all(obs[t + 1, :, RESETS] == obs[t, :, RESETS] + 1)
        else:
            # Lost a life (or nothing happened): the same episode continues, no reset.
            assert np.all(obs[t + 1, :, STEP] == obs[t, :, STEP] + 1)
            assert np.all(obs[t + 1, :, RESETS] == obs[t, :, RESETS])
    # prev_action / prev_reward: null and zero after every done, else the previous step's.
    action, reward = batch.agent.action, batch.env.reward
    assert np.array_equal(batch.agent.prev_action[1:], np.where(done[:-1], 0, action[:-1]))
    assert np.array_equal(batch.env.prev_reward[1:], np.where(done[:-1], 0.0, reward[:-1]))
    assert np.array_equal(reward, 1.0 + action)
    # The agent's per-env state is reset on every done, trajectory or not.
    assert sorted(resets) == sorted(b for t in range(T) for b in range(B) if done[t, b])
    # Trajectories complete only on traj_done, with the statistics of the whole trajectory.
    assert len(completed) == B * int(expected_traj_done.sum())
    order = [(t, b) for t in range(T) for b in range(B) if expected_traj_done[t]]
    for (t, b), info in zip(order, completed):
        start = t + 1 - life_len * lives
        assert info.Length == life_len * lives
        assert info.Return == pytest.approx(float(reward[start:t + 1, b].sum()))


def test_reset_collector_bootstrap_value_and_continuation_between_batches():
    T, B = 5, 3
    sampler = counting_sampler(CpuResetCollector, T, B, life_len=4, lives=1)
    agent = SpyAgent()
    sampler.initialize(agent, seed=0, bootstrap_value=True)
    batches = batches_of(sampler, 3)
    obs = np.concatenate([b[0].env.observation for b in batches])
    steps = obs[:, :, STEP]
    # Counting continues seamlessly across batch boundaries: 0,1,2,3,0,1,2,3,...
    expected = np.tile((np.arange(3 * T) % 4)[:, None], (1, B))
    assert np.array_equal(steps, expected)
    for batch, _, _ in batches:
        assert batch.agent.bootstrap_value.shape == (1, B)
        assert np.all(batch.agent.bootstrap_value == 0)  # RandomAgent.value is zero


# ---- CpuWaitResetCollector --------------------------------------------------------------------

def test_wait_reset_collector_idles_after_done_and_honours_traj_done():
    T, B, life_len, lives = 4, 2, 3, 2
    sampler = counting_sampler(CpuWaitResetCollector, T, B, life_len, lives)
    agent = SpyAgent()
    sampler.initialize(agent, seed=0)
    batches = batches_of(sampler, 4, agent)
    # Batch 0: steps 1..3 then a lost life at t=2; t=3 idle.
    b0, completed0, resets0 = batches[0]
    assert np.array_equal(b0.env.done[:, 0], [False, False, True, False])
    assert np.array_equal(b0.env.reward[3], [0.0, 0.0])
    assert np.array_equal(b0.env.observation[:, 0, STEP], [0, 1, 2, 3])
    assert completed0 == [] and resets0 == []  # nothing is reset mid-batch
    # Batch 1: the lost life did not end the trajectory, so the env is not reset: it continues
    # at step 3, with a null previous action and zero previous reward, and the agent's
    # per-env state reset.
    b1, completed1, resets1 = batches[1]
    assert np.array_equal(b1.env.observation[0, :, STEP], [3, 3])
    assert np.array_equal(b1.env.observation[0, :, RESETS], [1, 1])
    assert np.array_equal(b1.agent.prev_action[0], [0, 0])
    assert np.array_equal(b1.env.prev_reward[0], [0.0, 0.0])
    assert sorted(resets1) == [0, 1]
    # Steps 4,5,6: the 6th step ends the trajectory at t=2, then idle.
    assert np.array_equal(b1.env.done[:, 1], [False, False, True, False])
    assert np.array_equal(b1.env.env_info.traj_done[:, 1], [False, False, True, False])
    assert len(completed1) == B and all(t.Length == 6 for t in completed1)
    # Batch 2: the env was reset between batches.
    b2, _, _ = batches[2]
    assert np.array_equal(b2.env.observation[0, :, STEP], [0, 0])
    assert np.array_equal(b2.env.observation[0, :, RESETS], [2, 2])
    for batch, _, _ in batches:
        done, reward = batch.env.done, batch.env.reward
        for b in range(B):
            hits = np.flatnonzero(done[:, b])
            assert len(hits) <= 1
            if len(hits):
                t_done = hits[0]
                assert np.all(reward[t_done + 1:, b] == 0)
                assert not done[t_done + 1:, b].any()
                assert np.all(reward[: t_done + 1, b] > 0)


def test_wait_reset_collector_zeroes_leftovers_of_previous_batch():
    T, B = 5, 2
    sampler = counting_sampler(CpuWaitResetCollector, T, B, life_len=2, lives=1)
    sampler.initialize(SpyAgent(), seed=0)
    for itr in range(3):
        # Whatever an earlier batch left in the buffer must not survive in the idle part.
        sampler.samples_np.env.done[:] = True
        sampler.samples_np.env.reward[:] = 99.0
        samples, _ = sampler.obtain_samples(itr)
        for b in range(B):
            assert samples.env.done[:, b].tolist() == [False, True, False, False, False]
            assert samples.env.reward[:, b].tolist()[2:] == [0.0, 0.0, 0.0]
            assert samples.env.reward[:2, b].tolist() != [99.0, 99.0]


# ---- DecorrelatingStartCollector --------------------------------------------------------------

def _direct_collector(CollectorCls, n_envs, T, life_len=1000, lives=1, agent=None):
    envs = [CountingEnv(life_len=life_len, lives=lives) for _ in range(n_envs)]
    agent = agent or SpyAgent()
    agent.initialize(envs[0].spaces)
    _, samples_np, _ = build_samples_buffer(agent, CountingEnv(life_len, lives),
                                            BatchSpec(T, n_envs),
                                            agent_shared=False, env_shared=False)
    collector = CollectorCls(rank=0, envs=envs, samples_np=samples_np, batch_T=T,
                             TrajInfoCls=TrajInfo, agent=agent, global_B=n_envs,
                             env_ranks=list(range(n_envs)))
    return collector, envs, samples_np, agent


def test_start_envs_without_decorrelation():
    collector, envs, _, _ = _direct_collector(CpuResetCollector, 3, 4)
    (observation, prev_action, prev_reward), traj_infos = collector.start_envs(0)
    assert observation.shape == (3, 3) and observation.dtype == np.float32
    assert np.all(observation[:, STEP] == 0) and np.all(observation[:, RESETS] == 1)
    assert np.array_equal(prev_action, [0, 0, 0]) and prev_action.dtype == np.int64
    assert np.array_equal(prev_reward, [0.0, 0.0, 0.0]) and prev_reward.dtype == np.float32
    assert len(traj_infos) == 3 and all(t.Length == 0 for t in traj_infos)


def test_start_envs_decorrelates_within_bounds():
    collector, envs, _, _ = _direct_collector(CpuResetCollector, 6, 4)
    (observation, prev_action, prev_reward), traj_infos = collector.start_envs(50)
    steps = observation[:, STEP]
    assert np.all((steps >= 1) & (steps <= 50))
    assert len(set(steps.tolist())) > 1  # six envs at different points of their episodes
    assert [t.Length for t in traj_infos] == steps.astype(int).tolist()
    assert np.all(prev_reward == 1.0 + prev_action)  # each env's last random step
    assert all(env.t == s for env, s in zip(envs, steps))


def test_start_envs_decorrelation_respects_traj_done():
    collector, envs, _, _ = _direct_collector(CpuResetCollector, 8, 4, life_len=2, lives=2)
    (observation, prev_action, prev_reward), traj_infos = collector.start_envs(9)
    for b, env in enumerate(envs):
        # Episodes of 4 steps: the env is reset on traj_done, and traj info restarts with it.
        assert observation[b, STEP] == env.t < 4
        assert traj_infos[b].Length == env.t
        if env.t % 2 == 0:  # the last step ended a life (or a trajectory): null action
            assert prev_action[b] == 0 and prev_reward[b] == 0.0


# ---- evaluation collectors --------------------------------------------------------------------

def test_eval_collector_runs_max_T_and_honours_traj_done():
    envs = [CountingEnv(life_len=2, lives=2) for _ in range(3)]
    agent = SpyAgent()
    agent.initialize(envs[0].spaces)
    collector = SerialEvalCollector(envs=envs, agent=agent, TrajInfoCls=TrajInfo, max_T=12)
    trajs = collector.collect_evaluation(itr=0)
    assert len(trajs) == 9 and all(t.Length == 4 for t in trajs)
    assert all(2 * t.Length >= t.Return >= t.Length for t in trajs)
    assert [env.n_resets for env in envs] == [4, 4, 4]  # first reset + one per trajectory
    assert agent.modes[-1] == "eval"
    assert sorted(agent.reset_ones) == sorted(list(range(3)) * 6)  # every lost life


def test_eval_collector_stops_at_max_trajectories():
    envs = [CountingEnv(life_len=4) for _ in range(3)]
    agent = SpyAgent()
    agent.initialize(envs[0].spaces)
    collector = CpuEvalCollector(rank=0, envs=envs, TrajInfoCls=TrajInfo, max_T=100,
                                 agent=agent, max_trajectories=4)
    trajs = collector.collect_evaluation(itr=3)
    # 3 trajectories end at step 4 (< 4 so far), 3 more at step 8: stop there.
    assert len(trajs) == 6 and all(env.t == 0 for env in envs)
    assert [env.n_resets for env in envs] == [3, 3, 3]
    assert all(t.Length == 4 for t in trajs)


def test_serial_eval_in_runner_order_restores_sample_state():
    """The runner's order: agent.eval_mode, then sampler.evaluate_agent, then sample_mode."""
    sampler = SerialSampler(EnvCls=make, env_kwargs=dict(id="CartPole-v1"), batch_T=4,
                            batch_B=2, max_decorrelation_steps=0, eval_n_envs=1,
                            eval_max_steps=10)
    agent = RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=4))
    try:
        sampler.initialize(agent, seed=1)
        sampler.obtain_samples(0)
        state = [s.clone() for s in agent.prev_rnn_state]
        agent.eval_mode(0)
        sampler.evaluate_agent(0)
        agent.sample_mode(1)
        assert agent.prev_rnn_state is not None
        assert all(torch.equal(a, b) for a, b in zip(agent.prev_rnn_state, state))
    finally:
        sampler.shutdown()


def test_eval_collector_keeps_sample_mode_recurrent_state():
    """What a CPU sampler worker does: its agent copy is in sample mode when evaluation starts
    (only the master's copy gets the runner's eval_mode call)."""
    envs = [make("CartPole-v1") for _ in range(2)]
    agent = RecurrentCategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8], lstm_size=4))
    agent.initialize(envs[0].spaces)
    agent.sample_mode(0)
    obs = torch.randn(3, 4)
    agent.step(obs, torch.zeros(3, dtype=torch.long), torch.zeros(3))
    state = [s.clone() for s in agent.prev_rnn_state]
    collector = SerialEvalCollector(envs=envs, agent=agent, TrajInfoCls=TrajInfo, max_T=5)
    collector.collect_evaluation(itr=0)
    agent.sample_mode(1)
    assert agent.prev_rnn_state is not None
    assert all(torch.equal(a, b) for a, b in zip(agent.prev_rnn_state, state))


# ---- action sources -----------------------------------------------------------------------------

@pytest.mark.filterwarnings("ignore:The given NumPy array is not writable")
def test_server_collector_never_writes_the_step_buffer_actions():
    """The GPU collectors' actions are the master's writes into the shared step buffer; the
    loop must not copy that array onto itself every step (it used to: ``action[:] = act``).
    The step buffer's action array is made read-only, so any write raises."""
    import threading

    from rlfast.samplers import GpuResetCollector
    from rlfast.samplers.parallel.gpu.action_server import StepBuffer
    from rlfast.utils.buffer import buffer_from_example
    from rlfast.utils.collections import AttrDict

    T, B = 5, 3
    envs = [CountingEnv(life_len=1000) for _ in range(B)]
    agent = SpyAgent()
    agent.initialize(envs[0].spaces)
    _, samples_np, examples = build_samples_buffer(agent, CountingEnv(1000, 1), BatchSpec(T, B),
                                                   agent_shared=False, env_shared=False)
    example = StepBuffer(examples.observation, examples.action, np.zeros((), np.float32),
                         np.zeros((), bool), examples.agent_info)
    step = buffer_from_example(example, B)
    sync = AttrDict(obs_ready=threading.Semaphore(0), act_ready=threading.Semaphore(T),
                    eval_done=None, stop=None)
    collector = GpuResetCollector(rank=0, envs=envs, samples_np=samples_np, batch_T=T,
                                  TrajInfoCls=TrajInfo, sync=sync, step_buffer_np=step,
                                  global_B=B, env_ranks=list(range(B)))
    agent_inputs, traj_infos = collector.start_envs(0)
    assert agent_inputs.prev_action is step.action  # the collector steps the shared rows
    step.action[:] = [1, 0, 1]  # "the master's actions"
    step.action.flags.writeable = False
    collector.collect_batch(agent_inputs, traj_infos, itr=0)
    assert samples_np.agent.action.tolist() == [[1, 0, 1]] * T
    assert samples_np.env.reward[:, 0].tolist() == [2.0] * T  # CountingEnv: reward 1 + action


def test_removed_dead_arguments():
    import inspect

    from rlfast.samplers import BaseEvalCollector, ParallelSamplerBase

    assert "worker_process" not in inspect.signature(ParallelSamplerBase.initialize).parameters
    assert "traj_infos_queue" not in inspect.signature(BaseEvalCollector.__init__).parameters
