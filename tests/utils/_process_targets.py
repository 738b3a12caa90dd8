"""Child bodies for tests/utils/test_processes.py (module level, so `spawn` finds them)."""
from __future__ import annotations

import os
import signal
import time

from rlfast.utils.processes import StopChild


def echo(conn, tag: str) -> None:
    """Reply ``("ready", tag)``, then answer each ``("add", x)`` with ``("done", x + 1)``."""
    conn.send(("ready", (tag, os.getpid())))
    while True:
        try:
            message = conn.recv()
        except EOFError:
            return
        if message[0] == "quit":
            return
        if message[0] == "raise":
            raise ValueError(f"child {tag} failed: {message[1]}")
        if message[0] == "die":
            os._exit(7)
        if message[0] == "stop_quietly":
            raise StopChild()
        conn.send(("done", message[1] + 1))


def ignores_quit(conn) -> None:
    """Ready, then ignore SIGTERM and every message: only SIGKILL ends it."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    conn.send(("ready", os.getpid()))
    while True:
        time.sleep(0.05)


def wrong_reply(conn) -> None:
    conn.send(("surprise", None))
    time.sleep(30)


def slow_ready(conn, delay: float) -> None:
    """Reply ``("ready", pid)`` only after ``delay`` seconds, then wait for "quit"."""
    time.sleep(delay)
    conn.send(("ready", os.getpid()))
    while True:
        try:
            if conn.recv()[0] == "quit":
                return
        except EOFError:
            return


def sleeps_forever(conn) -> None:
    """Ready, then sleep without ever reading the pipe (a child stuck in a long call)."""
    conn.send(("ready", os.getpid()))
    time.sleep(1e6)
