"""Threads follow the work (``MasterAffinity``, which every runner uses; its rules alone are
tested in test_master_affinity.py): on the CPU the master samples and evaluates
with ``sample_torch_threads`` torch threads (default 1) and optimizes with
``master_torch_threads`` (``0``: every core of ``master_cpus``, or every available core). By
default a convolutional model optimizes on every core and any other model (an MLP) on the
sampling count; under overlap one count (the optimizing one) serves the whole loop. The caller's
thread count and cpu affinity come back after ``train()``, also when the run fails.

The thread counts are read where the work happens: inside ``algo.optimize_agent`` (a PPO
subclass) and inside the sampler's ``obtain_samples`` / ``evaluate_agent`` (sampler
subclasses). Expected counts are computed from ``available_cpus()``, never hard-coded.
"""
from __future__ import annotations

import psutil
import pytest
import torch

from rlfast.agents import CategoricalPgAgent
from rlfast.algos import PPO
from rlfast.envs import make
from rlfast.experiments.placement import default_affinity
from rlfast.runners import MinibatchRlEval
from rlfast.samplers import CpuSampler, SerialSampler
from rlfast.utils.misc import available_cpus

N_ENVS = 2
BATCH_T = 8
N_ITR = 3
# A caller's thread count that none of the runs below chooses by itself (they use 1, 2 or
# the number of cores), so that restoring it is visible.
CALLER_THREADS = len(available_cpus()) + 3


class RecordingPPO(PPO):
    """PPO that records ``torch.get_num_threads()`` at each ``optimize_agent``; with
    ``fail_at`` it raises ``RuntimeError`` at that iteration instead."""

    def __init__(self, fail_at: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.threads: list[int] = []
        self.fail_at = fail_at

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        self.threads.append(torch.get_num_threads())
        if itr == self.fail_at:
            raise RuntimeError(f"planted failure at itr {itr}")
        return super().optimize_agent(itr, samples)


def _recording(SamplerCls):
    class Recording(SamplerCls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.sample_threads: list[int] = []
            self.eval_threads: list[int] = []

        def obtain_samples(self, itr, db_idx=None):
            self.sample_threads.append(torch.get_num_threads())
            return super().obtain_samples(itr, db_idx)

        def evaluate_agent(self, itr):
            self.eval_threads.append(torch.get_num_threads())
            return super().evaluate_agent(itr)

    Recording.__name__ = f"Recording{SamplerCls.__name__}"
    return Recording


SAMPLERS = {"serial": _recording(SerialSampler), "cpu": _recording(CpuSampler)}


def _runner(sampler="serial", affinity=None, fail_at=None, model="mlp", overlap=False):
    """PPO on CartPole with an MLP agent, or (``model="conv"``) on Atari Pong with a small
    convolutional agent."""
    if model == "conv":
        pytest.importorskip("ale_py")
        from rlfast.agents import AtariFfAgent
        from rlfast.envs import AtariEnv
        EnvCls, env_kwargs = AtariEnv, dict(game="pong", obs_type="84x84")
        agent = AtariFfAgent(model_kwargs=dict(fc_sizes=16, channels=(4, 8),
                                               kernel_sizes=(8, 4), strides=(4, 2),
                                               paddings=(0, 0)))
    else:
        EnvCls, env_kwargs = make, dict(id="CartPole-v1")
        agent = CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))
    sampler_obj = SAMPLERS[sampler](
        EnvCls=EnvCls, env_kwargs=env_kwargs, batch_T=BATCH_T, batch_B=N_ENVS,
        max_decorrelation_steps=0, eval_n_envs=1, eval_max_steps=60, eval_max_trajectories=1)
    algo = RecordingPPO(fail_at=fail_at, learning_rate=1e-3, minibatches=1, epochs=1)
    return MinibatchRlEval(algo=algo, agent=agent, sampler=sampler_obj,
                           n_steps=N_ITR * BATCH_T * N_ENVS, seed=1, affinity=affinity,
                           log_interval_steps=BATCH_T * N_ENVS, progress_bar=False,
                           overlap=overlap)


@pytest.fixture
def caller_threads():
    """The test (the runner's caller) runs CALLER_THREADS torch threads; the suite's count
    is put back afterwards."""
    previous = torch.get_num_threads()
    torch.set_num_threads(CALLER_THREADS)
    yield CALLER_THREADS
    torch.set_num_threads(previous)


def _check(runner, sample: int, optimize: int, caller: int, cpus_before) -> None:
    algo, sampler = runner.algo, runner.sampler
    assert algo.threads == [optimize] * N_ITR
    assert sampler.sample_threads == [sample] * N_ITR
    # The pre-training evaluation and one at every iteration (the log interval is one).
    assert sampler.eval_threads == [sample] * (N_ITR + 1)
    assert torch.get_num_threads() == caller
    assert psutil.Process().cpu_affinity() == cpus_before


@pytest.mark.parametrize("sampler", ["serial", "cpu"])
@pytest.mark.parametrize("preset", [False, True], ids=["no_affinity", "default_affinity"])
def test_default_conv_run_optimizes_on_every_core_and_samples_on_one(sampler, preset,
                                                                    caller_threads):
    cpus_before = psutil.Process().cpu_affinity()
    affinity = default_affinity(N_ENVS, sampler) if preset else None
    if preset:
        assert affinity["master_cpus"] == available_cpus()
    runner = _runner(sampler, affinity, model="conv")
    runner.train()
    _check(runner, sample=1, optimize=len(available_cpus()), caller=caller_threads,
           cpus_before=cpus_before)


@pytest.mark.parametrize("sampler", ["serial", "cpu"])
def test_default_mlp_run_optimizes_on_the_sampling_count(sampler, caller_threads):
    cpus_before = psutil.Process().cpu_affinity()
    runner = _runner(sampler, default_affinity(N_ENVS, sampler))
    runner.train()
    _check(runner, sample=1, optimize=1, caller=caller_threads, cpus_before=cpus_before)


@pytest.mark.parametrize("affinity, optimize", [
    (None, len(available_cpus())),  # a convolutional learner: every core
    (dict(master_torch_threads=1), 1),  # given: kept
])
def test_overlapped_conv_run_keeps_one_count_all_along(affinity, optimize, caller_threads):
    runner = _runner("cpu", affinity, model="conv", overlap=True)
    runner.train()
    assert runner.algo.threads == [optimize] * N_ITR
    # torch's thread count is process-wide: the background batches run under it too.
    assert set(runner.sampler.sample_threads) == {optimize}
    assert torch.get_num_threads() == caller_threads


@pytest.mark.parametrize("affinity, sample, optimize", [
    (dict(master_cpus=[0]), 1, 1),  # every core of master_cpus: one
    (dict(master_torch_threads=1), 1, 1),
    (dict(master_torch_threads=0), 1, len(available_cpus())),  # 0: every core
    (dict(sample_torch_threads=2), 2, 2),  # an MLP optimizes on the sampling count
    (dict(sample_torch_threads=2, master_torch_threads=3), 2, 3),
], ids=["master_cpus_0", "master_threads_1", "master_threads_0", "sample_threads_2",
        "both_given"])
def test_thread_counts_from_affinity(affinity, sample, optimize, caller_threads):
    cpus_before = psutil.Process().cpu_affinity()
    runner = _runner("serial", affinity)
    runner.train()
    _check(runner, sample=sample, optimize=optimize, caller=caller_threads,
           cpus_before=cpus_before)


def test_master_cpus_pin_the_master_during_the_run_only(caller_threads):
    """While ``master_cpus=[0]`` runs, the process is pinned to core 0; afterwards its
    affinity is the caller's again."""
    cpus_before = psutil.Process().cpu_affinity()
    seen = []
    runner = _runner("serial", dict(master_cpus=[0]))
    original = runner.algo.optimize_agent

    def optimize_agent(itr, samples=None, sampler_itr=None):
        seen.append(psutil.Process().cpu_affinity())
        return original(itr, samples)

    runner.algo.optimize_agent = optimize_agent
    runner.train()
    assert seen == [[0]] * N_ITR
    assert psutil.Process().cpu_affinity() == cpus_before


@pytest.mark.parametrize("affinity", [None, dict(master_cpus=[0], sample_torch_threads=2)])
def test_failed_run_restores_the_callers_threads_and_cores(affinity, caller_threads):
    cpus_before = psutil.Process().cpu_affinity()
    runner = _runner("serial", affinity, fail_at=1, model="conv")
    with pytest.raises(RuntimeError, match="planted failure at itr 1"):
        runner.train()
    expected = 1 if affinity else len(available_cpus())
    assert runner.algo.threads == [expected, expected]  # itr 0, then the failing itr 1
    assert torch.get_num_threads() == caller_threads
    assert psutil.Process().cpu_affinity() == cpus_before


def test_default_affinity_leaves_the_master_threads_to_the_runner():
    for sampler in ("serial", "cpu"):
        affinity = default_affinity(8, sampler)
        assert "master_torch_threads" in affinity
        assert affinity["master_torch_threads"] is None
    assert default_affinity(8, "cpu", master_threads=3)["master_torch_threads"] == 3
