"""The one linear schedule: epsilon annealing, prioritized-replay beta, and the like."""
from __future__ import annotations

__all__ = ["linear_schedule"]


def linear_schedule(itr: float, itr_start: float, itr_end: float, start: float,
                    end: float) -> float:
    """``start`` until ``itr_start``, then linear to ``end`` at ``itr_end``, ``end`` after.

    ``progress = clip((itr - itr_start) / (itr_end - itr_start), 0, 1)`` and the value is
    ``(1 - progress) * start + progress * end`` (exactly ``start`` at
    progress 0 and ``end`` at 1, with no float cancellation). When ``itr_end <= itr_start`` the schedule is a step
    to ``end`` at ``itr_end``.
    """
    if start == end:
        return start  # a constant schedule stays exact
    if itr_end <= itr_start:
        return end if itr >= itr_end else start
    progress = min(max((itr - itr_start) / (itr_end - itr_start), 0.0), 1.0)
    return (1 - progress) * start + progress * end
