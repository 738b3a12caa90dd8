"""Worker-kill scenarios, each run in a fresh Python process by the integration tests.

``python -m tests.integration._scenarios NAME DEADLINE`` (from the repository root, in a new
session) runs one scenario and prints one line ``RESULT <json>``. If the sampler call under
test has not returned ``DEADLINE`` seconds after the kill, the scenario reports a hang and
kills its own process group (itself and every sampler worker), so a deadlock in the library
becomes an ordinary test failure and leaves no orphaned worker behind.
"""
import json
import os
import signal
import sys
import threading
import time

import psutil

from rlfast.agents import RandomAgent
from rlfast.samplers import CpuSampler, SamplerWorkerError
from tests.integration._failing_envs import BoomEnv, SlowEnv

TWO_WORKERS = dict(workers_cpus=[[0], [1]])


def _report(result: dict) -> None:
    sys.stdout.write("RESULT " + json.dumps(result) + "\n")
    sys.stdout.flush()


def _arm_deadline(seconds: float) -> threading.Timer:
    def hang():
        _report(dict(error=["Hang", f"no result {seconds} s after the kill"], children=None))
        if os.getpgrp() == os.getpid():  # started in its own session by the test: the group
            os.killpg(0, signal.SIGKILL)  # is this scenario and its workers only
        for child in psutil.Process().children(recursive=True):
            child.kill()
        os._exit(70)

    timer = threading.Timer(seconds, hang)
    timer.daemon = True
    timer.start()
    return timer


def _call(fn):
    try:
        fn()
    except SamplerWorkerError as err:
        return ["SamplerWorkerError", str(err)]
    except BaseException as err:  # noqa: BLE001 - reported to the test
        return [type(err).__name__, str(err)]
    return None


def kill_idle_worker(deadline: float) -> dict:
    """Kill a worker while it waits for its next command, then ask for a batch."""
    sampler = CpuSampler(EnvCls=BoomEnv, env_kwargs=dict(fail_after=10 ** 6), batch_T=4,
                         batch_B=2, max_decorrelation_steps=0)
    sampler.initialize(RandomAgent(), seed=0, affinity=TWO_WORKERS)
    sampler.obtain_samples(0)
    time.sleep(0.5)  # both workers are now blocked waiting for the next batch
    pids = [p.pid for p in sampler.workers]
    os.kill(pids[0], signal.SIGKILL)
    timer = _arm_deadline(deadline)
    error = _call(lambda: sampler.obtain_samples(1))
    sampler.shutdown()
    timer.cancel()
    return dict(error=error, children=[c.pid for c in psutil.Process().children(recursive=True)],
                workers=pids)


def kill_busy_worker(deadline: float) -> dict:
    """Kill a worker in the middle of a batch (while it steps its slow env)."""
    sampler = CpuSampler(EnvCls=SlowEnv, env_kwargs=dict(delay=0.05), batch_T=16, batch_B=2,
                         max_decorrelation_steps=0)
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
    return dict(error=error, children=[c.pid for c in psutil.Process().children(recursive=True)],
                workers=pids)


if __name__ == "__main__":
    _report(globals()[sys.argv[1]](float(sys.argv[2])))
