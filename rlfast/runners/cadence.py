"""When a run logs, evaluates and stops: the iteration schedule every runner follows.

A run trains ``n_steps`` environment steps in iterations of ``itr_batch_size`` steps (every
rank's together), and writes a log row (with its snapshot, and the evaluation of the
runners that evaluate) every ``log_interval_steps``, rounded down to whole iterations, and
after the last iteration.
"""
from __future__ import annotations

import dataclasses
import math

__all__ = ["LogCadence"]


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
