"""``max_worker_restarts`` in an asynchronous run: async DQN (AsyncCpuSampler or
AsyncGpuSampler, two workers in the sampler process) whose worker 1 is SIGKILLed twice by its
own environment finishes its budget and logs ``WorkerRestarts`` = 2 (counted in the sampler
process, reported with each batch); a third fault ends the run with the worker's error, and no
process is left behind."""
from __future__ import annotations

import pytest

from rlfast.runners import AsyncRunError
from tests.integration._async_helpers import read_progress, small_dqn_runner
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.learning._configs import train
from tests.samplers._restart_envs import make_faulty_cartpole

SEED = 1


def _runner(tmp_path, n_faults: int, sampler: str = "cpu"):
    markers = tmp_path / "markers"
    markers.mkdir()
    env_kwargs = dict(marker_dir=str(markers), n_faults=n_faults, fault_steps=(30, 90, 150),
                      fault_seed=SEED + 5)  # env 5 of 8: worker 1
    return small_dqn_runner(sampler, n_steps=3_200, seed=SEED, EnvCls=make_faulty_cartpole,
                            env_kwargs=env_kwargs,
                            sampler_kwargs=dict(max_worker_restarts=2))


@pytest.mark.parametrize("sampler", ["cpu", "gpu"])
def test_async_dqn_finishes_through_two_worker_restarts(tmp_path, watchdog, sampler):
    """The gpu sampler (its action server on the CPU here) restarts both workers each time."""
    watchdog(240)
    runner = _runner(tmp_path, n_faults=2, sampler=sampler)
    train(runner, tmp_path / "run", "async_restarts")
    rows = read_progress(tmp_path / "run")
    assert rows[-1]["Diagnostics/CumSteps"] >= 3_200
    assert rows[-1]["Diagnostics/WorkerRestarts"] == 2
    assert live_children() == []


def test_async_dqn_third_fault_ends_the_run(tmp_path, watchdog):
    watchdog(240)
    runner = _runner(tmp_path, n_faults=3)
    with pytest.raises(AsyncRunError) as caught:
        train(runner, tmp_path / "run", "async_restarts_used_up")
    message = str(caught.value)
    assert "Sampler worker 1 died (exit code -9)" in message
    assert "All 2 worker restarts that sampler.max_worker_restarts allows were used" in message
    assert live_children() == []
