"""A box of integers: discrete actions, multi-discrete actions and uint8 image observations."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlfast.spaces.box import Box, shape_tuple

Bound = int | np.integer | Sequence[int] | np.ndarray


def _integer_bound(value: Bound, name: str) -> np.ndarray:
    """Return ``value`` as an int64 array, refusing non-integral entries."""
    arr = np.asarray(value)
    if arr.dtype.kind in "biu":
        return arr.astype(np.int64)
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        return arr.astype(np.int64)
    raise ValueError(f"IntBox {name} must be integer-valued, got {value!r}")


class IntBox(Box):
    """A box in Z^n whose valid values are ``range(low, high)`` in every dimension (``high`` is
    exclusive). ``low``/``high`` are scalars applied across ``shape`` (a categorical action is
    ``IntBox(0, n)``), or arrays giving per-dimension bounds (a multi-discrete action, or an
    integer image with per-pixel bounds), in which case ``shape`` defaults to their broadcast
    shape. ``n`` is the number of values ``high - low``: an int for scalar bounds, an array of
    per-dimension counts for array bounds. The null value is ``low`` unless one is given."""

    def __init__(
        self,
        low: Bound,
        high: Bound,
        shape: Sequence[int] | None = None,
        dtype: str | np.dtype | type = "int32",
        null_value: int | np.ndarray | None = None,
    ) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype.kind not in "biu":
            raise ValueError(
                f"IntBox dtype must be an integer or bool dtype (e.g. 'int32', 'int64', 'uint8', "
                f"'bool'), got {self.dtype!r}"
            )
        low_arr = _integer_bound(low, "low")
        high_arr = _integer_bound(high, "high")
        try:
            bound_shape = np.broadcast_shapes(low_arr.shape, high_arr.shape)
        except ValueError as err:
            raise ValueError(
                f"IntBox low shape {low_arr.shape} and high shape {high_arr.shape} do not broadcast"
            ) from err
        self.shape = shape_tuple(bound_shape if shape is None else shape)
        try:
            np.broadcast_shapes(bound_shape, self.shape)
            low_arr = np.broadcast_to(low_arr, self.shape)
            high_arr = np.broadcast_to(high_arr, self.shape)
        except ValueError as err:
            raise ValueError(
                f"IntBox bounds of shape {bound_shape} do not fit shape {self.shape}"
            ) from err
        if np.any(high_arr <= low_arr):
            raise ValueError(f"IntBox needs high > low everywhere, got low={low!r}, high={high!r}")
        if self.dtype.kind == "b":
            dtype_min, dtype_max = 0, 1
        else:
            info = np.iinfo(self.dtype)
            dtype_min, dtype_max = int(info.min), int(info.max)
        if np.any(low_arr < dtype_min) or np.any(high_arr - 1 > dtype_max):
            raise ValueError(
                f"IntBox bounds low={low!r}, high={high!r} (high exclusive) do not fit dtype "
                f"{self.dtype} with range [{dtype_min}, {dtype_max}]"
            )
        self.scalar_bounds = np.ndim(low) == 0 and np.ndim(high) == 0
        if self.scalar_bounds:
            self.low: Any = int(np.asarray(low))
            self.high: Any = int(np.asarray(high))
        else:
            self.low = np.array(low_arr, dtype=np.int64)
            self.high = np.array(high_arr, dtype=np.int64)
        self._null_value = self.low if null_value is None else null_value
        # Validate the null value once, so null_value() cannot fail later.
        self.null_value()

    @property
    def n(self) -> int | np.ndarray:
        """Number of valid values: ``high - low`` (per dimension for array bounds)."""
        return self.high - self.low

    def sample(self) -> np.ndarray:
        """Return a uniform sample in ``[low, high)`` of shape ``shape`` and dtype ``dtype``."""
        return np.asarray(self._integers(self.low, self.high, self.shape, self.dtype))

    def _in_bounds(self, arr: np.ndarray) -> bool:
        """Every entry in ``[low, high)`` (``contains`` accepts integer arrays only)."""
        return bool(np.all(arr >= self.low) and np.all(arr < self.high))
