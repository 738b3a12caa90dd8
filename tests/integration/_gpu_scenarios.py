"""Worker-kill scenarios for the GPU-agent samplers, each run in a fresh Python process.

``python -m tests.integration._gpu_scenarios DEADLINE NAME:SAMPLER [NAME:SAMPLER ...]`` (from
the repository root, in a new session) runs each scenario ``NAME`` with ``SAMPLER`` (a class
name from rlfast.samplers) in turn, in this one process (one torch import serves them all), and
prints one line ``RESULT <json>`` for each, naming it. As in ``_scenarios``, a sampler call
still running ``DEADLINE`` seconds after the kill is reported as a hang and the process kills
its own process group, so a deadlock in the action server becomes an ordinary test failure (of
that scenario and of any not yet run). A GPU sampler's
master waits on per-worker semaphores (not only on pipes), so these check that a dead worker is
noticed while the master serves actions, between batches and in the middle of one.
"""
import os
import signal
import sys
import threading
import time

import psutil

import rlfast.samplers
from rlfast.agents import RandomAgent
from tests.integration._failing_envs import BoomEnv, SlowEnv
from tests.integration._scenarios import _arm_deadline, _call, _report

TWO_WORKERS = dict(workers_cpus=[[0], [1]])


def _sampler_cls(name: str):
    if name not in ("GpuSampler", "AlternatingSampler", "NoOverlapAlternatingSampler"):
        raise ValueError(f"unknown GPU sampler {name!r}")
    return getattr(rlfast.samplers, name)


def _children() -> list:
    return [c.pid for c in psutil.Process().children(recursive=True)]


def kill_idle_worker(sampler_name: str, deadline: float) -> dict:
    """Kill a worker while it waits for its next command, then ask for a batch."""
    sampler = _sampler_cls(sampler_name)(EnvCls=BoomEnv, env_kwargs=dict(fail_after=10 ** 6),
                                         batch_T=4, batch_B=2, max_decorrelation_steps=0)
    sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    time.sleep(0.5)  # both workers are now blocked waiting for the next command
    pids = [p.pid for p in sampler.workers]
    os.kill(pids[0], signal.SIGKILL)
    timer = _arm_deadline(deadline)
    error = _call(lambda: sampler.obtain_samples(1))
    sampler.shutdown()
    timer.cancel()
    return dict(error=error, children=_children(), workers=pids)


def kill_busy_worker(sampler_name: str, deadline: float) -> dict:
    """Kill a worker in the middle of a batch (while it steps its slow env)."""
    sampler = _sampler_cls(sampler_name)(EnvCls=SlowEnv, env_kwargs=dict(delay=0.05),
                                         batch_T=16, batch_B=2, max_decorrelation_steps=0)
    sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    pids = [p.pid for p in sampler.workers]
    killer = threading.Timer(0.3, os.kill, args=(pids[1], signal.SIGKILL))
    killer.start()
    timer = _arm_deadline(deadline + 0.3)
    error = _call(lambda: sampler.obtain_samples(1))  # the batch the kill interrupts
    if error is None:  # the kill landed after the batch: the next call must fail
        error = _call(lambda: sampler.obtain_samples(2))
    killer.join()
    sampler.shutdown()
    timer.cancel()
    return dict(error=error, children=_children(), workers=pids)


if __name__ == "__main__":
    for scenario in sys.argv[2:]:
        name, sampler_name = scenario.split(":")
        result = globals()[name](sampler_name, float(sys.argv[1]))
        # Each scenario shut its sampler down: the next one must start with no child left
        # (its own "children" would show any that were).
        _report(dict(result, scenario=scenario))
