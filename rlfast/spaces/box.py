"""What the integer and float boxes share: shape, null value, membership, equality and repr."""
from __future__ import annotations

from abc import abstractmethod
from typing import Any

import numpy as np

from rlfast.spaces.base import Space

__all__ = ["Box"]


def shape_tuple(shape: Any) -> tuple[int, ...]:
    """A shape given as an int or a sequence of ints, as a tuple of ints."""
    if isinstance(shape, (int, np.integer)):
        return (int(shape),)
    return tuple(int(d) for d in shape)


class Box(Space):
    """A box of ``shape`` with values of ``dtype`` between ``low`` and ``high``.

    Subclasses (``IntBox``, ``FloatBox``) set ``shape``, ``dtype``, ``low``, ``high`` and
    ``_null_value`` and define ``_in_bounds``; ``value_kinds`` are the numpy dtype kinds that
    ``contains`` accepts, ``_bound_arrays`` the bounds that equality compares.
    """

    value_kinds = "biu"

    def null_value(self) -> np.ndarray:
        """Return an array of shape ``shape`` filled with the null value."""
        null = np.empty(self.shape, dtype=self.dtype)
        null[...] = self._null_value
        return null

    def contains(self, x: Any) -> bool:
        """True if ``x`` is an array of this shape, of an accepted kind, within the bounds."""
        arr = np.asarray(x)
        if arr.shape != self.shape or arr.dtype.kind not in self.value_kinds:
            return False
        return self._in_bounds(arr)

    @abstractmethod
    def _in_bounds(self, arr: np.ndarray) -> bool:
        """Whether every entry of ``arr`` (of this shape) lies within the bounds."""

    def _bound_arrays(self) -> tuple:
        return self.low, self.high

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, type(self))
            and self.shape == other.shape
            and self.dtype == other.dtype
            and all(np.array_equal(a, b)
                    for a, b in zip(self._bound_arrays(), other._bound_arrays()))
        )

    __hash__ = None  # mutable-looking value object; compare, don't hash

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(low={self.low!r}, high={self.high!r}, shape={self.shape}, "
            f"dtype={self.dtype.name})"
        )
