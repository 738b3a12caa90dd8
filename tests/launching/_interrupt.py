"""Ctrl-C for the launcher tests: a SIGINT to this process once every run has started."""
import os
import signal
import threading
import time


def sigint_when_all_exist(paths, timeout: float = 60.0) -> threading.Thread:
    """Start (and return) a thread that sends this process SIGINT once every file in
    ``paths`` exists (each run writes one when it starts), or after ``timeout`` seconds."""

    def interrupt_when_started():
        deadline = time.monotonic() + timeout
        while not all(p.exists() for p in paths) and time.monotonic() < deadline:
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGINT)

    thread = threading.Thread(target=interrupt_when_started, daemon=True)
    thread.start()
    return thread
