"""Helpers shared by the asynchronous-runner tests (tests/runners/test_async_rl.py and
tests/integration/test_async_faults.py): small DQN CartPole runs, progress.csv reading, and
process / shared-memory accounting that covers the sampler's own workers (grandchildren).
"""
from __future__ import annotations

import csv
import math
import os
import threading
import time

import psutil

from rlfast.agents import DqnAgent
from rlfast.algos import DQN
from rlfast.envs import make
from rlfast.runners import AsyncRlEval
from rlfast.samplers import (AsyncAlternatingSampler, AsyncCpuSampler, AsyncGpuSampler,
                             AsyncSerialSampler)
from tests._leaks import new_shm_entries, shm_entries  # noqa: F401 (for the tests)

ASYNC_SAMPLERS = {"serial": AsyncSerialSampler, "cpu": AsyncCpuSampler,
                  "gpu": AsyncGpuSampler, "alternating": AsyncAlternatingSampler}
# Small and quick: learning after 256 steps, 1 update of 32 per 32-step batch (replay ratio 1).
SMALL_DQN = dict(discount=0.99, batch_size=32, min_steps_learn=256, replay_size=20_000,
                 replay_ratio=1, target_update_interval=100, n_step_return=3,
                 learning_rate=1e-3, eps_steps=2_000, double_dqn=True)
SMALL_EVAL = dict(eval_n_envs=2, eval_max_steps=400, eval_max_trajectories=2)


def async_affinity(n_workers: int = 0) -> dict:
    """Optimizer on the CPU, one torch thread everywhere, nothing pinned but the workers
    (``n_workers`` of them, on cores 0, 1, 0, ...)."""
    sampler = dict(master_torch_threads=1, worker_torch_threads=1)
    if n_workers:
        sampler["workers_cpus"] = [[i % 2] for i in range(n_workers)]
    return dict(optimizer=[dict(cuda_idx=None, master_torch_threads=1)], sampler=sampler)


def small_dqn_runner(sampler: str = "serial", n_steps: int = 3_200, seed: int = 1,
                     copier: str = "optimizer", log_interval_steps: int = 800,
                     batch_T: int = 4, batch_B: int = 8, hidden_sizes=(32,),
                     EnvCls=make, env_kwargs: dict | None = None, algo=None, agent=None,
                     RunnerCls=AsyncRlEval, sampler_kwargs: dict | None = None,
                     **runner_kwargs):
    """A short async DQN run on CartPole-v1 (or ``EnvCls(**env_kwargs)``) with one of the four
    async samplers (two workers for the parallel ones)."""
    SamplerCls = ASYNC_SAMPLERS[sampler]
    sampler_obj = SamplerCls(EnvCls=EnvCls, env_kwargs=dict(env_kwargs or dict(id="CartPole-v1")),
                             batch_T=batch_T, batch_B=batch_B, max_decorrelation_steps=0,
                             **{**SMALL_EVAL, **(sampler_kwargs or {})})
    agent = agent or DqnAgent(model_kwargs=dict(hidden_sizes=list(hidden_sizes)), eps_eval=0.0)
    algo = algo or DQN(**SMALL_DQN)
    runner_kwargs.setdefault("progress_bar", False)
    return RunnerCls(algo=algo, agent=agent, sampler=sampler_obj, n_steps=n_steps, seed=seed,
                     affinity=async_affinity(0 if sampler == "serial" else 2), copier=copier,
                     log_interval_steps=log_interval_steps, **runner_kwargs)


def read_progress(log_dir) -> list[dict]:
    """The rows of ``log_dir/progress.csv``, every value a float (empty cells: NaN)."""
    with open(os.path.join(os.fspath(log_dir), "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    return [{k: (float(v) if v not in ("", None) else math.nan) for k, v in row.items()}
            for row in rows]


def pid_alive(pid: int) -> bool:
    """Alive and not a zombie."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def wait_pids_gone(pids, timeout: float = 5.0) -> list:
    """Wait up to ``timeout`` s for ``pids`` to exit; return those still alive."""
    deadline = time.monotonic() + timeout
    alive = [p for p in pids if pid_alive(p)]
    while alive and time.monotonic() < deadline:
        time.sleep(0.05)
        alive = [p for p in alive if pid_alive(p)]
    return alive


class DescendantRecorder:
    """A thread recording the pids of every descendant of ``root`` (default: this process)
    while a run is alive, the sampler's workers (grandchildren) included.

    ``with DescendantRecorder() as rec: ...``; ``rec.pids`` holds every pid seen,
    ``rec.max_seen`` the most descendants alive at once."""

    def __init__(self, root: int | None = None, interval: float = 0.05, exclude=()):
        self.root = psutil.Process(root) if root is not None else psutil.Process()
        self.interval = interval
        self.exclude = set(exclude)
        self.pids: set[int] = set()
        self.max_seen = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def snapshot(self) -> list[int]:
        try:
            children = self.root.children(recursive=True)
        except psutil.Error:
            return []
        pids = [c.pid for c in children if c.pid not in self.exclude]
        self.pids.update(pids)
        self.max_seen = max(self.max_seen, len(pids))
        return pids

    def _run(self) -> None:
        while not self._stop.is_set():
            self.snapshot()
            self._stop.wait(self.interval)

    def __enter__(self) -> "DescendantRecorder":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
