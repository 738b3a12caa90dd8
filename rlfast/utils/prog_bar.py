"""Terminal progress bar toward the next log line, built on pyprind.

Runners log diagnostics every N steps; in between, ``ProgBarCounter`` shows how far the
run is toward the next log line and an ETA. The bar is drawn with a fixed number of ticks
whatever ``total_count`` is, so updating it costs nothing per environment step, and it
writes to stderr so that stdout (and piped logs) stay clean. On a terminal a finished bar
is erased (carriage return, then the erase-line sequence), so that the log rows printed
between bars follow one another with nothing left between them; pyprind's own finish
(a full bar and a "Total time elapsed" line) is never printed.
"""
from __future__ import annotations

import numbers
import os
import sys
from typing import TextIO

import pyprind

__all__ = ["ProgBarCounter"]

_ERASE_LINE = "\r\x1b[2K"  # back to column 0, then clear the whole line (ECMA-48 EL 2)
_BAR_WIDTH = 30  # pyprind's default
_FIXED_CHARS = len("0% [] 100% | ETA: 00:00:00") + 1  # the text around the bar, one spare


def _is_terminal(stream: TextIO) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # replaced or closed
        return False


def _bar_width(stream: TextIO) -> int:
    """The bar's width in characters: pyprind's 30, narrowed so that the whole line fits
    a narrow terminal (a wrapped line could not be erased by returning to column 0)."""
    try:
        columns = os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, ValueError, OSError):
        return _BAR_WIDTH
    if columns <= 0:  # a terminal that does not report its size
        return _BAR_WIDTH
    return max(min(_BAR_WIDTH, columns - _FIXED_CHARS), 10)


class ProgBarCounter:
    """Progress bar advanced to absolute counts: ``update(count)`` then ``stop()``.

    ``total_count`` is the count at which the bar is full (a non-negative integer; 0
    gives a counter with no bar). ``update(current_count)`` moves the bar forward to
    ``current_count`` (counts beyond ``total_count`` are clamped; going backwards is
    ignored; reaching ``total_count`` stops the bar). ``stop()`` ends the bar: on a
    terminal its line is erased, leaving the cursor at the start of an empty line; on
    any other stream the line is ended with a newline. With ``disable=True`` nothing is
    drawn and the object only keeps the count, so callers need no branches. Usable as a
    context manager that stops on exit.
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
        self._stream = sys.stderr
        self._drawn = False  # whether pyprind wrote anything that stop() must clear
        if not self.disable and self.total_count > 0:
            # Passing a stream object (not the int 2) keeps pyprind from printing a
            # warning to stdout when stderr is not a terminal; the wrapper notes writes.
            self._bar = pyprind.ProgBar(self.N_TICKS, stream=_NotingStream(self),
                                        width=_bar_width(self._stream))

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
        if ticks >= self.N_TICKS:  # full: pyprind would print its finish lines
            self.stop()
        elif ticks > self._ticks:
            self._bar.update(ticks - self._ticks)
            self._ticks = ticks

    def stop(self) -> None:
        """End the bar (its line erased on a terminal, ended elsewhere); safe to call
        twice."""
        if not self.active:
            return
        self._bar.active = False  # pyprind writes nothing once inactive
        self._ticks = self.N_TICKS
        if self._drawn:
            self._stream.write(_ERASE_LINE if _is_terminal(self._stream) else "\n")
            self._stream.flush()
            self._drawn = False

    def __enter__(self) -> "ProgBarCounter":
        return self

    def __exit__(self, *exc_info) -> None:
        self.stop()


class _NotingStream:
    """The stream pyprind writes to: the counter's stream, noting that a line is drawn."""

    def __init__(self, counter: ProgBarCounter):
        self._counter = counter

    def write(self, text: str) -> int:
        if text:
            self._counter._drawn = True
        return self._counter._stream.write(text)

    def flush(self) -> None:
        self._counter._stream.flush()
