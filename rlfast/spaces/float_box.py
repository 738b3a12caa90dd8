"""A box of real numbers: continuous actions and vector observations."""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from rlfast.spaces.box import Box, shape_tuple

Bound = float | int | Sequence[float] | np.ndarray


class FloatBox(Box):
    """A box in R^n with bounds ``[low, high]`` (inclusive). Two input forms: scalar
    ``low``/``high`` with a ``shape`` (``FloatBox(-1., 1., (3, 4))``), or arrays of bounds whose
    shape is the space's shape (``FloatBox(np.array([-1., -2.]), np.array([2., 4.]))``).
    Sampling is uniform where both bounds are finite, a standard normal where both are
    infinite, and a shifted exponential where only one side is bounded, so every sample lies
    inside the box. Bounds are kept as float64 for exact comparisons; values are ``dtype``."""

    value_kinds = "biuf"

    def __init__(
        self,
        low: Bound,
        high: Bound,
        shape: Sequence[int] | None = None,
        null_value: float | np.ndarray = 0.0,
        dtype: str | np.dtype | type = "float32",
    ) -> None:
        self.dtype = np.dtype(dtype)
        if self.dtype.kind != "f":
            raise ValueError(
                f"FloatBox dtype must be a float dtype ('float16', 'float32', 'float64'), "
                f"got {self.dtype!r}"
            )
        low_arr = np.asarray(low, dtype=np.float64)
        high_arr = np.asarray(high, dtype=np.float64)
        if np.any(np.isnan(low_arr)) or np.any(np.isnan(high_arr)):
            raise ValueError(f"FloatBox bounds must not be NaN, got low={low!r}, high={high!r}")
        if shape is None:
            if low_arr.shape != high_arr.shape and low_arr.ndim > 0 and high_arr.ndim > 0:
                raise ValueError(
                    f"FloatBox array bounds must have the same shape, got low {low_arr.shape} "
                    f"and high {high_arr.shape}"
                )
            shape = np.broadcast_shapes(low_arr.shape, high_arr.shape)
        self.shape = shape_tuple(shape)
        try:
            low_arr = np.broadcast_to(low_arr, self.shape)
            high_arr = np.broadcast_to(high_arr, self.shape)
        except ValueError as err:
            raise ValueError(
                f"FloatBox bounds of shapes {np.shape(low)} and {np.shape(high)} do not fit "
                f"shape {self.shape}"
            ) from err
        if np.any(high_arr < low_arr):
            raise ValueError(f"FloatBox needs high >= low everywhere, got low={low!r}, "
                             f"high={high!r}")
        self.scalar_bounds = np.ndim(low) == 0 and np.ndim(high) == 0
        if self.scalar_bounds:
            self.low: Any = float(np.asarray(low, dtype=np.float64))
            self.high: Any = float(np.asarray(high, dtype=np.float64))
        else:
            self.low = np.array(low_arr)
            self.high = np.array(high_arr)
        lower_finite = np.isfinite(low_arr)
        upper_finite = np.isfinite(high_arr)
        self._all_bounded = bool(np.all(lower_finite & upper_finite))
        self._bounded = lower_finite & upper_finite
        self._lower_only = lower_finite & ~upper_finite
        self._upper_only = ~lower_finite & upper_finite
        self._full_low = np.array(low_arr)
        self._full_high = np.array(high_arr)
        self._null_value = null_value
        self.null_value()  # validate once: must broadcast to shape

    def sample(self) -> np.ndarray:
        """Return one sample of shape ``shape`` and dtype ``dtype`` lying inside the box."""
        if self._all_bounded:
            return self._uniform(self.low, self.high, self.shape).astype(self.dtype)
        out = self._normal(self.shape)  # unbounded entries keep the standard normal draw
        if np.any(self._bounded):
            low = np.where(self._bounded, self._full_low, 0.0)
            high = np.where(self._bounded, self._full_high, 1.0)
            out = np.where(self._bounded, self._uniform(low, high, self.shape), out)
        if np.any(self._lower_only):
            out = np.where(self._lower_only, self._full_low + self._exponential(self.shape), out)
        if np.any(self._upper_only):
            out = np.where(self._upper_only, self._full_high - self._exponential(self.shape), out)
        return np.asarray(out).astype(self.dtype)

    def _in_bounds(self, arr: np.ndarray) -> bool:
        """Every entry in ``[low, high]`` (``contains`` accepts integer and float arrays)."""
        return bool(np.all(arr >= self._full_low) and np.all(arr <= self._full_high))

    def _bound_arrays(self) -> tuple:
        return self._full_low, self._full_high
