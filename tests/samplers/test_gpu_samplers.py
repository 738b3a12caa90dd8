"""Tests for the GPU-agent samplers (agent batched in the master; on the CPU here).

The main check is equivalence: with a deterministic (greedy) agent, identical parameters, the
same seed and no decorrelation steps, GpuSampler, AlternatingSampler and
NoOverlapAlternatingSampler must produce exactly the batches, trajectory infos and evaluation
trajectories that SerialSampler produces -- feedforward and recurrent, with mid-batch and
wait-reset collectors -- which checks the step-buffer plumbing, the per-environment agent
resets and the two-group recurrent state of the alternating samplers all at once.
"""
import gc
import time
import types

import numpy as np
import psutil
import pytest
import torch

from rlfast.envs import make
from rlfast.samplers import (AlternatingSampler, CpuResetCollector, CpuWaitResetCollector,
                             GpuResetCollector, GpuSampler, GpuWaitResetCollector,
                             NoOverlapAlternatingSampler, SerialSampler)
from rlfast.samplers.parallel.gpu.action_server import ActionServer
from rlfast.utils.buffer import buffer_func
from rlfast.utils.seed import set_seed
from tests.integration._guards import live_children
from tests.samplers._counting_env import CountingEnv
from tests.samplers._gpu_helpers import (StaggeredEnv, decisive_state_dict, leaves, make_agent,
                                         traj_summary)

TWO_WORKERS = dict(workers_cpus=[[0], [1]])
GPU_SAMPLERS = [GpuSampler, AlternatingSampler, NoOverlapAlternatingSampler]
SEED = 21
N_BATCHES = 3


@pytest.fixture(autouse=True)
def _seeded():
    set_seed(99)


@pytest.fixture
def samplers():
    """Build samplers through this; every one is shut down and its workers checked gone."""
    made = []
    before = set(live_children())

    def factory(SamplerCls, **kwargs):
        sampler = SamplerCls(**kwargs)
        made.append(sampler)
        return sampler

    yield factory
    pids = []
    for sampler in made:
        pids += [p.pid for p in getattr(sampler, "workers", None) or []]
        sampler.shutdown()
    assert set(live_children()) - before == set()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids)


def staggered_kwargs(T=10, B=4, lives=1, max_len=9, **kwargs):
    return dict(EnvCls=StaggeredEnv, env_kwargs=dict(min_len=3, max_len=max_len, lives=lives),
                batch_T=T, batch_B=B, max_decorrelation_steps=0, **kwargs)


def cartpole_kwargs(T=12, B=4, **kwargs):
    return dict(EnvCls=make, env_kwargs=dict(id="CartPole-v1", max_episode_steps=7),
                batch_T=T, batch_B=B, max_decorrelation_steps=0, **kwargs)


def agent_kind(SamplerCls, recurrent: bool) -> str:
    if not recurrent:
        return "ff"
    return "recurrent" if SamplerCls in (SerialSampler, GpuSampler) else "alternating"


def run_schedule(make_sampler, SamplerCls, recurrent, sampler_kwargs, schedule, state_dict,
                 bootstrap_value=True, agent_hook=None, core="lstm"):
    """Initialize a sampler and run ``schedule`` (a list of "sample" / "eval"), switching the
    agent's modes as the runners do. Returns (agent, results) with cloned sample batches and
    order-free trajectory summaries."""
    agent = make_agent(agent_kind(SamplerCls, recurrent), state_dict, core)
    if agent_hook is not None:
        agent_hook(agent)
    sampler = make_sampler(SamplerCls, **sampler_kwargs)
    sampler.initialize(agent, seed=SEED, affinity=TWO_WORKERS, bootstrap_value=bootstrap_value)
    for name, value in agent.state_dict().items():  # both samplers start from these parameters
        assert torch.equal(value, state_dict[name]), name
    results = []
    for itr, what in enumerate(schedule):
        if what == "sample":
            agent.sample_mode(itr)
            samples, trajs = sampler.obtain_samples(itr)
            agent.train_mode(itr)
            results.append(("sample", buffer_func(samples, torch.clone), traj_summary(trajs)))
        else:
            agent.eval_mode(itr)
            results.append(("eval", None, traj_summary(sampler.evaluate_agent(itr))))
    return agent, results


def assert_fields_equal(name, want, have, exact_floats: bool):
    """Equal; float agent outputs bit-equal when ``exact_floats``, else to within rounding (the
    alternating samplers run the model on half-batches, whose results can differ from the full
    batch's in the last bit)."""
    assert have.shape == want.shape and have.dtype == want.dtype, name
    if name.startswith("agent.") and want.is_floating_point() and not exact_floats:
        torch.testing.assert_close(have, want, rtol=1e-5, atol=1e-6, msg=name)
    else:
        assert torch.equal(have, want), f"{name} differs:\n{want}\n{have}"


def assert_batches_match(expected, got, exact_floats: bool):
    """Every field of two sample batches equal."""
    want, have = leaves(expected), leaves(got)
    assert sorted(want) == sorted(have)
    for name, w in want.items():
        assert_fields_equal(name, w, have[name], exact_floats)


def compare_with_serial(samplers, SamplerCls, recurrent, serial_kwargs, gpu_kwargs, schedule,
                        agent_hook=None, core="lstm"):
    state_dict = decisive_state_dict(recurrent, core=core)
    _, reference = run_schedule(samplers, SerialSampler, recurrent, serial_kwargs, schedule,
                                state_dict, core=core)
    _, results = run_schedule(samplers, SamplerCls, recurrent, gpu_kwargs, schedule, state_dict,
                              agent_hook=agent_hook, core=core)
    assert len(results) == len(reference)
    for (kind, want, want_trajs), (_, have, have_trajs) in zip(reference, results):
        if kind == "sample":
            assert_batches_match(want, have, exact_floats=SamplerCls is GpuSampler)
        assert have_trajs == want_trajs
    return reference


def batches(results):
    return [r[1] for r in results if r[0] == "sample"]


# ---- 1. equivalence with SerialSampler ---------------------------------------------------------
@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("env", ["staggered", "cartpole"])
def test_feedforward_reset_collectors_match_serial(samplers, SamplerCls, env):
    kwargs = staggered_kwargs() if env == "staggered" else cartpole_kwargs()
    reference = compare_with_serial(samplers, SamplerCls, False, kwargs, kwargs,
                                    ["sample"] * N_BATCHES)
    # The comparison is meaningful: episodes end mid-batch, both actions occur.
    data = batches(reference)
    done = torch.stack([b.env.done for b in data])
    assert done.any(dim=(0, 1)).all()  # every env finished an episode
    assert torch.stack([b.agent.action for b in data]).unique().tolist() == [0, 1]
    assert sum(len(r[2]) for r in reference) == int(done.sum())
    if env == "staggered":  # different episode lengths: envs reset at different time steps
        assert len({tuple(torch.nonzero(done[:, :, b])[:, 1].tolist()) for b in range(4)}) > 1


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("lives", [1, 2])
def test_recurrent_wait_reset_collectors_match_serial(samplers, SamplerCls, lives):
    """Per-env agent resets between batches: the master applies exactly the resets the
    workers flagged, for the right envs, before the next batch's first step."""
    # Episodes of 3-14 steps in batches of 10: some envs finish in a batch, some do not.
    serial = staggered_kwargs(lives=lives, max_len=14, CollectorCls=CpuWaitResetCollector)
    gpu = staggered_kwargs(lives=lives, max_len=14,
                           CollectorCls=GpuWaitResetCollector)
    reference = compare_with_serial(samplers, SamplerCls, True, serial, gpu,
                                    ["sample"] * (N_BATCHES + 1))
    data = batches(reference)
    # Envs wait for the batch end after a done, and the agent state of exactly those envs is
    # reset for the next batch: zero start states where the previous batch had a done, and
    # non-zero ones where it had none -- both occur.
    zero_start = [b.agent.agent_info.prev_rnn_state.h[0, :, 0].abs().sum(-1) == 0 for b in data]
    had_done = [b.env.done.any(dim=0) for b in data]
    for itr in range(1, len(data)):
        assert torch.equal(zero_start[itr], had_done[itr - 1])
    assert any((~d).any() for d in had_done[:-1]) and any(d.any() for d in had_done[:-1])
    for batch in data:  # one done per env and batch at most; idle envs record zeros after it
        for b in range(batch.env.done.shape[1]):
            t_done = torch.nonzero(batch.env.done[:, b]).flatten().tolist()
            assert len(t_done) <= 1
            if t_done:
                assert torch.all(batch.env.reward[t_done[0] + 1:, b] == 0)


def _slow_value(agent, seconds: float = 0.2):
    """Delay the master's bootstrap ``value`` call: a worker that touched its step-buffer rows
    before the master finished the batch would then always have done so."""
    value = agent.value

    def slow(*args):
        time.sleep(seconds)
        return value(*args)

    agent.value = slow


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
def test_wait_reset_bootstrap_value_of_finished_envs_matches_serial(samplers, SamplerCls):
    """Regression: workers used to reset finished envs in the shared step buffer (and raise
    agent-reset flags there) right after their last step, while the master was still
    bootstrapping from it, so a finished env's bootstrap value came from the next episode's
    first observation and a reset agent state. Every env finishes within this batch."""
    serial = staggered_kwargs(CollectorCls=CpuWaitResetCollector)
    gpu = staggered_kwargs(CollectorCls=GpuWaitResetCollector)
    reference = compare_with_serial(samplers, SamplerCls, True, serial, gpu, ["sample"],
                                    agent_hook=_slow_value)
    assert batches(reference)[0].env.done.any(dim=0).all()


class _FlagRaisingAgent:
    """Stands in for a worker raising env 2's reset flag while the master applies env 0's."""

    def __init__(self, reset_flags):
        self.reset_flags, self.calls = reset_flags, []

    def reset_one(self, idx):
        self.calls.append(idx)
        if idx == 0:
            self.reset_flags[2] = True


def test_apply_resets_keeps_flags_raised_meanwhile():
    """Regression: the master cleared every reset flag after applying the ones it had read
    (``flags[:] = False``), losing a flag raised meanwhile -- that env's recurrent state was
    then never reset."""
    server = ActionServer.__new__(ActionServer)  # only the reset method is exercised
    reset = np.array([True, False, False, False])
    server.agent = _FlagRaisingAgent(reset)
    server._apply_resets(types.SimpleNamespace(reset=reset), slice(None))
    assert server.agent.calls == [0] and not reset[0]
    assert reset[2], "env 2's reset request was lost"
    server._apply_resets(types.SimpleNamespace(reset=reset), slice(None))  # applied next time
    assert server.agent.calls == [0, 2] and not reset.any()


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("core", ["lstm", "gru", "attention"])
def test_recurrent_mid_batch_reset_collectors_match_serial(samplers, SamplerCls, core):
    """Every memory core (its state a tuple of [N, B, H] tensors) on every sampler: the
    batches equal SerialSampler's, and each episode's first step starts from zeros."""
    serial = staggered_kwargs(CollectorCls=CpuResetCollector)
    gpu = staggered_kwargs(CollectorCls=GpuResetCollector)
    reference = compare_with_serial(samplers, SamplerCls, True, serial, gpu,
                                    ["sample"] * N_BATCHES, core=core)
    # The agent state was reset mid-batch: the step after each done starts from zeros.
    for batch in batches(reference):
        state = torch.cat([leaf.flatten(2) for leaf in batch.agent.agent_info.prev_rnn_state],
                          dim=2)  # [T, B, everything]
        zero = state.abs().sum(-1) == 0
        done = batch.env.done
        assert done[:-1].any()
        assert torch.equal(zero[1:], done[:-1])


# ---- 2. evaluation ------------------------------------------------------------------------------
@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("recurrent", [False, True], ids=["ff", "recurrent"])
@pytest.mark.parametrize("eval_n_envs", [1, 3])
def test_evaluation_matches_serial(samplers, SamplerCls, recurrent, eval_n_envs):
    """Eval env k is seeded ``seed + 1_000_003 + k`` by both (the parallel samplers offset each
    worker's seeds by the eval envs of the workers before it), and both run every eval env
    for ``ceil(eval_max_steps / eval_n_envs)`` steps: same trajectories. Sampling around the
    evaluation is compared too (a recurrent agent's sampling state must survive it)."""
    collectors = ((dict(CollectorCls=CpuWaitResetCollector),
                   dict(CollectorCls=GpuWaitResetCollector)) if recurrent else ({}, {}))
    common = dict(eval_n_envs=eval_n_envs, eval_max_steps=eval_n_envs * 20)
    reference = compare_with_serial(
        samplers, SamplerCls, recurrent, staggered_kwargs(**collectors[0], **common),
        staggered_kwargs(**collectors[1], **common), ["sample", "eval", "sample", "eval"])
    for evaluation in [r[2] for r in reference if r[0] == "eval"]:
        lengths = [length for length, _ in evaluation]
        assert len(lengths) >= 2 * eval_n_envs and max(lengths) <= 20  # 20 steps per env
        assert len(set(lengths)) > 1


def counting_eval_sampler(samplers, SamplerCls, **kwargs):
    return samplers(SamplerCls, EnvCls=CountingEnv, env_kwargs=dict(life_len=5), batch_T=4,
                    batch_B=4, max_decorrelation_steps=0, **kwargs)


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eval_max_steps, per_env", [(18, 1), (20, 2), (27, 2), (30, 3)])
def test_evaluation_honours_eval_max_steps(samplers, SamplerCls, eval_max_steps, per_env):
    # 2 eval envs (one per worker), episodes of 5 steps: ceil(max_steps / 2) steps per env.
    sampler = counting_eval_sampler(samplers, SamplerCls, eval_n_envs=2,
                                    eval_max_steps=eval_max_steps)
    agent = make_agent("ff", decisive_state_dict(False, observation_dim=3))
    sampler.initialize(agent, seed=SEED, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    agent.eval_mode(0)
    trajs = sampler.evaluate_agent(0)
    assert len(trajs) == 2 * per_env
    assert all(t.Length == 5 for t in trajs)
    agent.sample_mode(1)
    samples, _ = sampler.obtain_samples(1)  # sampling resumes where it left off
    assert samples.env.observation[0, :, 0].tolist() == [4.0] * 4


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
@pytest.mark.parametrize("eval_n_envs, max_trajectories, low, high",
                         [(2, 2, 2, 2), (2, 4, 4, 4), (4, 2, 4, 4), (3, 5, 5, 6)])
def test_evaluation_honours_eval_max_trajectories(samplers, SamplerCls, eval_n_envs,
                                                  max_trajectories, low, high):
    """Evaluation stops soon after ``eval_max_trajectories`` completed, far before the step
    budget (100 steps per env). All episodes are 5 steps long, so trajectories complete in
    rounds of up to one per env; how a parallel sampler shares the count among its workers
    decides where in ``[low, high]`` it stops (e.g. 5 over envs split 2 + 1: 5 or 6)."""
    sampler = counting_eval_sampler(samplers, SamplerCls, eval_n_envs=eval_n_envs,
                                    eval_max_steps=eval_n_envs * 100,
                                    eval_max_trajectories=max_trajectories)
    agent = make_agent("ff", decisive_state_dict(False, observation_dim=3))
    sampler.initialize(agent, seed=SEED, affinity=TWO_WORKERS)
    agent.eval_mode(0)
    for itr in range(2):
        trajs = sampler.evaluate_agent(itr)
        assert low <= len(trajs) <= high
        assert all(t.Length == 5 for t in trajs)


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
def test_evaluation_with_fewer_eval_envs_than_workers(samplers, SamplerCls):
    sampler = counting_eval_sampler(samplers, SamplerCls, eval_n_envs=1, eval_max_steps=22)
    agent = make_agent("ff", decisive_state_dict(False, observation_dim=3))
    sampler.initialize(agent, seed=SEED, affinity=TWO_WORKERS)
    assert sampler.eval_n_envs_list == [1, 0]
    for itr in range(2):
        agent.sample_mode(itr)
        samples, _ = sampler.obtain_samples(itr)
        assert samples.env.observation[0, :, 0].tolist() == [4.0 * itr] * 4  # resumed
        agent.eval_mode(itr)
        trajs = sampler.evaluate_agent(itr)
        assert len(trajs) == 4 and all(t.Length == 5 for t in trajs)  # 22 steps of one env
        assert {t.Return for t in trajs} <= {5.0 + k for k in range(6)}


@pytest.mark.parametrize("SamplerCls", [GpuSampler], ids=lambda c: c.__name__)
def test_max_trajectories_with_fewer_eval_envs_than_workers(samplers, SamplerCls):
    # One eval env (worker 0), 3 trajectories asked, step budget for 8: SerialSampler returns 3.
    kwargs = dict(eval_n_envs=1, eval_max_steps=40, eval_max_trajectories=3)
    serial = counting_eval_sampler(samplers, SerialSampler, **kwargs)
    sampler = counting_eval_sampler(samplers, SamplerCls, **kwargs)
    counts = []
    for s in (serial, sampler):
        agent = make_agent("ff", decisive_state_dict(False, observation_dim=3))
        s.initialize(agent, seed=SEED, affinity=TWO_WORKERS)
        agent.eval_mode(0)
        counts.append(len(s.evaluate_agent(0)))
    assert counts[0] == 3
    assert counts[1] >= 3, f"{SamplerCls.__name__} returned {counts[1]} of 3 trajectories"


# ---- 3. worker lifetime -------------------------------------------------------------------------
def _gone(pids):
    return all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
               for pid in pids)


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
def test_shutdown_joins_every_worker(SamplerCls):
    before = set(live_children())
    sampler = SamplerCls(**staggered_kwargs(eval_n_envs=2, eval_max_steps=20))
    agent = make_agent("ff", decisive_state_dict(False))
    sampler.initialize(agent, seed=SEED, affinity=TWO_WORKERS)
    workers = list(sampler.workers)
    pids = [p.pid for p in workers]
    assert len(set(pids)) == 2 and set(live_children()) - before == set(pids)
    sampler.obtain_samples(0)
    agent.eval_mode(0)
    sampler.evaluate_agent(0)
    sampler.shutdown()
    assert sampler.workers == []
    assert all(p.exitcode is not None for p in workers)  # joined, not just signalled
    assert set(live_children()) - before == set() and _gone(pids)
    sampler.shutdown()  # idempotent


@pytest.mark.parametrize("SamplerCls", GPU_SAMPLERS, ids=lambda c: c.__name__)
def test_dropped_sampler_joins_its_workers(SamplerCls):
    before = set(live_children())
    sampler = SamplerCls(**staggered_kwargs())
    sampler.initialize(make_agent("ff", decisive_state_dict(False)), seed=SEED,
                       affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    workers = list(sampler.workers)
    del sampler
    gc.collect()
    try:
        assert all(p.exitcode is not None for p in workers)  # the finalizer joined them
        assert set(live_children()) - before == set()
    finally:
        for proc in workers:  # do not leave stragglers to the other tests
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)


@pytest.mark.parametrize("SamplerCls", [AlternatingSampler, NoOverlapAlternatingSampler],
                         ids=lambda c: c.__name__)
def test_alternating_samplers_reject_bad_setups_without_forking(samplers, SamplerCls):
    before = set(live_children())
    one_worker = samplers(SamplerCls, **staggered_kwargs())
    with pytest.raises(ValueError, match="at least 2 workers"):
        one_worker.initialize(make_agent("ff", decisive_state_dict(False)), seed=SEED,
                              affinity=dict(workers_cpus=[[0]]))
    single_state = samplers(SamplerCls, **staggered_kwargs())
    with pytest.raises(TypeError, match="AlternatingRecurrentAgentMixin"):
        single_state.initialize(make_agent("recurrent", decisive_state_dict(True)), seed=SEED,
                                affinity=TWO_WORKERS)
    assert set(live_children()) - before == set()


def test_uneven_worker_split_matches_serial(samplers):
    """3 envs over 2 workers (2 + 1): alternating groups of unequal size."""
    kwargs = staggered_kwargs(B=3, CollectorCls=GpuWaitResetCollector)
    serial = staggered_kwargs(B=3, CollectorCls=CpuWaitResetCollector)
    compare_with_serial(samplers, AlternatingSampler, True, serial, kwargs, ["sample"] * 3)
