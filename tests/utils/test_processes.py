"""The process supervisor (rlfast.utils.processes) with real child processes and pipes."""
from __future__ import annotations

import gc
import os
import signal
import threading
import time

import psutil
import pytest

from rlfast.utils.processes import (ChildFailedError, Deadline, ProcessSupervisor, StopChild,
                                    acquire_while_parent_alive, mp_context)
from tests.utils import _process_targets as targets


def _gone(pids, timeout=5.0) -> bool:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE
                   for p in pids):
            return True
        time.sleep(0.05)
    return False


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_start_gather_send_and_stop(start_method):
    sup = ProcessSupervisor(label="Echo", start_method=start_method)
    sup.start(targets.echo, [dict(tag="a"), dict(tag="b"), dict(tag="c")], name="echo")
    try:
        ready = sup.gather("ready")
        assert [tag for tag, _ in ready] == ["a", "b", "c"]
        pids = [pid for _, pid in ready]
        assert pids == [p.pid for p in sup.processes]
        assert [p.name for p in sup.processes] == ["echo-0", "echo-1", "echo-2"]
        sup.send_all(("add", 41))
        assert sup.gather("done") == [42, 42, 42]
        sup.send_all(("add", 1), indexes=[1])
        # Only child 1 was asked: gather over a one-child supervisor view is not needed here;
        # read its pipe directly.
        assert sup.conns[1].recv() == ("done", 2)
    finally:
        sup.stop()
    assert sup.processes == [] and sup.conns == []
    assert _gone(pids)
    sup.stop()  # idempotent


def test_child_traceback_reaches_parent_and_everyone_stops():
    sup = ProcessSupervisor(label="Echo")
    sup.start(targets.echo, [dict(tag="a"), dict(tag="b")])
    pids = [pid for _, pid in sup.gather("ready")]
    sup.send_all(("raise", "boom-55"), indexes=[1])
    sup.send_all(("add", 0), indexes=[0])
    with pytest.raises(ChildFailedError) as info:
        sup.gather("done")
    message = str(info.value)
    assert "Echo 1" in message and "ValueError: child b failed: boom-55" in message
    assert "Traceback" in message
    assert sup.processes == [] and _gone(pids)


def test_child_death_without_traceback_is_reported():
    sup = ProcessSupervisor(label="Worker", error_cls=KeyError)
    sup.start(targets.echo, [dict(tag="a")])
    pids = [pid for _, pid in sup.gather("ready")]
    sup.send_all(("die",))
    with pytest.raises(KeyError, match="Worker 0 died \\(exit code 7\\)"):
        sup.gather("done")
    assert _gone(pids)


def test_check_alive_reports_a_dead_child():
    sup = ProcessSupervisor(label="Worker")
    sup.start(targets.echo, [dict(tag="a"), dict(tag="b")])
    pids = [pid for _, pid in sup.gather("ready")]
    sup.check_alive()  # all alive: nothing raised
    psutil.Process(pids[0]).kill()
    sup.processes[0].join(5)
    with pytest.raises(ChildFailedError, match="Worker 0 died"):
        sup.check_alive()
    assert _gone(pids)


def test_unexpected_reply_is_an_error():
    # The child ignores "quit" (it sleeps): a short grace period before it is killed.
    sup = ProcessSupervisor(label="Worker", join_s=0.5)
    sup.start(targets.wrong_reply, [dict()])
    with pytest.raises(ChildFailedError, match="replied 'surprise', expected 'ready'"):
        sup.gather("ready")
    assert sup.processes == []


def test_stop_child_leaves_quietly():
    sup = ProcessSupervisor()
    sup.start(targets.echo, [dict(tag="a")])
    sup.gather("ready")
    proc = sup.processes[0]
    sup.send_all(("stop_quietly",))
    proc.join(5)
    assert proc.exitcode == 0
    with pytest.raises(EOFError):  # the child closed its end without sending an error
        sup.conns[0].recv()
    sup.stop()


def test_stragglers_are_killed():
    sup = ProcessSupervisor(join_s=0.5)
    sup.start(targets.ignores_quit, [dict(), dict()])
    pids = sup.gather("ready")
    t0 = time.monotonic()
    sup.stop()
    assert time.monotonic() - t0 < 10
    assert _gone(pids)


class _Owner:
    pass


def test_finalizer_stops_children_of_a_dropped_owner():
    owner = _Owner()
    sup = ProcessSupervisor()
    sup.start(targets.echo, [dict(tag="a"), dict(tag="b")], owner=owner)
    pids = [pid for _, pid in sup.gather("ready")]
    del owner
    gc.collect()
    assert _gone(pids)
    assert sup.processes == []


def test_parent_death_reads_as_eof_in_the_child():
    """Each child closes the parent's pipe ends, so closing them in the parent ends the child."""
    sup = ProcessSupervisor()
    sup.start(targets.echo, [dict(tag="a")])
    pid = sup.gather("ready")[0][1]
    for conn in sup.conns:
        conn.close()
    assert _gone([pid])
    sup.conns.clear()
    sup.stop()


def test_bad_start_method_and_double_start():
    with pytest.raises(ValueError, match="start method 'no-such'"):
        mp_context("no-such")
    sup = ProcessSupervisor()
    sup.start(targets.echo, [dict(tag="a")])
    try:
        with pytest.raises(RuntimeError, match="already started"):
            sup.start(targets.echo, [dict(tag="b")])
    finally:
        sup.stop()


def test_acquire_while_parent_alive_honours_stop_flag():
    ctx = mp_context()
    sem, flag = ctx.Semaphore(0), ctx.RawValue("b", False)
    threading.Timer(0.1, lambda: setattr(flag, "value", True)).start()
    with pytest.raises(StopChild):
        acquire_while_parent_alive(sem, os.getppid(), flag, poll_s=0.05)
    sem.release()
    acquire_while_parent_alive(sem, os.getppid(), flag, poll_s=0.05)  # available: returns
    with pytest.raises(RuntimeError, match="parent process exited"):
        acquire_while_parent_alive(sem, -1, None, poll_s=0.05)


# ---- silent children: timeouts, stopped children, SIGTERM ------------------------------------
def test_gather_timeout_names_a_stopped_child():
    sup = ProcessSupervisor(label="Echo")
    sup.start(targets.echo, [dict(tag="a"), dict(tag="b"), dict(tag="c")])
    pids = [pid for _, pid in sup.gather("ready", timeout=60)]
    os.kill(pids[1], signal.SIGSTOP)
    sup.send_all(("add", 1))
    deadline = Deadline(1.0, "a test deadline; raise it with --more")
    with pytest.raises(ChildFailedError) as info:
        sup.gather("done", timeout=deadline, describe=lambda i: f"busy with task {i}")
    message = str(info.value)
    assert f"Echo 1 (pid {pids[1]}) timed out" in message
    assert "process status: stopped" in message
    assert "sent no 'done' reply within 1 s; it was busy with task 1." in message
    assert "Timeout of 1 s: a test deadline; raise it with --more." in message
    assert "Echo 0" not in message and "Echo 2" not in message  # they replied
    assert sup.processes == [] and _gone(pids)


def test_gather_timeout_in_seconds_names_every_silent_child():
    sup = ProcessSupervisor(label="Worker")
    sup.start(targets.sleeps_forever, [dict(), dict()])
    pids = sup.gather("ready")
    with pytest.raises(ChildFailedError) as info:
        sup.gather("done", timeout=0.5)
    message = str(info.value)
    assert f"Worker 0 (pid {pids[0]}) timed out" in message
    assert f"Worker 1 (pid {pids[1]}) timed out" in message
    assert "sent no 'done' reply within 0.5 s." in message
    assert sup.processes == [] and _gone(pids)


def test_gather_without_timeout_waits_for_a_slow_child():
    sup = ProcessSupervisor(label="Slow")
    sup.start(targets.slow_ready, [dict(delay=1.5), dict(delay=0.0)])
    try:
        assert len(sup.gather("ready", timeout=None)) == 2
    finally:
        sup.stop()


def test_stop_of_stopped_children_is_quick():
    """A stopped child reads nothing and acts on SIGTERM only once continued: stop() must
    not spend ``join_s`` on it (the old sequential joins took 2 x 20 s here)."""
    sup = ProcessSupervisor(join_s=20.0)
    sup.start(targets.echo, [dict(tag="a")])
    sup.gather("ready")
    sup2 = ProcessSupervisor(join_s=20.0)
    sup2.start(targets.sleeps_forever, [dict()])
    pids = [sup.processes[0].pid] + sup2.gather("ready")
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    t0 = time.monotonic()
    sup.stop()
    sup2.stop()
    assert time.monotonic() - t0 < 10
    assert _gone(pids)


def test_child_stopped_during_the_join_is_caught():
    """A SIGSTOP that lands while stop() is already waiting (or was sent just before it and
    has not taken effect yet) must not cost the rest of ``join_s`` either."""
    sup = ProcessSupervisor(join_s=20.0)
    sup.start(targets.sleeps_forever, [dict()])  # never reads the pipe: only SIGTERM ends it
    pid = sup.gather("ready")[0]
    timer = threading.Timer(0.5, os.kill, (pid, signal.SIGSTOP))
    timer.start()
    t0 = time.monotonic()
    try:
        sup.stop()
    finally:
        timer.join()
    assert time.monotonic() - t0 < 10
    assert _gone([pid])


def test_sigterm_makes_a_child_leave_quietly(capfd):
    sup = ProcessSupervisor()
    sup.start(targets.sleeps_forever, [dict()])
    pid = sup.gather("ready")[0]
    proc = sup.processes[0]
    os.kill(pid, signal.SIGTERM)
    proc.join(5)
    assert proc.exitcode == 0  # StopChild: a normal exit, not death by signal
    with pytest.raises(EOFError):  # and no error sent to the parent
        sup.conns[0].recv()
    sup.stop()
    assert "Traceback" not in capfd.readouterr().err


def test_deadline():
    never = Deadline(None)
    assert never.remaining() is None and not never.expired() and never.wait_s(1.0) == 1.0
    now = Deadline(0.0)
    assert now.expired() and now.remaining() == 0.0 and now.wait_s(1.0) == 0.0
    later = Deadline(100.0, "why")
    assert not later.expired() and 99 < later.remaining() <= 100 and later.wait_s(1.0) == 1.0
    assert Deadline.of(later) is later and Deadline.of(None).seconds is None
    assert Deadline.of(2).seconds == 2.0
    with pytest.raises(ValueError, match="seconds >= 0"):
        Deadline(-1)
