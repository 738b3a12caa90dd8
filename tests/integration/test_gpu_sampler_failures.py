"""A failing or killed worker of a GPU-agent sampler must surface in the master as
SamplerWorkerError (with the worker's traceback when there is one), never hang -- the master
waits on per-worker semaphores while serving actions, not only on pipes -- and leave no child
process behind."""
import json
import os
import signal
import subprocess
import sys

import psutil
import pytest

from rlfast.agents import RandomAgent
from rlfast.samplers import GpuSampler, NoOverlapAlternatingSampler, SamplerWorkerError
from tests.integration._failing_envs import BoomEnv, ResetFailsInWorkerEnv
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture

TWO_WORKERS = dict(workers_cpus=[[0], [1]])
HANG_GUARD_S = 30  # the master must raise well within this; the guard kills a hang


@pytest.fixture
def cleanup():
    """Shut down every sampler a test registers, even when the test fails."""
    samplers = []
    yield samplers.append
    for sampler in samplers:
        sampler.shutdown()


def boom_sampler(SamplerCls=GpuSampler, **kwargs):
    defaults = dict(EnvCls=BoomEnv, env_kwargs=dict(fail_after=6, fail_seed=1), batch_T=4,
                    batch_B=2, max_decorrelation_steps=0)
    defaults.update(kwargs)
    return SamplerCls(**defaults)


def _gone(pids):
    return not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
                   for pid in pids)


def test_env_exception_in_worker_raises_with_traceback(watchdog, cleanup):  # noqa: F811
    watchdog(HANG_GUARD_S)
    assert live_children() == []
    sampler = boom_sampler()
    cleanup(sampler)
    sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
    pids = [p.pid for p in sampler.workers]
    samples, _ = sampler.obtain_samples(0)  # steps 1-4 of every env: fine
    assert samples.env.observation[-1, :, 0].tolist() == [3.0, 3.0]  # before the 4th step
    # Env seeded 1 (env 1, the only env of worker 1) raises on its 6th step, while the master
    # serves actions: it must notice while waiting for that worker's observations.
    with pytest.raises(SamplerWorkerError) as info:
        sampler.obtain_samples(1)
    message = str(info.value)
    assert "boom-123 at step 6 of env 1.0" in message and "RuntimeError" in message
    assert "Traceback (most recent call last)" in message
    assert "_failing_envs.py" in message  # the worker's own frames, not the master's
    assert f"worker 1 (pid {pids[1]})" in message
    assert sampler.workers == []
    assert live_children() == [] and _gone(pids)
    sampler.shutdown()  # a second shutdown after the failure is harmless


def test_env_exception_during_evaluation(watchdog, cleanup):  # noqa: F811
    watchdog(HANG_GUARD_S)
    sampler = boom_sampler(env_kwargs=dict(fail_after=10_000),
                           eval_env_kwargs=dict(fail_after=3), eval_n_envs=2, eval_max_steps=20)
    cleanup(sampler)
    sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    with pytest.raises(SamplerWorkerError, match="boom-123") as info:
        sampler.evaluate_agent(0)
    assert "Traceback" in str(info.value)
    assert live_children() == []


def test_exception_while_worker_initializes(watchdog, cleanup):  # noqa: F811
    watchdog(HANG_GUARD_S)
    sampler = NoOverlapAlternatingSampler(EnvCls=ResetFailsInWorkerEnv, env_kwargs={},
                                          batch_T=4, batch_B=2, max_decorrelation_steps=0)
    cleanup(sampler)
    with pytest.raises(SamplerWorkerError) as info:
        sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
    assert "reset-fails-in-worker-456" in str(info.value)
    assert "Traceback" in str(info.value)
    assert live_children() == []


# ---- SIGKILL: run in fresh processes, since a deadlock there could not be interrupted -------

_REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_SCENARIOS = [(name, sampler) for name in ("kill_busy_worker", "kill_idle_worker")
              for sampler in ("GpuSampler", "AlternatingSampler")]
_DEADLINE_S = 13  # after the kill; detection takes about a second (the master's semaphore
                  # wait timeout), shutdown up to 5 s more for the worker blocked on "actions"


@pytest.fixture(scope="module")
def kill_results():
    """Run every kill scenario once per module: one fresh process (in its own session) per
    sampler class, the two concurrently, each running its scenarios one after the other (a
    torch import costs more CPU than a scenario)."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [_REPO_ROOT] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    groups = {}
    for key in _SCENARIOS:
        groups.setdefault(key[1], []).append(key)
    procs = {sampler: subprocess.Popen(
        [sys.executable, "-m", "tests.integration._gpu_scenarios", str(_DEADLINE_S),
         *(f"{name}:{sampler}" for name, sampler in keys)],
        cwd=_REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True) for sampler, keys in groups.items()}
    results = {}
    for sampler, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=len(groups[sampler]) * (_DEADLINE_S + 30))
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)  # the scenarios and all of their workers
            out, err = proc.communicate()
        reported = [json.loads(line[len("RESULT "):]) for line in out.splitlines()
                    if line.startswith("RESULT ")]
        for key in groups[sampler]:
            mine = [r for r in reported if r.get("scenario") == ":".join(key)]
            hang = [r for r in reported if "scenario" not in r]  # the deadline's report
            results[key] = (mine[-1] if mine else hang[-1] if hang
                            else dict(error=["NoResult", err[-3000:]], children=None))
    return results


@pytest.mark.parametrize("sampler", ["GpuSampler", "AlternatingSampler"])
def test_worker_killed_mid_batch_raises(kill_results, sampler):
    result = kill_results[("kill_busy_worker", sampler)]
    error = result["error"]
    assert error is not None and error[0] == "SamplerWorkerError", error
    # No Python traceback exists for a SIGKILL; the message names the exit code instead.
    assert "worker 1 died" in error[1] and f"exit code {-signal.SIGKILL}" in error[1]
    assert result["children"] == []


@pytest.mark.parametrize("sampler", ["GpuSampler", "AlternatingSampler"])
def test_worker_killed_between_batches_raises_on_next_obtain_samples(kill_results, sampler):
    result = kill_results[("kill_idle_worker", sampler)]
    error = result["error"]
    assert error is not None and error[0] == "SamplerWorkerError", error
    assert "worker 0 died" in error[1] and f"exit code {-signal.SIGKILL}" in error[1]
    assert result["children"] == []
