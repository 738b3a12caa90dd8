"""How every runner's ``train`` meets SIGTERM and Ctrl-C.

In the main thread, SIGTERM (sent by Slurm, Kubernetes or ``timeout`` before they kill)
raises ``TrainingInterrupted`` for the duration of a run, the previous handler being
restored afterwards. On it, or on Ctrl-C (``KeyboardInterrupt``), the run logs that it was
interrupted, saves a final snapshot when one is due, shuts down and re-raises; a signal
during a log row and its snapshot waits until both are written (:meth:`TrainingGuard.held`),
and one during the final shutdown is raised once the shutdown is complete.

``SigtermGuard``, ``TrainingInterrupted`` and ``signal_name`` live in
``rlfast.utils.interrupts`` (below every layer that trains, so the ES loop beside the
runners uses the same guard) and are importable from here as before.
"""
from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator
from typing import Any

from rlfast.utils.interrupts import SigtermGuard, TrainingInterrupted, signal_name
from rlfast.utils.logging import logger

__all__ = ["SigtermGuard", "TrainingGuard", "TrainingInterrupted", "describe_interrupt",
           "signal_name"]


def describe_interrupt(interrupt: KeyboardInterrupt) -> str:
    """``"Ctrl-C (SIGINT)"`` for a plain ``KeyboardInterrupt``, the signal's name (e.g.
    ``"SIGTERM"``) for ``TrainingInterrupted``."""
    signum = getattr(interrupt, "signum", signal.SIGINT)
    return "Ctrl-C (SIGINT)" if signum == signal.SIGINT else signal_name(signum)


class TrainingGuard:
    """Guards a runner's training under a :class:`SigtermGuard` (see the module docstring).

    ``with guard.guarding(runner):`` around start-up and the loop: on leaving the block,
    ``runner.shutdown()`` runs on success or error; on SIGTERM or Ctrl-C the run first logs
    the interrupt and saves the final snapshot when one is due
    (``runner.snapshots.final_due``, ``runner.save_itr_snapshot``). The exception
    propagates; "Training complete." is logged only when the block finished.
    """

    def __init__(self) -> None:
        self._sigterm: SigtermGuard | None = None

    def held(self) -> Any:
        """SIGTERM and Ctrl-C wait until the block ends (see ``SigtermGuard.held``): an
        interrupt never separates a log row from its snapshot. Outside :meth:`guarding`,
        nothing is held."""
        guard = self._sigterm
        return guard.held() if guard is not None else contextlib.nullcontext()

    @contextlib.contextmanager
    def guarding(self, runner: Any) -> Iterator[None]:
        """Run the block with SIGTERM raising ``TrainingInterrupted``, then shut ``runner``
        down (see the class docstring); raise ``TrainingInterrupted`` after a successful
        shutdown when SIGTERM arrived after the block had finished. On entry the run's
        progress starts afresh (``itrs_done`` 0, no snapshot covering it, no diagnostics), so
        that an interrupt during start-up neither logs nor saves the previous run's."""
        runner.itrs_done = runner.snapshots.covered_itrs = 0
        runner.diagnostics = None
        with SigtermGuard() as sigterm:
            self._sigterm = sigterm
            try:
                yield
                sigterm.defer()  # the loop is over: SIGTERM must not cut the shutdown short
            except KeyboardInterrupt as interrupt:  # Ctrl-C, or SIGTERM as TrainingInterrupted
                sigterm.defer()
                _stop_interrupted(runner, interrupt)
                raise
            except BaseException:
                sigterm.defer()
                runner.shutdown()
                raise
            logger.log("Training complete.")
            runner.shutdown()
        if sigterm.received is not None:  # it came after the loop: pass it on to the caller
            logger.log(f"{signal_name(sigterm.received)} received after training completed.",
                       console=True)
            raise TrainingInterrupted(sigterm.received)


def _stop_interrupted(runner: Any, interrupt: KeyboardInterrupt) -> None:
    """Log the interrupt, save the final snapshot when one is due, then shut down (also when
    saving fails: that error then propagates, chained to the interrupt)."""
    if runner.diagnostics is not None:
        runner.diagnostics.stop_progress()
    itrs = runner.itrs_done
    steps = itrs * (runner.cadence.itr_batch_size if runner.cadence is not None else 0)
    logger.log(f"Training interrupted by {describe_interrupt(interrupt)} after {itrs} "
               f"iterations ({steps} steps); stopping.", with_prefix=False, console=True)
    try:
        if runner.snapshots.final_due(itrs):
            runner.save_itr_snapshot(itrs - 1)
    finally:
        runner.shutdown()
