"""Translate gymnasium spaces (and their values) into rlfast spaces and back."""
from __future__ import annotations

import keyword
from collections.abc import Callable
from typing import Any

import numpy as np
from gymnasium import spaces as gym_spaces

from rlfast.spaces.base import SeedLike
from rlfast.spaces.composite import Composite
from rlfast.spaces.float_box import FloatBox
from rlfast.spaces.int_box import IntBox
from rlfast.utils.collections import NamedTupleSchema

SUPPORTED_GYM_SPACES = ("Discrete", "Box", "MultiDiscrete", "MultiBinary", "Dict")


def _collapse(bound: np.ndarray) -> Any:
    """A bound array whose entries are all equal becomes that scalar (so ``n`` is an int)."""
    flat = bound.reshape(-1)
    if flat.size and np.all(flat == flat[0]):
        return flat[0].item()
    return bound


def _build(space: Any, null_value: Any, name: str, force_float32: bool) -> tuple:
    """Return ``(rlfast_space, convert, revert)`` for one gym space, recursing into Dicts.

    ``convert`` maps a gym value to the rlfast form, ``revert`` maps it back; both are built
    once here so the per-step work is a couple of attribute lookups and ``np.asarray`` calls.
    """
    if isinstance(space, gym_spaces.Discrete):
        start, n = int(space.start), int(space.n)
        dtype = np.dtype(space.dtype)
        box = IntBox(start, start + n, shape=(), dtype=dtype, null_value=null_value)
        return box, _leaf_converter(dtype), _to_python_int
    if isinstance(space, gym_spaces.MultiDiscrete):
        # Per-dimension bounds, kept as arrays even when equal: ``n`` is the space's nvec.
        dtype = np.dtype(space.dtype)
        high = np.asarray(space.start, dtype=np.int64) + np.asarray(space.nvec, dtype=np.int64)
        start = np.array(np.broadcast_to(np.asarray(space.start, dtype=np.int64), high.shape))
        box = IntBox(start, high, shape=space.shape, dtype=dtype,
                     null_value=_null_in_range(null_value, start, high))
        return box, _leaf_converter(dtype), _leaf_converter(dtype)
    if isinstance(space, gym_spaces.MultiBinary):
        dtype = np.dtype(space.dtype)
        box = IntBox(0, 2, shape=space.shape, dtype=dtype, null_value=null_value)
        return box, _leaf_converter(dtype), _leaf_converter(dtype)
    if isinstance(space, gym_spaces.Box):
        gym_dtype = np.dtype(space.dtype)
        if gym_dtype.kind in "biu":
            low = _collapse(np.asarray(space.low, dtype=np.int64))
            high = _collapse(np.asarray(space.high, dtype=np.int64) + 1)  # gym high inclusive
            box = IntBox(low, high, shape=space.shape, dtype=gym_dtype, null_value=null_value)
            return box, _leaf_converter(gym_dtype), _leaf_converter(gym_dtype)
        if gym_dtype.kind == "f":
            dtype = np.dtype(np.float32) if force_float32 and gym_dtype == np.float64 else gym_dtype
            box = FloatBox(_collapse(np.asarray(space.low)), _collapse(np.asarray(space.high)),
                           shape=space.shape, null_value=null_value, dtype=dtype)
            return box, _leaf_converter(dtype), _leaf_converter(gym_dtype)
        raise TypeError(f"gymnasium Box with dtype {gym_dtype} is not supported; use an "
                        f"integer, bool or float dtype")
    if isinstance(space, gym_spaces.Dict):
        keys = list(space.spaces.keys())
        for key in keys:
            if (not isinstance(key, str) or not key.isidentifier() or key.startswith("_")
                    or keyword.iskeyword(key)):
                raise ValueError(
                    f"gymnasium Dict space {name!r} has key {key!r}, which cannot be a "
                    f"namedtuple field; keys must be non-keyword identifiers not starting "
                    f"with '_'"
                )
        built = [_build(space.spaces[key], null_value, f"{name}_{key}", force_float32)
                 for key in keys]
        schema = NamedTupleSchema(name, keys)
        composite = Composite([b[0] for b in built], schema)
        converters = [b[1] for b in built]
        reverters = [b[2] for b in built]

        def convert(value: Any) -> Any:
            return schema(*(conv(value[key]) for conv, key in zip(converters, keys)))

        def revert(value: Any) -> dict:
            return {key: rev(v) for key, rev, v in zip(keys, reverters, value)}

        return composite, convert, revert
    supported = ", ".join(SUPPORTED_GYM_SPACES)
    raise TypeError(
        f"GymSpaceWrapper cannot wrap gymnasium space type {type(space).__name__} ({space!r}); "
        f"supported types: {supported} (or any space gymnasium.spaces.flatten_space accepts, "
        f"flattened into one vector with flatten=True; rlfast.envs.make(id, "
        f"flatten_observation=True) for observations)"
    )


def _build_flat(space: Any, null_value: Any, force_float32: bool) -> tuple:
    """``(FloatBox, convert, revert)`` for ``space`` flattened into one vector with
    gymnasium's ``flatten_space`` / ``flatten`` / ``unflatten`` (Dict entries in the Dict
    space's key order, Discrete entries one-hot)."""
    try:
        flat = gym_spaces.flatten_space(space)
    except NotImplementedError as err:
        raise TypeError(f"GymSpaceWrapper cannot flatten gymnasium space {space!r}: {err}") from err
    flat_dtype = np.dtype(flat.dtype)
    if flat_dtype.kind == "f" and not (force_float32 and flat_dtype == np.float64):
        dtype = flat_dtype
    else:
        dtype = np.dtype(np.float32)
    box = FloatBox(_collapse(np.asarray(flat.low, dtype=np.float64)),
                   _collapse(np.asarray(flat.high, dtype=np.float64)),
                   shape=flat.shape, null_value=null_value, dtype=dtype)
    flatten, unflatten = gym_spaces.flatten, gym_spaces.unflatten

    def convert(value: Any) -> np.ndarray:
        return np.asarray(flatten(space, value), dtype=dtype)

    def revert(value: Any) -> Any:
        return unflatten(space, np.asarray(value, dtype=flat_dtype))

    return box, convert, revert


def _null_in_range(null_value: Any, low: Any, high: Any) -> Any:
    """``null_value`` where it lies in ``[low, high)``, else ``low`` (per entry): the null of
    a MultiDiscrete dimension with ``start > 0`` is its first value, not an invalid 0 (the
    per-dimension categorical agents one-hot the previous action relative to ``start``)."""
    null = np.asarray(null_value)
    if null.dtype.kind not in "biuf":
        return null_value
    low, high = np.asarray(low), np.asarray(high)
    inside = (null >= low) & (null < high)
    if np.all(inside):
        return null_value
    return np.where(inside, null, low)


def _leaf_converter(dtype: np.dtype) -> Callable[[Any], np.ndarray]:
    def convert(value: Any) -> np.ndarray:
        return np.asarray(value, dtype=dtype)
    return convert


def _to_python_int(value: Any) -> int:
    """Discrete gym spaces want a plain int; accept ints, numpy scalars and size-1 arrays."""
    if isinstance(value, (int, np.integer)):
        return int(value)
    arr = np.asarray(value)
    if arr.size != 1:
        raise ValueError(f"a Discrete action must be a single integer, got {value!r}")
    item = arr.reshape(()).item()
    if int(item) != item:
        raise ValueError(f"a Discrete action must be integer-valued, got {value!r}")
    return int(item)


class GymSpaceWrapper:
    """Wraps a gymnasium space in the rlfast interface. Discrete becomes a scalar ``IntBox``
    over ``range(start, start + n)``; integer Boxes (e.g. uint8 images) become ``IntBox`` with
    the Box's dtype; float Boxes become ``FloatBox`` (float64 narrowed to float32 when
    ``force_float32``); MultiDiscrete becomes an ``IntBox`` with per-dimension bounds
    ``[start, start + nvec)`` (so ``n`` is ``nvec``); MultiBinary an ``IntBox`` over {0, 1}; Dict
    becomes a ``Composite`` whose values are namedtuples from a ``NamedTupleSchema`` called
    ``name`` (nested Dicts recurse, named ``{name}_{key}``), so they pickle under spawn.
    With ``flatten=True`` any space gymnasium can flatten (Dict and Tuple included) becomes
    one ``FloatBox`` vector instead (``gymnasium.spaces.flatten``: Dict entries in the Dict
    space's key order, Discrete entries one-hot), what MLP models read.
    ``convert`` turns a gym value into the rlfast form and ``revert`` turns it back; shape,
    dtype, n, low, high and the other attributes pass through to the wrapped rlfast space.
    An integer ``null_value`` outside a MultiDiscrete dimension's range is replaced by that
    dimension's lowest value."""

    def __init__(self, space: Any, null_value: Any = 0, name: str = "obs",
                 force_float32: bool = True, flatten: bool = False) -> None:
        if not isinstance(name, str) or not name.isidentifier():
            raise ValueError(f"GymSpaceWrapper name must be a Python identifier, got {name!r}")
        self.gym_space = space
        self.name = name
        self.force_float32 = force_float32
        self.flatten = bool(flatten)
        self.space, self._convert, self._revert = self._make(null_value)

    def _make(self, null_value: Any) -> tuple:
        if self.flatten:
            return _build_flat(self.gym_space, null_value, self.force_float32)
        return _build(self.gym_space, null_value, self.name, self.force_float32)

    def sample(self) -> Any:
        """A random value in rlfast form (namedtuple for Dict spaces), from the rlfast space's
        RNG (numpy's global RNG unless ``seed`` was called)."""
        return self.space.sample()

    def null_value(self) -> Any:
        """The null value in rlfast form."""
        return self.space.null_value()

    def seed(self, seed: SeedLike = None) -> None:
        """Seed the wrapped rlfast space (``None``: back to numpy's global RNG)."""
        self.space.seed(seed)

    def convert(self, value: Any) -> Any:
        """Gym value -> rlfast value (dict -> namedtuple; dtype made the rlfast space's)."""
        return self._convert(value)

    def revert(self, value: Any) -> Any:
        """rlfast value -> gym value (namedtuple -> dict; Discrete -> int; gym's dtype)."""
        return self._revert(value)

    def __getattr__(self, name: str) -> Any:
        # Only reached for attributes not found normally; guard against recursion while
        # unpickling (before ``space`` exists).
        if name.startswith("__") or name in ("space", "_convert", "_revert", "flatten",
                                             "gym_space", "force_float32"):
            raise AttributeError(name)
        return getattr(self.space, name)

    def __getstate__(self) -> dict:
        # The converters are closures; rebuild them from the gym space on unpickling.
        return {"gym_space": self.gym_space, "name": self.name,
                "force_float32": self.force_float32, "flatten": self.flatten, "space": self.space}

    def __setstate__(self, state: dict) -> None:
        self.gym_space = state["gym_space"]
        self.name = state["name"]
        self.force_float32 = state["force_float32"]
        self.flatten = state.get("flatten", False)
        _, self._convert, self._revert = self._make(0)
        self.space = state["space"]

    def __repr__(self) -> str:
        return f"GymSpaceWrapper({self.gym_space!r} -> {self.space!r})"
