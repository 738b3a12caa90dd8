"""Terminal progress bar toward the next log line, built on pyprind.

Runners log diagnostics every N steps; in between, ``ProgBarCounter`` shows how far the
run is toward the next log line and an ETA. The bar is drawn with a fixed number of ticks
whatever ``total_count`` is, so updating it costs nothing per environment step, and it
writes to stderr so that stdout (and piped logs) stay clean.
"""
from __future__ import annotations

import numbers
import sys

import pyprind

__all__ = ["ProgBarCounter"]


class ProgBarCounter:
    """Progress bar advanced to absolute counts: ``update(count)`` then ``stop()``.

    ``total_count`` is the count at which the bar is full (a non-negative integer; 0
    gives a counter with no bar). ``update(current_count)`` moves the bar forward to
    ``current_count`` (counts beyond ``total_count`` are clamped; going backwards is
    ignored). ``stop()`` completes the bar and prints its total time. With
    ``disable=True`` nothing is drawn and the object only keeps the count, so callers
    need no branches. Usable as a context manager that stops on exit.
    """

    N_TICKS = 100  # Resolution of the drawn bar, independent of total_count.

    def __init__(self, total_count: int, disable: bool = False):
        if isinstance(total_count, bool) or not isinstance(total_count, numbers.Integral) \
                or total_count < 0:
            raise ValueError(f"total_count must be a non-negative integer, got {total_count!r}.")
        self.total_count = int(total_count)
        self.current_count = 0
        self.disable = bool(disable)
        self._ticks = 0
        self._bar = None
        if not self.disable and self.total_count > 0:
            # Passing the stream object (not the int 2) keeps pyprind from printing a
            # warning to stdout when stderr is not a terminal.
            self._bar = pyprind.ProgBar(self.N_TICKS, stream=sys.stderr)

    @property
    def active(self) -> bool:
        """True while a bar is being drawn and has not been stopped."""
        return self._bar is not None and self._bar.active

    def update(self, current_count: int) -> None:
        """Advance the bar to ``current_count`` (absolute count, not an increment)."""
        count = min(max(int(current_count), 0), self.total_count)
        if count <= self.current_count:
            return
        self.current_count = count
        if not self.active:
            return
        ticks = (count * self.N_TICKS) // self.total_count
        if ticks > self._ticks:
            self._bar.update(ticks - self._ticks)
            self._ticks = ticks

    def stop(self) -> None:
        """Finish the bar (fills it and prints the elapsed time); safe to call twice."""
        if self.active:
            self._bar.stop()
            self._ticks = self.N_TICKS

    def __enter__(self) -> "ProgBarCounter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()
