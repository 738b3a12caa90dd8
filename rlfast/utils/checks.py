"""Argument checks shared by every layer: one place for "is this a valid int / fraction / ...".

Each check returns the value converted to its canonical type, or raises with a message that
names the argument (prefixed by its owner, e.g. the class, when given) and the valid range.
Non-numbers raise ``TypeError``; numbers out of range raise ``ValueError``.
"""
from __future__ import annotations

import math
import operator
from typing import Any, Iterable

__all__ = ["check_int", "check_positive", "check_fraction", "check_choice"]


def _prefix(owner: str | None) -> str:
    return f"{owner}: " if owner else ""


def check_int(value: Any, name: str, minimum: int | None = None, owner: str | None = None) -> int:
    """``value`` as an ``int`` (bools and non-integral floats refused), at least ``minimum``."""
    bound = "" if minimum is None else f" >= {minimum}"
    if isinstance(value, bool):
        raise TypeError(f"{_prefix(owner)}{name} must be an integer{bound}; got {value!r}")
    try:
        as_int = operator.index(value)
    except TypeError:
        if isinstance(value, float) and value.is_integer():
            as_int = int(value)
        else:
            raise TypeError(f"{_prefix(owner)}{name} must be an integer{bound}; "
                            f"got {value!r}") from None
    if minimum is not None and as_int < minimum:
        raise ValueError(f"{_prefix(owner)}{name} must be an integer{bound}; got {value!r}")
    return as_int


def check_positive(value: Any, name: str, integer: bool = False, owner: str | None = None):
    """``value`` > 0: an ``int`` when ``integer``, else a finite ``float``."""
    if integer:
        return check_int(value, name, minimum=1, owner=owner)
    if isinstance(value, bool):
        raise TypeError(f"{_prefix(owner)}{name} must be a number > 0; got {value!r}")
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{_prefix(owner)}{name} must be a number > 0; got {value!r}") from None
    if not as_float > 0 or math.isinf(as_float):
        raise ValueError(f"{_prefix(owner)}{name} must be a finite number > 0; got {value!r}")
    return as_float


def check_fraction(value: Any, name: str, allow_zero: bool = True,
                   owner: str | None = None) -> float:
    """``value`` as a ``float`` in [0, 1] (or (0, 1] without ``allow_zero``)."""
    interval = "[0, 1]" if allow_zero else "(0, 1]"
    if isinstance(value, bool):
        raise TypeError(f"{_prefix(owner)}{name} must be a number in {interval}; got {value!r}")
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        raise TypeError(f"{_prefix(owner)}{name} must be a number in {interval}; "
                        f"got {value!r}") from None
    low_ok = as_float >= 0 if allow_zero else as_float > 0
    if not (low_ok and as_float <= 1):  # NaN fails both comparisons
        raise ValueError(f"{_prefix(owner)}{name} must be in {interval}; got {value!r}")
    return as_float


def check_choice(value: Any, name: str, choices: Iterable, owner: str | None = None):
    """``value`` itself when it is one of ``choices``; else an error listing them."""
    choices = tuple(choices)
    if value not in choices:
        raise ValueError(f"{_prefix(owner)}{name} must be one of {list(choices)}; got {value!r}")
    return value


def check_action_index(action: Any, n_actions: int, owner: str) -> int:
    """``action`` (an int, or a one-element integer array) as an index in ``[0, n_actions)``;
    ValueError naming ``owner`` and the valid range otherwise."""
    import numpy as np
    arr = np.asarray(action)
    if arr.size == 1 and arr.dtype.kind in "iu":
        index = int(arr.reshape(()))
        if 0 <= index < n_actions:
            return index
    raise ValueError(f"{owner} action must be an int in [0, {n_actions}), got {action!r}")
