"""When a run logs, evaluates, snapshots and stops: the schedules every runner follows.

A run trains ``n_steps`` environment steps in iterations of ``itr_batch_size`` steps (every
rank's together), and writes a log row (with its snapshot, and the evaluation of the
runners that evaluate) every ``log_interval_steps``, rounded down to whole iterations, and
after the last iteration (:class:`LogCadence`). A long run may also snapshot on the wall
clock (``--snapshot-every MINUTES``, :class:`SnapshotClock`): at the end of the first
iteration once that many minutes passed since the last snapshot, so that a run killed
without warning (a power cut, the OOM killer) loses at most that much work.
"""
from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable

__all__ = ["LogCadence", "SnapshotClock", "check_snapshot_minutes"]


@dataclasses.dataclass(frozen=True)
class LogCadence:
    """The schedule of one run: ``n_itr`` iterations of ``itr_batch_size`` steps, a log row
    every ``log_interval_itrs`` iterations and after the last."""

    n_itr: int
    log_interval_itrs: int
    itr_batch_size: int

    @classmethod
    def plan(cls, n_steps: int, log_interval_steps: int, itr_batch_size: int) -> LogCadence:
        """The iterations ``n_steps`` needs (at least one) and the iterations between log
        rows (at least one), for iterations of ``itr_batch_size`` steps."""
        return cls(n_itr=max(math.ceil(n_steps / itr_batch_size), 1),
                   log_interval_itrs=max(log_interval_steps // itr_batch_size, 1),
                   itr_batch_size=itr_batch_size)

    def logs_after(self, itr: int) -> bool:
        """Whether a log row follows iteration ``itr``: at every interval and after the
        last iteration."""
        return (itr + 1) % self.log_interval_itrs == 0 or itr == self.n_itr - 1

    def interval_ends(self, itr: int) -> bool:
        """Whether iteration ``itr`` ends a log interval before the last iteration (the
        asynchronous runner writes its last row once the optimizer has finished)."""
        return (itr + 1) % self.log_interval_itrs == 0 and itr < self.n_itr - 1

    def steps_after(self, itr: int) -> int:
        """Environment steps done once iteration ``itr`` finished."""
        return (itr + 1) * self.itr_batch_size

    def steps_left(self, itr: int) -> int:
        """Environment steps the run still has to do once iteration ``itr`` finished."""
        return max(self.n_itr * self.itr_batch_size - self.steps_after(itr), 0)


def check_snapshot_minutes(minutes: float | None, name: str = "snapshot_every") -> float | None:
    """``minutes`` as a float when it is a positive finite number of minutes (None: no
    wall-clock cadence); a ``TypeError`` or ``ValueError`` naming ``name`` and the value
    otherwise."""
    if minutes is None:
        return None
    if isinstance(minutes, bool) or not isinstance(minutes, (int, float)):
        raise TypeError(f"{name} must be a number of minutes (int or float) or None; got "
                        f"{minutes!r} ({type(minutes).__name__})")
    if not math.isfinite(minutes) or minutes <= 0:
        raise ValueError(f"{name} must be a positive finite number of minutes (e.g. 30 or "
                         f"0.5); got {minutes!r}")
    return float(minutes)


class SnapshotClock:
    """The wall-clock snapshot cadence of a run: a snapshot is due once ``every_minutes``
    minutes passed since the last one was written, or since training started (None: never;
    snapshots then follow the log rows alone). ``clock`` gives the time in seconds
    (``time.monotonic``: a change of the system clock moves nothing)."""

    def __init__(self, every_minutes: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.every_minutes = check_snapshot_minutes(every_minutes)
        self.clock = clock
        self._since = clock()

    def restart(self) -> None:
        """Count the next interval from now (a snapshot was written, or training starts)."""
        self._since = self.clock()

    def due(self) -> bool:
        """Whether ``every_minutes`` passed since :meth:`restart` (never without a
        cadence)."""
        if self.every_minutes is None:
            return False
        return self.clock() - self._since >= 60.0 * self.every_minutes
