"""Waiting on and stopping the child processes of a sweep: the local launcher's runs and a
Slurm job's training command.

:class:`ChildWatcher` blocks until one of several children exits (no polling);
:func:`stop_children` ends children together with everything they started.
"""
from __future__ import annotations

import multiprocessing.connection
import os
import subprocess
import threading
import time

import psutil

__all__ = ["ChildWatcher", "stop_children", "kill_after_grace", "TERMINATE_GRACE_S"]

TERMINATE_GRACE_S = 5.0


class ChildWatcher:
    """Blocking wait for whichever of several Popen children exits first.

    Each child gets a file descriptor that becomes readable when it exits: a Linux pidfd,
    or else the read end of a pipe written by a thread blocked in ``Popen.wait``. Waiting
    is one ``multiprocessing.connection.wait`` on those descriptors.
    """

    def __init__(self) -> None:
        self._fds: dict[int, subprocess.Popen] = {}

    def add(self, proc: subprocess.Popen) -> None:
        """Watch ``proc`` until it has been returned by :meth:`wait_any`."""
        try:
            fd = os.pidfd_open(proc.pid)
        except (AttributeError, OSError):
            fd, write_fd = os.pipe()

            def _notify() -> None:
                proc.wait()
                try:
                    os.write(write_fd, b"x")
                except OSError:
                    pass  # the watcher was closed first
                finally:
                    os.close(write_fd)
            threading.Thread(target=_notify, daemon=True).start()
        self._fds[fd] = proc

    def wait_any(self) -> list[subprocess.Popen]:
        """Block until at least one child exits; reap and return the exited ones."""
        ready = multiprocessing.connection.wait(list(self._fds))
        done = []
        for fd in ready:
            proc = self._fds.pop(fd)
            proc.wait()
            os.close(fd)
            done.append(proc)
        return done

    def close(self) -> None:
        """Stop watching (the children are left running)."""
        for fd in self._fds:
            os.close(fd)
        self._fds.clear()


def stop_children(procs: list[subprocess.Popen]) -> None:
    """Stop child processes and everything they started: SIGTERM each child and its
    descendants, wait up to ``TERMINATE_GRACE_S`` in all, then SIGKILL whatever is still
    running, and reap the children."""
    descendants = []
    for proc in procs:
        try:
            descendants.extend(psutil.Process(proc.pid).children(recursive=True))
        except psutil.Error:
            pass
    for p in [*procs, *descendants]:
        try:
            p.terminate()
        except (OSError, psutil.Error):
            pass
    deadline = time.monotonic() + TERMINATE_GRACE_S
    for proc in procs:
        try:
            proc.wait(timeout=max(deadline - time.monotonic(), 0.01))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    kill_after_grace(descendants, max(deadline - time.monotonic(), 0.01))


def kill_after_grace(procs: list, grace_s: float) -> None:
    """Wait up to ``grace_s`` for ``psutil`` processes (already sent SIGTERM) to end, then
    SIGKILL whatever still runs and reap it."""
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for p in alive:
        try:
            p.kill()
        except psutil.Error:
            pass
    psutil.wait_procs(alive, timeout=1.0)
