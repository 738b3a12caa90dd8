"""Runs with CpuSampler leave no child process and no shared-memory file behind, on the normal
path, when the algorithm raises, and on KeyboardInterrupt."""
import gc
import os
import time

import psutil
import pytest

from rlfast.agents import CategoricalPgAgent, RandomAgent
from rlfast.algos import A2C, PPO
from rlfast.envs import make
from rlfast.runners import MinibatchRl, MinibatchRlEval
from rlfast.samplers import CpuSampler
from tests._leaks import SHM_DIR as SHM, new_shm_entries, shm_entries
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture

TWO_WORKERS = dict(workers_cpus=[[0], [1]])
HANG_GUARD_S = 60
# The leak check looks for multiprocessing / shared_memory names, and files named after one
# of our pids (torch_<pid>_*, pym-<pid>-*). Others' semaphores (sem.mp-*) are not checked:
# concurrent processes on the machine may own some for their lifetime.


def cartpole_sampler(**kwargs):
    defaults = dict(EnvCls=make, env_kwargs=dict(id="CartPole-v1", max_episode_steps=20),
                    batch_T=8, batch_B=2, max_decorrelation_steps=5, eval_n_envs=2,
                    eval_max_steps=40, eval_max_trajectories=2)
    defaults.update(kwargs)
    return CpuSampler(**defaults)


def small_agent():
    return CategoricalPgAgent(model_kwargs=dict(hidden_sizes=[8]))


def small_ppo():
    return PPO(learning_rate=1e-3, minibatches=1, epochs=1)


class _ItrHook:
    """Calls ``on_itr(itr)`` at the start of every optimize_agent, then optimizes."""

    def __init__(self, algo, on_itr):
        self.algo, self.on_itr = algo, on_itr
        self.itrs = []

    def __getattr__(self, name):
        return getattr(self.algo, name)

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        self.itrs.append(itr)
        self.on_itr(itr)
        return self.algo.optimize_agent(itr, samples)


def _raise_at(itr_to_fail, exc):
    def on_itr(itr):
        if itr == itr_to_fail:
            raise exc

    return on_itr


def _run(runner):
    """Train, recording the sampler's worker pids (gone after shutdown)."""
    pids = []
    original_initialize = runner.sampler.initialize

    def initialize(*args, **kwargs):
        examples = original_initialize(*args, **kwargs)
        pids.extend(p.pid for p in runner.sampler.workers)
        return examples

    runner.sampler.initialize = initialize
    try:
        return runner.train(), pids
    finally:
        runner.sampler.initialize = original_initialize


def _pids_gone(pids):
    return all(not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
               for pid in pids)


def test_full_eval_run_leaves_no_children(watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    assert live_children() == []
    sampler = cartpole_sampler()
    runner = MinibatchRlEval(algo=small_ppo(), agent=small_agent(), sampler=sampler,
                             n_steps=48, seed=3, log_interval_steps=16, affinity=TWO_WORKERS,
                             progress_bar=False)
    result, pids = _run(runner)
    assert len(pids) == 2
    assert result["n_itr"] == 3 and result["cum_steps"] == 48
    # Evaluation at itr 0 and after each of the 3 log intervals.
    assert len(result["eval_returns"]) == 4
    assert all(ret == ret and ret >= 1 for _, ret in result["eval_returns"])  # not NaN
    assert live_children() == [] and _pids_gone(pids)
    assert sampler.workers == []


def test_algo_exception_shuts_sampler_down_and_reraises(watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    algo = _ItrHook(A2C(learning_rate=1e-3), _raise_at(1, RuntimeError("optimize-failure-789")))
    sampler = cartpole_sampler(eval_n_envs=0, eval_max_trajectories=None)
    runner = MinibatchRl(algo=algo, agent=small_agent(), sampler=sampler, n_steps=64, seed=4,
                         log_interval_steps=16, affinity=TWO_WORKERS, progress_bar=False)
    with pytest.raises(RuntimeError, match="optimize-failure-789"):
        _run(runner)
    assert algo.itrs == [0, 1]
    assert live_children() == []
    assert sampler.workers == []


def test_keyboard_interrupt_in_training_loop_leaves_no_children(watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    algo = _ItrHook(small_ppo(), _raise_at(2, KeyboardInterrupt()))
    sampler = cartpole_sampler()
    runner = MinibatchRlEval(algo=algo, agent=small_agent(), sampler=sampler, n_steps=80, seed=5,
                             log_interval_steps=16, affinity=TWO_WORKERS, progress_bar=False)
    with pytest.raises(KeyboardInterrupt):
        _run(runner)
    assert algo.itrs == [0, 1, 2]
    assert live_children() == []
    assert sampler.workers == []


def test_exception_during_startup_leaves_no_children(watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)

    class BrokenAlgo(A2C):
        def initialize(self, *args, **kwargs):
            raise ValueError("algo-init-failure-321")

    sampler = cartpole_sampler()
    runner = MinibatchRlEval(algo=BrokenAlgo(), agent=small_agent(), sampler=sampler,
                             n_steps=32, seed=6, log_interval_steps=16, affinity=TWO_WORKERS,
                             progress_bar=False)
    with pytest.raises(ValueError, match="algo-init-failure-321"):
        runner.train()
    assert live_children() == []


@pytest.mark.skipif(not os.path.isdir(SHM), reason="needs /dev/shm")
def test_no_shared_memory_files_left_behind(watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    before = shm_entries()
    sampler = cartpole_sampler()
    agent = small_agent()
    sampler.initialize(agent, seed=7, affinity=TWO_WORKERS, bootstrap_value=True)
    pids = [os.getpid()] + [p.pid for p in sampler.workers]
    assert all(p.is_shared() for p in agent.parameters())
    for itr in range(2):
        sampler.obtain_samples(itr)
    sampler.evaluate_agent(1)
    sampler.shutdown()
    leaked = new_shm_entries(before, prefixes=("pymp-", "psm_"),
                             also=lambda name: any(str(pid) in name for pid in pids))
    assert leaked == []
    assert live_children() == []


def test_dropped_sampler_stops_its_workers(watchdog):  # noqa: F811
    watchdog(HANG_GUARD_S)
    sampler = cartpole_sampler(eval_n_envs=0, eval_max_trajectories=None)
    sampler.initialize(RandomAgent(), seed=8, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    workers = list(sampler.workers)
    del sampler
    gc.collect()
    try:
        for proc in workers:
            proc.join(timeout=0.5)
        assert [p.pid for p in workers if p.is_alive()] == []
    finally:
        for proc in workers:  # do not leave them to the other tests
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        time.sleep(0.2)  # let the watcher thread notice and release the sampler
        gc.collect()
    assert live_children() == []
