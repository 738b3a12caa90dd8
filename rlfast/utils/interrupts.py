"""SIGTERM as an exception: how a run that is told to stop gets to clean up first.

Batch systems (Slurm, Kubernetes, ``timeout``) send SIGTERM some time before they kill.
Python's default action for SIGTERM ends the process at once, skipping every ``finally``:
no final snapshot, sampler workers left to notice on their own. ``SigtermGuard`` turns
the signal into ``TrainingInterrupted`` (a ``KeyboardInterrupt``, so code that already
cleans up after Ctrl-C does the same here) while a runner trains.
"""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType
from typing import Any


class TrainingInterrupted(KeyboardInterrupt):
    """Training was stopped by a signal; ``signum`` says which (``signal.SIGTERM``).

    A ``KeyboardInterrupt`` subclass: it is not an error in the program, and handlers for
    Ctrl-C apply to it too. The command line exits with ``128 + signum`` (143 for SIGTERM).
    """

    def __init__(self, signum: int = signal.SIGTERM):
        self.signum = int(signum)
        super().__init__(f"interrupted by {signal_name(self.signum)}")

    def __reduce__(self) -> tuple:
        return type(self), (self.signum,)


def signal_name(signum: int) -> str:
    """``"SIGTERM"`` for 15, ``"signal 99"`` for a number with no name here."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


class SigtermGuard:
    """While active, the first SIGTERM raises ``TrainingInterrupted`` in the main thread.

    Later SIGTERMs are only recorded, so cleanup after the first one is not cut short;
    after ``defer()`` even the first one is only recorded. ``received`` holds the first
    signal number (or None). A forked child process that inherited the handler gets the
    default action (it terminates), as if no guard were installed. The guard does nothing
    outside the main thread, where Python cannot install signal handlers. On exit the
    previous handler is restored.
    """

    def __init__(self) -> None:
        self.received: int | None = None
        self.installed = False
        self._previous: Any = None
        self._owner_pid = os.getpid()
        self._deferring = False
        self._holding = False
        self._held_sigint = False

    def __enter__(self) -> "SigtermGuard":
        if threading.current_thread() is threading.main_thread():
            self._owner_pid = os.getpid()
            self._previous = signal.signal(signal.SIGTERM, self._handle)
            self.installed = True
        return self

    def __exit__(self, *exc_info: Any) -> None:
        if self.installed:
            previous = self._previous if self._previous is not None else signal.SIG_DFL
            signal.signal(signal.SIGTERM, previous)
            self.installed = False

    def defer(self) -> None:
        """From now on only record SIGTERM (in ``received``), for work that must not be cut
        in half, such as stopping the sampler's workers."""
        self._deferring = True

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        """Hold SIGTERM and Ctrl-C (SIGINT) for a block that must finish whole, such as a
        log row and the snapshot that goes with it: a signal that arrives meanwhile is
        recorded and raised (``TrainingInterrupted`` or ``KeyboardInterrupt``) when the block
        ends. An ignored SIGINT (a background shell) stays ignored."""
        if not self.installed or threading.current_thread() is not threading.main_thread():
            yield
            return
        previous_int = signal.getsignal(signal.SIGINT)
        hold_int = previous_int not in (signal.SIG_IGN, None)
        if hold_int:
            signal.signal(signal.SIGINT, self._hold_sigint)
        self._holding = True
        try:
            yield
        except Exception as error:  # a signal held meanwhile caused it (workers told to stop)
            if self._held_sigint or (self.received is not None and not self._deferring):
                raise self._held_interrupt() from error
            raise
        finally:
            self._holding = False
            if hold_int:
                signal.signal(signal.SIGINT, previous_int)
        if self._held_sigint or (self.received is not None and not self._deferring):
            raise self._held_interrupt()

    def _held_interrupt(self) -> KeyboardInterrupt:
        if self._held_sigint:
            self._held_sigint = False
            return KeyboardInterrupt()
        return TrainingInterrupted(self.received)

    def _hold_sigint(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner_pid:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self._held_sigint = True

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        if os.getpid() != self._owner_pid:  # a forked child: behave as if not installed
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        if self.received is not None:
            return  # already stopping
        self.received = signum
        if not self._deferring and not self._holding:
            raise TrainingInterrupted(signum)
