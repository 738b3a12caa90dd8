"""Faults in an asynchronous run (``AsyncRlEval``): a sampler worker that raises, a sampler
process killed outright, Ctrl-C to the master, a replay copier process that raises.

Each case asserts all of:

- the error (its text checked: the failing process's traceback, or that it died) or, for
  Ctrl-C, a clean exit, within 30 s of the fault;
- no process left: every descendant of the run, recorded while it was alive (a thread polls
  ``psutil`` for the whole process tree, and every environment writes its pid to a
  directory, so the sampler's workers, the master's grandchildren, are covered too), is gone
  shortly after, and this process has no child left;
- no new ``/dev/shm`` entry.

The in-process cases run the master in the test process; the Ctrl-C case runs it in a
subprocess (_async_fault_run.py, which installs the default SIGINT handler itself) and sends
SIGINT to the master alone: the children ignore SIGINT, so the master must stop them.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from rlfast.algos import DQN
from rlfast.runners import AsyncRunError
from tests.integration._async_fault_envs import make_async_fault_env, wait_for_marker
from tests.integration._async_helpers import (SMALL_DQN, DescendantRecorder, new_shm_entries,
                                              pid_alive, shm_entries, small_dqn_runner,
                                              wait_pids_gone)
from tests.integration._guards import live_children, watchdog  # noqa: F401 - fixture
from tests.learning._configs import train

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
AFTER_FAULT_S = 30.0   # the acceptance bound: error or clean exit within 30 s of the fault
REACH_FAULT_S = 120.0  # startup on a loaded 2-core machine, then a few hundred env steps
HANG_GUARD_S = 240


def _pid_files(pid_dir) -> set:
    return {int(name) for name in os.listdir(pid_dir)}


def _assert_no_process_left(recorder: DescendantRecorder, pid_dir, extra=()) -> None:
    """Every recorded descendant and every environment process is gone (zombies count as
    gone), and this process has no child left."""
    pids = (set(recorder.pids) | _pid_files(pid_dir) | set(extra)) - {os.getpid()}
    left = wait_pids_gone(pids, timeout=5.0)
    assert left == [], f"processes left behind: {left} (of {sorted(pids)})"
    assert live_children() == []


def _fault_runner(tmp_path, sampler="cpu", **env_kwargs):
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    runner = small_dqn_runner(sampler, n_steps=10_000_000, log_interval_steps=1_600,
                              EnvCls=make_async_fault_env,
                              env_kwargs=dict(pid_dir=str(pid_dir), **env_kwargs))
    return runner, pid_dir


def test_worker_raise_ends_run_with_its_traceback(tmp_path, watchdog):  # noqa: F811
    """A training environment in one of the AsyncCpuSampler's two workers raises at its 200th
    step: the run raises AsyncRunError carrying the worker's traceback."""
    watchdog(HANG_GUARD_S)
    assert live_children() == []
    before = shm_entries()
    marker = str(tmp_path / "fault.marker")
    runner, pid_dir = _fault_runner(tmp_path, raise_at=200, marker=marker)
    with DescendantRecorder() as recorder:
        with pytest.raises(AsyncRunError) as caught:
            train(runner, tmp_path / "run", "worker_raise")
        ended = time.time()
    fault_time, fault_pid = wait_for_marker(marker, timeout=1.0)
    message = str(caught.value)
    print(f"fault in pid {fault_pid}; error after {ended - fault_time:.2f} s:\n{message}")
    assert ended - fault_time < AFTER_FAULT_S
    # The worker's traceback, relayed by the sampler process: the raising frame, its message.
    assert "injected async fault: env.step raised at step 200" in message
    assert f"in pid {fault_pid}" in message
    assert "_async_fault_envs.py" in message and "in step" in message
    assert "Traceback" in message
    assert "Async sampler process" in message and "Sampler worker" in message
    # The environment ran in a worker, a grandchild of this process, which was seen alive.
    workers = _pid_files(pid_dir) - {os.getpid()}
    assert fault_pid in workers and len(workers) >= 2, workers
    assert workers <= recorder.pids, (workers, recorder.pids)
    _assert_no_process_left(recorder, pid_dir)
    assert new_shm_entries(before) == []


def test_sampler_process_sigkill_ends_run(tmp_path, watchdog):  # noqa: F811
    """SIGKILL to the sampler process mid-run (from a thread, once a training environment
    reached step 300): AsyncRunError saying it died; its two workers, orphaned, are ended."""
    watchdog(HANG_GUARD_S)
    assert live_children() == []
    before = shm_entries()
    marker = str(tmp_path / "run.marker")
    runner, pid_dir = _fault_runner(tmp_path, mark_at=300, marker=marker)
    killed = {}

    def kill_sampler():
        try:
            wait_for_marker(marker, timeout=REACH_FAULT_S)
        except (TimeoutError, RuntimeError) as exc:
            killed["error"] = repr(exc)
            return
        process = runner.children.supervisor.processes[0]
        killed["pid"] = process.pid
        killed["workers"] = [p.pid for p in psutil.Process(process.pid).children()]
        killed["time"] = time.time()
        os.kill(process.pid, signal.SIGKILL)

    killer = threading.Thread(target=kill_sampler, daemon=True)
    with DescendantRecorder() as recorder:
        killer.start()
        with pytest.raises(AsyncRunError) as caught:
            train(runner, tmp_path / "run", "sampler_sigkill")
        ended = time.time()
    killer.join(5)
    assert "time" in killed, killed
    message = str(caught.value)
    print(f"killed sampler pid {killed['pid']} (workers {killed['workers']}); error after "
          f"{ended - killed['time']:.2f} s:\n{message}")
    assert ended - killed["time"] < AFTER_FAULT_S
    assert "Async sampler process" in message and "died" in message
    assert "exit code -9" in message
    # The sampler's two workers were alive under it, and are gone now.
    assert len(killed["workers"]) == 2 and set(killed["workers"]) <= _pid_files(pid_dir)
    _assert_no_process_left(recorder, pid_dir, extra=[killed["pid"], *killed["workers"]])
    assert new_shm_entries(before) == []


class _FailingCopyDQN(DQN):
    """DQN whose ``samples_to_buffer`` raises at its ``fail_at``-th call (counted in the process
    that calls it: the replay copier, with ``copier="process"``)."""

    def __init__(self, fail_at: int, **kwargs):
        super().__init__(**kwargs)
        self.fail_at = fail_at
        self.copies = 0

    def samples_to_buffer(self, samples):
        self.copies += 1
        if self.copies == self.fail_at:
            with open(self.marker, "w") as f:
                f.write(f"{time.time()} {os.getpid()}\n")
            raise RuntimeError(f"injected copier fault at batch {self.copies}")
        return super().samples_to_buffer(samples)


def test_copier_process_raise_ends_run_with_its_traceback(tmp_path, watchdog):  # noqa: F811
    """The replay copier process raises in its 20th ``samples_to_buffer``: AsyncRunError with
    the copier's traceback."""
    watchdog(HANG_GUARD_S)
    assert live_children() == []
    before = shm_entries()
    algo = _FailingCopyDQN(fail_at=20, **SMALL_DQN)
    algo.marker = str(tmp_path / "copier.marker")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    runner = small_dqn_runner("cpu", n_steps=10_000_000, log_interval_steps=1_600,
                              copier="process", algo=algo, EnvCls=make_async_fault_env,
                              env_kwargs=dict(pid_dir=str(pid_dir)))
    with DescendantRecorder() as recorder:
        with pytest.raises(AsyncRunError) as caught:
            train(runner, tmp_path / "run", "copier_raise")
        ended = time.time()
    fault_time, copier_pid = wait_for_marker(algo.marker, timeout=1.0)
    message = str(caught.value)
    print(f"copier pid {copier_pid}; error after {ended - fault_time:.2f} s:\n{message}")
    assert ended - fault_time < AFTER_FAULT_S
    assert "Replay copier process" in message and f"pid {copier_pid}" in message
    assert "injected copier fault at batch 20" in message
    assert "Traceback" in message and "in samples_to_buffer" in message
    assert algo.copies == 0  # the master never copied: the copier process did
    assert copier_pid != os.getpid() and copier_pid in recorder.pids
    _assert_no_process_left(recorder, pid_dir, extra=[copier_pid])
    assert new_shm_entries(before) == []


def _session_processes(sid: int) -> list:
    found = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getsid(proc.pid) == sid:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            continue
    return found


def test_sigint_to_master_stops_every_process(tmp_path, watchdog):  # noqa: F811
    """Ctrl-C (SIGINT to the master process alone) mid-run: KeyboardInterrupt reaches the
    script, which exits with 130; the sampler process and its workers are gone."""
    watchdog(HANG_GUARD_S)
    before = shm_entries()
    marker = str(tmp_path / "run.marker")
    pid_dir = tmp_path / "pids"
    pid_dir.mkdir()
    env = dict(os.environ, PYTHONPATH=REPO + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out_path = tmp_path / "output.txt"
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "tests.integration._async_fault_run", str(tmp_path / "run"),
             marker, str(pid_dir)], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True)
    try:
        with DescendantRecorder(root=proc.pid) as recorder:
            try:
                wait_for_marker(marker, timeout=REACH_FAULT_S,
                                alive=lambda: proc.poll() is None)
            except (TimeoutError, RuntimeError) as exc:
                pytest.fail(f"{exc}:\n{out_path.read_text(errors='replace')[-3000:]}")
            time.sleep(0.5)  # training under way: batches flowing, updates running
            alive_before = [pid for pid in recorder.snapshot() if pid_alive(pid)]
            sent = time.time()
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=AFTER_FAULT_S)
            except subprocess.TimeoutExpired:
                pass
            elapsed = time.time() - sent
        output = out_path.read_text(errors="replace")
        assert proc.poll() is not None, f"still running {elapsed:.0f} s after SIGINT:\n" \
                                        + output[-3000:]
        print(f"exit {proc.returncode} {elapsed:.2f} s after SIGINT; descendants alive before: "
              f"{alive_before}")
        assert elapsed < AFTER_FAULT_S
        assert proc.returncode == 130, output[-3000:]
        assert "ASYNC-RUN: KeyboardInterrupt" in output, output[-3000:]
        assert "Training interrupted by Ctrl-C" in output, output[-3000:]
        assert "Training complete." not in output and "ASYNC-RUN: finished" not in output
        # The sampler process and its two workers were running under the master.
        workers = _pid_files(pid_dir) - {proc.pid}
        assert len(alive_before) >= 3 and workers <= set(alive_before), (alive_before, workers)
        left = wait_pids_gone(recorder.pids | workers, timeout=5.0)
        session_left = _session_processes(proc.pid)
        assert left == [] and session_left == [], (left, session_left)
        assert new_shm_entries(before) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in _session_processes(proc.pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
