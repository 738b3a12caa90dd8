"""A sampler worker that is alive but silent -- stopped (SIGSTOP), stuck in an environment, stuck
while building its environments -- must become a SamplerWorkerError naming the worker (index,
pid) and what it was doing, within the sampler's ``worker_timeout``; never a hang. Afterwards
no child process and no new /dev/shm entry may remain.

The runs use an explicit timeout of a few seconds (set after a healthy first batch with a
generous one, so that a slow start on a loaded machine cannot time out); the "auto"
computation is checked at unit level, without waiting a minute.
"""
import os
import re
import signal
import threading
import time

import pytest

from rlfast.agents import RandomAgent
from rlfast.samplers import (AlternatingSampler, CpuSampler, GpuSampler, SamplerWorkerError,
                             SerialSampler)
from rlfast.samplers.base import EVAL_ENV_SEED_OFFSET, parse_worker_timeout
from rlfast.samplers.parallel.timeout import AUTO_MIN_S, AUTO_UNMEASURED_S, WorkerTimeout
from tests._leaks import new_shm_entries, shm_entries
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.samplers._hanging_envs import HangingInWorkerEnv, HangingStepEnv, TickEnv

TWO_WORKERS = dict(workers_cpus=[[0], [1]])
SAMPLERS = [CpuSampler, GpuSampler, AlternatingSampler]
GUARD_S = 60     # the watchdog: a hang fails the test instead of blocking the suite
TIMEOUT_S = 2.0  # the sampler's worker_timeout once the first batch went well


def _silence(SamplerCls, expected: str = "done") -> str:
    """How the error says the worker stayed silent: the GPU samplers' master notices while
    waiting for the worker's observations, the CPU sampler's while waiting for its reply."""
    if SamplerCls is CpuSampler:
        return f"sent no '{expected}' reply"
    return "did not signal 'observations ready'"


def _settles_on(sampler, i: int, text: str) -> bool:
    """A worker publishes "waiting for a command" just after sending its reply: poll."""
    give_up = time.monotonic() + 10
    while sampler.worker_status(i) != text and time.monotonic() < give_up:
        time.sleep(0.01)
    return sampler.worker_status(i) == text


@pytest.fixture
def run(watchdog):  # noqa: F811
    """``run.start(SamplerCls, **kwargs)`` builds and initializes a two-worker sampler with a
    generous timeout; ``run.check_clean()`` asserts no child process and no new shared-memory
    file remain. Every sampler is shut down at the end, even when the test fails."""
    watchdog(GUARD_S)
    state = dict(samplers=[], pids=[os.getpid()], shm=shm_entries(),
                 children=set(live_children()))

    class Run:
        @staticmethod
        def start(SamplerCls, **kwargs):
            defaults = dict(batch_B=2, max_decorrelation_steps=0, worker_timeout=60.0)
            defaults.update(kwargs)
            sampler = SamplerCls(**defaults)
            state["samplers"].append(sampler)
            sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
            state["pids"] += [p.pid for p in sampler.workers]
            return sampler

        @staticmethod
        def check_clean():
            assert set(live_children()) - state["children"] == set()

            new = new_shm_entries(state["shm"], prefixes=("pymp-", "psm_"),
                                  also=lambda n: any(str(pid) in n for pid in state["pids"]))
            assert new == [], f"/dev/shm entries left behind: {new}"

    yield Run
    for sampler in state["samplers"]:
        sampler.shutdown()


@pytest.mark.parametrize("SamplerCls", SAMPLERS)
def test_stopped_worker_between_batches(run, SamplerCls):
    sampler = run.start(SamplerCls, EnvCls=TickEnv, env_kwargs={}, batch_T=4)
    sampler.obtain_samples(0)
    pid = sampler.workers[1].pid
    sampler.worker_timeout = TIMEOUT_S
    assert _settles_on(sampler, 1, "waiting for a command (its last command was for iteration 0)")
    os.kill(pid, signal.SIGSTOP)
    with pytest.raises(SamplerWorkerError) as info:
        sampler.obtain_samples(1)
    message = str(info.value)
    assert (f"Sampler worker 1 (pid {pid}) timed out: it is alive (process status: stopped) "
            f"but {_silence(SamplerCls)} within 2 s; it was waiting for a command (its last "
            f"command was for iteration 0).") in message, message
    assert "Sampler worker 0" not in message
    assert "sampler.worker_timeout=2 (seconds, fixed)" in message
    assert "--set sampler.worker_timeout=SECONDS" in message
    run.check_clean()


@pytest.mark.parametrize("SamplerCls", SAMPLERS)
def test_stopped_worker_mid_batch(run, SamplerCls):
    batch_T = 50
    sampler = run.start(SamplerCls, EnvCls=TickEnv, env_kwargs=dict(delay=0.02),
                        batch_T=batch_T)
    sampler.obtain_samples(0)
    pid = sampler.workers[1].pid
    sampler.worker_timeout = TIMEOUT_S
    in_batch = re.compile(r"at step (\d+) of 50 of the batch of iteration 1")
    stopped_at = []

    def stop_mid_batch():  # SIGSTOP worker 1 once it is well inside the batch of iteration 1
        give_up = time.monotonic() + 30
        while time.monotonic() < give_up:
            found = in_batch.search(sampler.worker_status(1))
            if found and 5 <= int(found.group(1)) <= 25:
                os.kill(pid, signal.SIGSTOP)
                stopped_at.append(found.group(0))
                return
            time.sleep(0.002)

    stopper = threading.Thread(target=stop_mid_batch, daemon=True)
    stopper.start()
    with pytest.raises(SamplerWorkerError) as info:
        sampler.obtain_samples(1)
    stopper.join(5)
    assert stopped_at, "the worker was never seen inside the batch"
    message = str(info.value)
    pattern = (rf"Sampler worker 1 \(pid {pid}\) timed out: it is alive \(process status: "
               rf"stopped\) but {re.escape(_silence(SamplerCls))} within 2 s; it was "
               r"(stepping environment 0 \(env rank 1\)|computing actions with its agent"
               r"|waiting for actions from the master) at step \d+ of 50 of the batch of "
               r"iteration 1\.")
    assert re.search(pattern, message), message
    run.check_clean()


@pytest.mark.parametrize("SamplerCls", SAMPLERS)
def test_env_step_that_never_returns(run, SamplerCls):
    # Env seeded 1 (env rank 1: worker 1's only env) hangs on its 6th step: the second step
    # of the second batch.
    sampler = run.start(SamplerCls, EnvCls=HangingStepEnv,
                        env_kwargs=dict(hang_after=6, hang_seed=1), batch_T=4)
    sampler.obtain_samples(0)
    pid = sampler.workers[1].pid
    sampler.worker_timeout = TIMEOUT_S
    with pytest.raises(SamplerWorkerError) as info:
        sampler.obtain_samples(1)
    message = str(info.value)
    assert (f"Sampler worker 1 (pid {pid}) timed out: it is alive (process status: sleeping) "
            f"but {_silence(SamplerCls)} within 2 s; it was stepping environment 0 (env rank 1) "
            f"at step 2 of 4 of the batch of iteration 1.") in message, message
    run.check_clean()


@pytest.mark.parametrize("SamplerCls", SAMPLERS)
def test_worker_stuck_building_its_environments(run, SamplerCls):
    with pytest.raises(SamplerWorkerError) as info:
        run.start(SamplerCls, EnvCls=HangingInWorkerEnv, env_kwargs={}, batch_T=4,
                  worker_timeout=3.0)
    message = str(info.value)
    for i in (0, 1):
        assert re.search(rf"Sampler worker {i} \(pid \d+\) timed out: it is alive \(process "
                         r"status: sleeping\) but sent no 'ready' reply within 3 s; it was "
                         r"building its environments\.", message), message
    run.check_clean()


@pytest.mark.parametrize("SamplerCls", [CpuSampler, GpuSampler])
def test_eval_env_step_that_never_returns(run, SamplerCls):
    # Eval env 1 (worker 1's only eval env, seeded seed + EVAL_ENV_SEED_OFFSET + 1) hangs on
    # its third step; each eval env may take 20 / 2 = 10 steps.
    sampler = run.start(SamplerCls, EnvCls=HangingStepEnv, env_kwargs=dict(hang_after=10**9),
                        eval_env_kwargs=dict(hang_after=3, hang_seed=EVAL_ENV_SEED_OFFSET + 1),
                        eval_n_envs=2, eval_max_steps=20, batch_T=4)
    sampler.obtain_samples(0)
    pid = sampler.workers[1].pid
    sampler.worker_timeout = TIMEOUT_S
    with pytest.raises(SamplerWorkerError) as info:
        sampler.evaluate_agent(0)
    message = str(info.value)
    assert (f"Sampler worker 1 (pid {pid}) timed out: it is alive (process status: sleeping) "
            f"but {_silence(SamplerCls)} within 2 s; it was evaluating (iteration 0), step 3 "
            f"of at most 10: stepping eval environment 0 (eval env 1).") in message, message
    run.check_clean()


def test_worker_status_while_healthy(run):
    sampler = run.start(CpuSampler, EnvCls=TickEnv, env_kwargs={}, batch_T=4)
    assert _settles_on(sampler, 0, "waiting for a command (before its first command)")
    sampler.obtain_samples(3)
    assert _settles_on(sampler, 1, "waiting for a command (its last command was for iteration 3)")
    sampler.shutdown()
    run.check_clean()


# ---- the timeout setting ----------------------------------------------------------------------
def test_auto_timeout_is_generous_and_scales():
    timeouts = WorkerTimeout(batch_T=64)
    # Nothing measured yet: the startup, the first batch and an early evaluation get 300 s.
    assert AUTO_UNMEASURED_S == 300 and AUTO_MIN_S == 60
    assert timeouts.startup("auto").seconds == 300
    assert timeouts.batch("auto").seconds == 300
    assert timeouts.evaluation("auto", eval_max_T=6400).seconds == 300
    timeouts.record_batch(0.05)
    assert timeouts.batch("auto").seconds == 60  # 10 x 0.05 s, but never below a minute
    timeouts.record_batch(12.0)
    timeouts.record_batch(3.0)
    batch = timeouts.batch("auto")
    assert batch.seconds == 120  # 10 x the slowest batch
    assert "10 x the slowest batch so far (12 s), at least 60 s" in batch.reason
    assert "--set sampler.worker_timeout=SECONDS" in batch.reason
    assert "sampler.worker_timeout=off" in batch.reason
    # Evaluation: the batch time scaled by eval steps per env over batch steps (640 / 64).
    evaluation = timeouts.evaluation("auto", eval_max_T=640)
    assert evaluation.seconds == pytest.approx(1200)
    assert "max(1, 640 eval steps / 64 batch steps)" in evaluation.reason
    assert timeouts.evaluation("auto", eval_max_T=8).seconds == 120  # never below a batch's
    timeouts.record_evaluation(500.0)  # a measured evaluation, when slower, wins
    assert timeouts.evaluation("auto", eval_max_T=640).seconds == pytest.approx(5000)
    assert timeouts.startup("auto").seconds == 300


def test_fixed_timeout_is_exact_for_every_wait():
    timeouts = WorkerTimeout(batch_T=4)
    timeouts.record_batch(100.0)
    for deadline in (timeouts.startup(7.5), timeouts.batch(7.5), timeouts.evaluation(7.5, 99)):
        assert deadline.seconds == 7.5
        assert "sampler.worker_timeout=7.5 (seconds, fixed)" in deadline.reason


@pytest.mark.parametrize("value", [None, "off", "OFF", "none", 0, False])
def test_off_means_no_timeout(value):
    setting = parse_worker_timeout(value)
    assert setting is None
    timeouts = WorkerTimeout(batch_T=4)
    timeouts.record_batch(0.01)
    for deadline in (timeouts.startup(setting), timeouts.batch(setting),
                     timeouts.evaluation(setting, 10)):
        assert deadline.seconds is None and deadline.remaining() is None
        assert not deadline.expired()
    sampler = SerialSampler(EnvCls=TickEnv, env_kwargs={}, batch_T=4, batch_B=1,
                            worker_timeout=value)
    assert sampler.worker_timeout is None


def test_bad_settings_are_rejected():
    with pytest.raises(ValueError, match="worker_timeout must be 'auto'"):
        WorkerTimeout(batch_T=4).batch("soon")
    with pytest.raises(ValueError, match="worker_timeout must be 'auto'"):
        WorkerTimeout(batch_T=4).startup(-1.0)


def test_sampler_without_timeout_runs(run):
    sampler = run.start(GpuSampler, EnvCls=TickEnv, env_kwargs={}, batch_T=4,
                        worker_timeout="off")
    assert sampler.worker_timeout is None
    samples, _ = sampler.obtain_samples(0)
    assert samples.env.observation.shape[:2] == (4, 2)
    sampler.shutdown()
    run.check_clean()
