"""Mutable scalars of replay parts (cursors, counters, flags) kept in a small numpy array.

A replay buffer shared between processes must keep *all* its state in shared memory, its
cursor and counters included: a forked child that appends moves the cursor the parent samples
from. Each part keeps its scalars in one tiny array, a plain ``np.zeros`` array or one on OS
shared memory (:func:`~rlfast.utils.buffer.np_mp_array`), and exposes them through
:func:`cell_property` under their usual attribute names, so the code that reads and writes
``self.t`` or ``self.full`` is the same whether the buffer is shared or not.
"""
from __future__ import annotations

from typing import Any, Callable

import numpy as np

from rlfast.utils.buffer import np_mp_array
from rlfast.utils.checks import check_int

__all__ = ["cell_array", "cell_property"]


def cell_array(n: int, dtype: Any = np.int64, share_memory: bool = False) -> np.ndarray:
    """A zeroed ``[n]`` array to hold scalars: on OS shared memory when ``share_memory`` (a
    forked child then reads and writes the same cells), else a plain numpy array."""
    n = check_int(n, "n", minimum=1)
    if share_memory:
        return np_mp_array(n, dtype)
    return np.zeros(n, dtype=dtype)


def cell_property(array: str, index: int, kind: Callable[[Any], Any], doc: str) -> property:
    """A property reading and writing cell ``index`` of the instance's array attribute named
    ``array``, converted with ``kind`` (``int``, ``bool``, ``float``) on read so callers get
    plain Python scalars, exactly as if it were an ordinary attribute."""
    if not isinstance(array, str) or not array:
        raise TypeError(f"array must be the name of an array attribute; got {array!r}")
    index = check_int(index, "index", minimum=0)

    def get(self: Any) -> Any:
        return kind(getattr(self, array)[index])

    def set_(self: Any, value: Any) -> None:
        getattr(self, array)[index] = value

    return property(get, set_, doc=doc)
