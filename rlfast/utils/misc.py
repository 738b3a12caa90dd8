"""Small array/tensor helpers shared by algorithms and replay buffers.

``iterate_mb_idxs`` drives minibatch loops over a flattened batch; ``zeros`` / ``empty``
allocate either a torch tensor or a numpy array from one dtype argument, so buffer code
need not branch; ``extract_sequences`` gathers fixed-length time windows from a
``[T, B, ...]`` ring buffer, wrapping around its time dimension.
"""

from __future__ import annotations

import copy
import operator
import os
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import torch

__all__ = ["iterate_mb_idxs", "zeros", "empty", "extract_sequences", "available_cpus",
           "deep_merge"]


def _as_int(value: Any, name: str) -> int:
    try:
        return operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer; got {value!r} of type "
                        f"{type(value).__name__}.") from None


def iterate_mb_idxs(data_length: int, minibatch_size: int,
                    shuffle: bool = False) -> Iterator[np.ndarray]:
    """Yield integer index arrays covering ``range(data_length)`` once, in minibatches.

    Every index appears exactly once per pass; the last minibatch holds the remainder
    and may be smaller. With ``shuffle`` the order is a permutation drawn from numpy's
    global RNG (so ``set_seed`` makes it reproducible); otherwise indexes ascend.
    """
    data_length = _as_int(data_length, "data_length")
    minibatch_size = _as_int(minibatch_size, "minibatch_size")
    if data_length < 0:
        raise ValueError(f"data_length must be >= 0; got {data_length}.")
    if minibatch_size < 1:
        raise ValueError(f"minibatch_size must be >= 1; got {minibatch_size}.")
    order = np.random.permutation(data_length) if shuffle else np.arange(data_length)
    for start in range(0, data_length, minibatch_size):
        yield order[start:start + minibatch_size]


def _allocate(shape, dtype, torch_fn, numpy_fn, fn_name: str):
    if dtype is None or isinstance(dtype, torch.dtype):
        return torch_fn(shape, dtype=dtype)
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise TypeError(f"{fn_name}: dtype must be a torch.dtype (tensor), a numpy dtype or "
                        f"dtype name (array), or None (torch default); got {dtype!r}.") from None
    return numpy_fn(shape, dtype=np_dtype)


def zeros(shape: int | Sequence[int], dtype: Any = None) -> torch.Tensor | np.ndarray:
    """Zeros of ``shape``: a torch tensor for a torch dtype (or None, torch's default
    dtype), a numpy array for a numpy dtype, type or dtype string."""
    return _allocate(shape, dtype, torch.zeros, np.zeros, "zeros")


def empty(shape: int | Sequence[int], dtype: Any = None) -> torch.Tensor | np.ndarray:
    """Uninitialized memory of ``shape``: a torch tensor for a torch dtype (or None), a
    numpy array for a numpy dtype, type or dtype string."""
    return _allocate(shape, dtype, torch.empty, np.empty, "empty")


def extract_sequences(array_or_tensor: Any, T_idx: Sequence[int] | np.ndarray,
                      B_idx: Sequence[int] | np.ndarray, T: int) -> Any:
    """Gather sequences of length ``T`` starting at ``[T_idx[i], B_idx[i]]``.

    ``array_or_tensor`` has leading dims ``[T_buffer, B_buffer]`` and is treated as a ring
    along its first dim: a window running past the end continues from row 0. Returns a
    new array/tensor of shape ``[T, len(B_idx), ...]``. Named(array)tuples of such arrays
    are handled field by field (None fields stay None).
    """
    if array_or_tensor is None:
        return None
    if isinstance(array_or_tensor, tuple) and hasattr(array_or_tensor, "_fields"):
        return array_or_tensor._make(extract_sequences(v, T_idx, B_idx, T)
                                     for v in array_or_tensor)
    T = _as_int(T, "T")
    T_idx = np.asarray(T_idx)
    B_idx = np.asarray(B_idx)
    if T_idx.ndim != 1 or B_idx.ndim != 1 or len(T_idx) != len(B_idx):
        raise ValueError(f"T_idx and B_idx must be 1-D of equal length; got shapes "
                         f"{T_idx.shape} and {B_idx.shape}.")
    if T_idx.size and not (np.issubdtype(T_idx.dtype, np.integer)
                           and np.issubdtype(B_idx.dtype, np.integer)):
        raise TypeError(f"T_idx and B_idx must hold integers; got dtypes {T_idx.dtype} "
                        f"and {B_idx.dtype}.")
    shape = tuple(array_or_tensor.shape)
    if len(shape) < 2:
        raise ValueError(f"array_or_tensor must have leading dims [T, B]; got shape {shape}.")
    T_buffer = shape[0]
    if not 1 <= T <= T_buffer:
        raise ValueError(f"T must be in [1, {T_buffer}] (the buffer's time length); got {T}.")
    if T_idx.size and (T_idx.min() < 0 or T_idx.max() >= T_buffer):
        raise ValueError(f"T_idx values must be in [0, {T_buffer}); got range "
                         f"[{T_idx.min()}, {T_idx.max()}].")
    t_grid = (T_idx[None, :] + np.arange(T)[:, None]) % T_buffer  # [T, n]
    b_grid = np.broadcast_to(B_idx[None, :], t_grid.shape)
    if isinstance(array_or_tensor, torch.Tensor):
        device = array_or_tensor.device
        t_grid = torch.as_tensor(t_grid, dtype=torch.long, device=device)
        b_grid = torch.as_tensor(np.ascontiguousarray(b_grid), dtype=torch.long,
                                 device=device)
    return array_or_tensor[t_grid, b_grid]


def available_cpus() -> list[int]:
    """The CPU ids this process may run on (its affinity mask where the OS has one)."""
    try:
        return sorted(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        return list(range(os.cpu_count() or 1))


def deep_merge(base: Mapping, changes: Mapping, strict: bool = False, label: str = "Key",
               _path: tuple = ()) -> dict:
    """A new dict: ``base`` with ``changes`` merged in, nested dicts recursively.

    Values that are not both dicts (lists included) replace the base value whole; neither
    input is modified. With ``strict``, a key of ``changes`` that ``base`` lacks raises
    ``KeyError`` naming its dotted path (after ``label``) and the valid keys at that level.
    """
    out = copy.deepcopy(dict(base))
    for key, value in changes.items():
        if strict and key not in base:
            full = ".".join(str(k) for k in (*_path, key))
            where = ".".join(map(str, _path)) or "the top level"
            raise KeyError(f"{label} {full!r} is not in the default config; valid keys at "
                           f"{where}: {sorted(map(str, base))}.")
        if isinstance(value, Mapping) and isinstance(base.get(key), Mapping):
            out[key] = deep_merge(base[key], value, strict, label, (*_path, key))
        else:
            out[key] = copy.deepcopy(value)
    return out
