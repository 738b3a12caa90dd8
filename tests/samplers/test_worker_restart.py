"""``max_worker_restarts``: a CpuSampler worker that dies, raises or hangs is replaced, the
failed batch's columns are collected again by its replacement, and the fault after the last
allowed restart ends the run with the error it would have raised without restarts."""
from __future__ import annotations

import os

import numpy as np
import psutil
import pytest

from rlfast.agents import CategoricalPgAgent, RandomAgent
from rlfast.samplers import AlternatingSampler, CpuSampler, GpuSampler, SamplerWorkerError
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.samplers._restart_envs import make_pid_env

TWO_WORKERS = dict(workers_cpus=[[0], [1]])
T = 8


@pytest.fixture
def sampler_for(tmp_path):
    """Build a 2-worker CpuSampler over PidEnv whose env 1 (worker 1) faults; shut it down
    after the test whatever happens."""
    made = []

    def build(n_faults: int, restarts: int, fault: str = "sigkill", fault_step: int = 5,
              **kwargs) -> CpuSampler:
        env_kwargs = dict(marker_dir=str(tmp_path), n_faults=n_faults, fault_step=fault_step,
                          fault_seed=1, fault=fault)
        sampler = CpuSampler(EnvCls=make_pid_env, env_kwargs=env_kwargs, batch_T=T, batch_B=2,
                             max_decorrelation_steps=0, max_worker_restarts=restarts, **kwargs)
        made.append(sampler)
        sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
        return sampler

    yield build
    for sampler in made:
        sampler.shutdown()


def _column_pids(samples, column: int) -> set:
    return set(np.asarray(samples.env.observation[:, column, 0]).astype(np.int64).tolist())


def _faults(tmp_path) -> int:
    return len([f for f in os.listdir(tmp_path) if f.startswith("fault-")])


def test_two_killed_workers_are_replaced_and_their_columns_collected_again(
        sampler_for, tmp_path, watchdog, capsys):
    watchdog(60)
    sampler = sampler_for(n_faults=2, restarts=2)
    first_pids = [p.pid for p in sampler.workers]
    samples, _ = sampler.obtain_samples(0)  # worker 1 dies at step 5, twice
    assert _faults(tmp_path) == 2 and sampler.worker_restarts == 2
    new_pid = sampler.workers[1].pid
    assert new_pid not in first_pids and sampler.workers[0].pid == first_pids[0]
    # Every step of the faulting column comes from the last worker, whole, from its reset:
    # nothing the dead workers stepped reaches the batch.
    assert _column_pids(samples, 1) == {new_pid}
    assert np.asarray(samples.env.observation[:, 1, 1]).tolist() == list(range(T))
    assert _column_pids(samples, 0) == {first_pids[0]}
    out = capsys.readouterr().out
    assert out.count("Sampler worker 1 restarted") == 2
    assert "(1 of 2 allowed), iteration 0 collected again" in out
    assert "died (exit code -9)" in out
    samples, _ = sampler.obtain_samples(1)  # and the run goes on
    assert _column_pids(samples, 1) == {new_pid}
    assert not psutil.pid_exists(first_pids[1]) or \
        psutil.Process(first_pids[1]).status() == psutil.STATUS_ZOMBIE


def test_the_fault_after_the_last_restart_ends_the_run_with_the_named_error(
        sampler_for, tmp_path, watchdog):
    watchdog(60)
    sampler = sampler_for(n_faults=3, restarts=2)
    with pytest.raises(SamplerWorkerError) as info:
        sampler.obtain_samples(0)
    message = str(info.value)
    assert "Sampler worker 1 died (exit code -9)" in message
    assert "All 2 worker restarts that sampler.max_worker_restarts allows were used" in message
    assert _faults(tmp_path) == 3 and sampler.worker_restarts == 2
    assert live_children() == []


def _open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def test_a_replacement_holds_no_more_descriptors_than_the_worker_it_replaces(
        sampler_for, watchdog):
    """The soak's check: restarts must not grow the run's open descriptors. The replacement is
    forked after the dead worker's sentinel pipes are closed, so it does not inherit them."""
    watchdog(60)
    sampler = sampler_for(n_faults=1, restarts=2)
    master, before = _open_fds(os.getpid()), _open_fds(sampler.workers[1].pid)
    sampler.obtain_samples(0)
    assert sampler.worker_restarts == 1
    sampler.obtain_samples(1)
    assert _open_fds(sampler.workers[1].pid) <= before
    assert _open_fds(os.getpid()) <= master


def test_without_restarts_the_first_fault_ends_the_run(sampler_for, watchdog):
    watchdog(60)
    sampler = sampler_for(n_faults=1, restarts=0)
    with pytest.raises(SamplerWorkerError, match="died"):
        sampler.obtain_samples(0)
    assert live_children() == []


@pytest.mark.parametrize("fault, cause", [
    ("raise", "RuntimeError: injected fault: env.step raised"),
    ("abort", "died (exit code -6)"),
    ("hang", "timed out: it is alive")])
def test_a_raising_aborting_or_hanging_worker_is_replaced(sampler_for, watchdog, capsys,
                                                         fault, cause):
    watchdog(60)
    sampler = sampler_for(n_faults=1, restarts=1, fault=fault, worker_timeout=3)
    samples, _ = sampler.obtain_samples(0)
    assert sampler.worker_restarts == 1
    assert _column_pids(samples, 1) == {sampler.workers[1].pid}
    assert cause in capsys.readouterr().out


def test_a_worker_that_dies_while_starting_is_replaced(tmp_path, watchdog, capsys):
    watchdog(60)
    env_kwargs = dict(marker_dir=str(tmp_path), n_faults=1, fault_step=0, fault_seed=1)
    sampler = CpuSampler(EnvCls=make_pid_env, env_kwargs=env_kwargs, batch_T=T, batch_B=2,
                         max_decorrelation_steps=0, max_worker_restarts=1)
    try:
        sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
        assert sampler.worker_restarts == 1 and _faults(tmp_path) == 1
        samples, _ = sampler.obtain_samples(0)
        assert _column_pids(samples, 1) == {sampler.workers[1].pid}
        assert "Sampler worker 1 restarted (1 of 1 allowed), while starting" in \
            capsys.readouterr().out
    finally:
        sampler.shutdown()


def test_evaluation_is_redone_by_the_replacement(sampler_for, tmp_path, watchdog):
    """The fault strikes while evaluating: env seeds of evaluation start at
    EVAL_ENV_SEED_OFFSET, so here the faulting environment is worker 1's evaluation one."""
    from rlfast.samplers.base import EVAL_ENV_SEED_OFFSET
    watchdog(60)
    env_kwargs = dict(marker_dir=str(tmp_path), n_faults=1, fault_step=3,
                      fault_seed=EVAL_ENV_SEED_OFFSET + 1, fault="sigkill")
    sampler = CpuSampler(EnvCls=make_pid_env, env_kwargs=env_kwargs, batch_T=T, batch_B=2,
                         max_decorrelation_steps=0, max_worker_restarts=1, eval_n_envs=2,
                         eval_max_steps=40)
    try:
        sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
        infos = sampler.evaluate_agent(0)
        assert sampler.worker_restarts == 1 and _faults(tmp_path) == 1
        assert len(infos) >= 2  # both workers' evaluation episodes (10 steps each) came back
    finally:
        sampler.shutdown()


def test_restarts_must_be_a_non_negative_integer():
    with pytest.raises(ValueError, match="max_worker_restarts must be an integer >= 0"):
        CpuSampler(EnvCls=make_pid_env, env_kwargs={}, batch_T=T, batch_B=2,
                   max_worker_restarts=-1)


@pytest.mark.parametrize("SamplerCls", [GpuSampler, AlternatingSampler])
def test_samplers_with_an_action_server_restart_every_worker(SamplerCls, tmp_path, watchdog,
                                                            capsys):
    """The action server steps every worker in lockstep: a fault stops them all, and all are
    started again and collect the whole batch anew, each column from its reset."""
    watchdog(90)
    env_kwargs = dict(marker_dir=str(tmp_path), n_faults=2, fault_step=5, fault_seed=1,
                      fault="sigkill")
    sampler = SamplerCls(EnvCls=make_pid_env, env_kwargs=env_kwargs, batch_T=T, batch_B=2,
                         max_decorrelation_steps=0, max_worker_restarts=2, eval_n_envs=2,
                         eval_max_steps=40)
    try:
        sampler.initialize(CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8])), seed=0,
                           affinity=TWO_WORKERS)
        first = [p.pid for p in sampler.workers]
        samples, _ = sampler.obtain_samples(0)
        assert sampler.worker_restarts == 2 and _faults(tmp_path) == 2
        pids = [p.pid for p in sampler.workers]
        assert not set(pids) & set(first)
        for column in (0, 1):
            assert _column_pids(samples, column) == {pids[column]}
            assert np.asarray(samples.env.observation[:, column, 1]).tolist() == list(range(T))
        assert capsys.readouterr().out.count("Sampler workers restarted") == 2
        samples, _ = sampler.obtain_samples(1)  # the new workers go on serving
        assert _column_pids(samples, 1) == {pids[1]}
        assert len(sampler.evaluate_agent(1)) >= 2
    finally:
        sampler.shutdown()
    assert live_children() == []
