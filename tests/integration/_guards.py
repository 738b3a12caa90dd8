"""Hang guard and child-process accounting for the multi-process integration tests."""
import faulthandler
import os
import sys
import threading
from multiprocessing import resource_tracker

import psutil
import pytest


def _abort(seconds: float) -> None:
    err = sys.__stderr__  # pytest captures sys.stderr; this must reach the terminal
    err.write(f"\nintegration watchdog: test still running after {seconds} s; "
              "killing child processes and exiting\n")
    err.flush()
    faulthandler.dump_traceback(file=err, all_threads=True)
    for child in psutil.Process().children(recursive=True):
        try:
            child.kill()
        except psutil.Error:
            pass
    os._exit(70)


@pytest.fixture
def watchdog():
    """``watchdog(seconds)`` arms a timer that kills the test process (and its children) if
    the test has not finished by then, so a hang fails loudly instead of blocking the suite."""
    timers = []

    def arm(seconds: float) -> None:
        timer = threading.Timer(seconds, _abort, args=(seconds,))
        timer.daemon = True
        timer.start()
        timers.append(timer)

    yield arm
    for timer in timers:
        timer.cancel()


def live_children() -> list:
    """Pids of this process's descendants, ignoring multiprocessing's resource tracker (a
    session-long helper started by any ``spawn`` in the same test session)."""
    tracker_pid = getattr(resource_tracker._resource_tracker, "_pid", None)
    pids = []
    for child in psutil.Process().children(recursive=True):
        if child.pid == tracker_pid:
            continue
        pids.append(child.pid)
    return pids


def session_pids(sid: int) -> list:
    """Live (non-zombie) processes of session ``sid`` (a command started with
    ``start_new_session=True``: its session id is its pid)."""
    found = []
    for proc in psutil.process_iter(["pid", "status"]):
        try:
            if os.getsid(proc.pid) == sid and proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append(proc.pid)
        except (ProcessLookupError, PermissionError, psutil.Error):
            pass
    return found
