"""Index arithmetic of a ``[T, B]`` ring buffer with a time cursor.

The cursor ``t`` is the next row to be written; ``full`` turns true the first time it wraps.
A row's *age* is how many rows were written after it: ``(t - 1 - row) % T`` (0 = newest).
A row can be replayed when at least ``off_backward`` newer rows exist (its n-step future, or
its whole sequence, has been written) and it is not among the ``off_forward`` oldest rows
(whose previous step, or frame history, has already been overwritten by new data). Before the
first wrap, rows at or past the cursor hold nothing yet. Buffers, samplers and the sum tree
all decide validity with these functions, so they can never disagree.
"""
from __future__ import annotations

import numpy as np

__all__ = ["valid_age_range", "n_valid_rows", "valid_rows", "ring_rows", "ring_slices",
           "rows_from_ages"]


def valid_age_range(cursor: int, full: bool, T: int, off_backward: int,
                    off_forward: int) -> tuple[int, int]:
    """Inclusive ``(lo, hi)`` range of ages that may be replayed; empty when ``hi < lo``."""
    hi = T - 1 - off_forward
    if not full:
        hi = min(hi, cursor - 1)
    return off_backward, hi


def n_valid_rows(cursor: int, full: bool, T: int, off_backward: int, off_forward: int) -> int:
    """How many rows may be replayed now (the size of :func:`valid_age_range`)."""
    lo, hi = valid_age_range(cursor, full, T, off_backward, off_forward)
    return max(0, hi - lo + 1)


def valid_rows(rows: np.ndarray, cursor: int, full: bool, T: int, off_backward: int,
               off_forward: int) -> np.ndarray:
    """Boolean mask: which of ``rows`` (ints in ``[0, T)``) may be replayed now."""
    rows = np.asarray(rows)
    lo, hi = valid_age_range(cursor, full, T, off_backward, off_forward)
    age = (cursor - 1 - rows) % T
    ok = (age >= lo) & (age <= hi)
    if not full:
        ok &= rows < cursor
    return ok


def rows_from_ages(ages: np.ndarray, cursor: int, T: int) -> np.ndarray:
    """Rows holding the given ages (inverse of the age formula)."""
    return (cursor - 1 - np.asarray(ages)) % T


def ring_rows(start: int, length: int, T: int) -> np.ndarray:
    """Rows ``start, start + 1, ...`` (``length`` of them), wrapping at ``T``."""
    return (start + np.arange(length)) % T


def ring_slices(start: int, length: int, T: int) -> list[tuple[slice, slice]]:
    """Contiguous pieces of a ring write: ``[(rows_slice, source_slice), ...]`` (one or two)."""
    start %= T
    first = min(length, T - start)
    pieces = [(slice(start, start + first), slice(0, first))]
    if first < length:
        pieces.append((slice(0, length - first), slice(first, length)))
    return pieces
