"""Numpy counterparts of the tensor helpers in ``rlfast.utils.tensor``.

Used where data stays in numpy (samplers, replay buffers): selecting entries
at per-element indexes, one-hot encoding, masked means, and finding the
``[B]`` / ``[T, B]`` leading dims of an array.
"""
from __future__ import annotations

from typing import Optional, Tuple

import numpy as np

__all__ = ["select_at_indexes", "to_onehot", "valid_mean", "infer_leading_dims"]


def select_at_indexes(indexes: np.ndarray, array: np.ndarray) -> np.ndarray:
    """Pick ``array[..., indexes, ...]`` element-wise over shared leading dims.

    ``array``'s leading dims must equal ``indexes.shape``; the next dim is
    indexed and trailing dims are kept, so the result has shape
    ``indexes.shape + array.shape[indexes.ndim + 1:]``.
    """
    indexes = np.asarray(indexes)
    dim = indexes.ndim
    if tuple(array.shape[:dim]) != tuple(indexes.shape) or array.ndim <= dim:
        raise ValueError(
            f"select_at_indexes: array shape {array.shape} must start with indexes "
            f"shape {indexes.shape} and have at least one more dim."
        )
    num = indexes.size
    flat = array.reshape((num,) + array.shape[dim:])
    selected = flat[np.arange(num), indexes.reshape(-1).astype(np.int64)]
    return selected.reshape(indexes.shape + array.shape[dim + 1:])


def to_onehot(indexes: np.ndarray, dim: int, dtype=None) -> np.ndarray:
    """One-hot encode integer ``indexes`` into a new trailing axis of size ``dim``.

    ``dtype`` defaults to the dtype of ``indexes``.
    """
    indexes = np.asarray(indexes)
    if dtype is None:
        dtype = indexes.dtype
    onehot = np.zeros(indexes.shape + (dim,), dtype=dtype)
    np.put_along_axis(onehot, indexes[..., None].astype(np.int64), 1, axis=-1)
    return onehot


def valid_mean(array: np.ndarray, valid: Optional[np.ndarray] = None, axis: Optional[int] = None):
    """Mean of ``array`` over entries where ``valid`` is nonzero, optionally along ``axis``.

    ``valid`` may have fewer dims than ``array``; it is broadcast over trailing
    dims.  Where no entry is valid the mean is 0 rather than NaN.
    """
    array = np.asarray(array)
    if valid is None:
        return array.mean(axis=axis)
    valid = np.asarray(valid).astype(array.dtype if np.issubdtype(array.dtype, np.floating)
                                     else np.float64)
    if valid.ndim < array.ndim:
        valid = valid.reshape(valid.shape + (1,) * (array.ndim - valid.ndim))
    valid = np.broadcast_to(valid, array.shape)
    total = (array * valid).sum(axis=axis)
    count = valid.sum(axis=axis)
    return total / np.where(count == 0, 1, count)


def infer_leading_dims(array: np.ndarray, dim: int) -> Tuple[int, int, tuple, bool, bool]:
    """Find up to two leading dims in front of ``dim`` data dims of ``array``.

    Returns ``(T, B, shape, has_T, has_B)``: the leading sizes (1 where absent),
    the data shape, and whether each leading dim was found.  ``[B, ...]`` input
    gives ``has_B`` only; ``[T, B, ...]`` gives both.
    """
    if dim < 0:
        raise ValueError(f"infer_leading_dims: dim must be >= 0, got {dim}.")
    shape = np.shape(array)
    lead_dim = len(shape) - dim
    if not 0 <= lead_dim <= 2:
        raise ValueError(
            f"infer_leading_dims: array of shape {shape} has {len(shape)} dims, but with "
            f"{dim} data dims it must have between {dim} and {dim + 2} dims "
            "(leading dims [], [B] or [T,B])."
        )
    T = B = 1
    has_T = has_B = False
    if lead_dim == 2:
        T, B = shape[:2]
        has_T = has_B = True
    elif lead_dim == 1:
        B = shape[0]
        has_B = True
    return T, B, tuple(shape[lead_dim:]), has_T, has_B
