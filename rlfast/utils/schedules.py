"""The one linear schedule: epsilon annealing, prioritized-replay beta, and the like."""
from __future__ import annotations

from typing import Any

__all__ = ["linear_schedule"]


def linear_schedule(itr: float, itr_start: float, itr_end: float, start: Any,
                    end: Any) -> Any:
    """``start`` until ``itr_start``, then linear to ``end`` at ``itr_end``, ``end`` after.

    ``start`` and ``end`` are floats or tensors (e.g. one epsilon per environment).
    ``progress = clip((itr - itr_start) / (itr_end - itr_start), 0, 1)`` and the value is
    ``(1 - progress) * start + progress * end``: exactly ``start`` at progress 0 and ``end``
    at 1, with no float cancellation. When ``itr_end <= itr_start`` the schedule is a step
    to ``end`` at ``itr_end``.
    """
    if isinstance(start, (int, float)) and isinstance(end, (int, float)) and start == end:
        return start  # a constant schedule stays exact
    if itr_end <= itr_start:
        return end if itr >= itr_end else start
    progress = min(max((itr - itr_start) / (itr_end - itr_start), 0.0), 1.0)
    return (1 - progress) * start + progress * end
