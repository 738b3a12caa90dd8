"""Torch tensor helpers shared by models, distributions and algorithms.

The leading-dimension pair ``infer_leading_dims`` / ``restore_leading_dims``
lets one model ``forward()`` serve the sampler (inputs with ``[]`` or ``[B]``
leading dims) and the algorithm (inputs with ``[T, B]`` leading dims): the model
flattens whatever it finds into one batch dimension, computes, and restores the
caller's layout at the end.
"""
from __future__ import annotations

from typing import Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "infer_leading_dims",
    "restore_leading_dims",
    "select_at_indexes",
    "to_onehot",
    "from_onehot",
    "valid_mean",
]


def infer_leading_dims(tensor: torch.Tensor, dim: int) -> Tuple[int, int, int, torch.Size]:
    """Find up to two leading dims in front of ``dim`` data dims.

    Returns ``(lead_dim, T, B, shape)``: ``lead_dim`` is 0, 1 or 2 (no leading
    dims, ``[B]``, or ``[T, B]``); ``T`` is the first leading size when there are
    two (else 1); ``B`` is the last leading size when there is at least one (else
    1); ``shape`` is the data shape after the leading dims.  Use at the start of a
    model's ``forward()``, paired with ``restore_leading_dims()`` at its end.
    """
    if dim < 0:
        raise ValueError(f"infer_leading_dims: dim must be >= 0, got {dim}.")
    n_dims = tensor.dim()
    lead_dim = n_dims - dim
    if not 0 <= lead_dim <= 2:
        raise ValueError(
            f"infer_leading_dims: tensor of shape {tuple(tensor.shape)} has {n_dims} dims, "
            f"but with {dim} data dims it must have between {dim} and {dim + 2} dims "
            "(leading dims [], [B] or [T,B])."
        )
    T = B = 1
    if lead_dim == 2:
        T, B = tensor.shape[:2]
    elif lead_dim == 1:
        B = tensor.shape[0]
    shape = tensor.shape[lead_dim:]
    return lead_dim, T, B, shape


def _restore_one(tensor: Optional[torch.Tensor], lead_dim: int, T: int, B: int):
    if tensor is None:
        return None
    if lead_dim == 2:
        return tensor.reshape((T, B) + tuple(tensor.shape[1:]))
    if lead_dim == 0:
        if tensor.shape[0] != 1:
            raise ValueError(
                f"restore_leading_dims: lead_dim=0 needs a leading batch dim of size 1, "
                f"got tensor of shape {tuple(tensor.shape)}."
            )
        return tensor.squeeze(0)
    return tensor


def restore_leading_dims(
    tensors: Union[torch.Tensor, Sequence[torch.Tensor]], lead_dim: int, T: int = 1, B: int = 1
):
    """Reshape tensors computed with one batch dim back to ``[]``, ``[B]`` or ``[T, B]``.

    ``tensors`` is one tensor or a tuple/list of tensors, each with a leading
    ``T*B`` batch dim; the result has the same kind (tuple in, tuple out).  Pass
    ``lead_dim, T, B`` as returned by ``infer_leading_dims()``.  ``None`` entries
    are passed through, so optional outputs need no special casing.
    """
    if lead_dim not in (0, 1, 2):
        raise ValueError(f"restore_leading_dims: lead_dim must be 0, 1 or 2, got {lead_dim}.")
    if isinstance(tensors, (tuple, list)):
        restored = [_restore_one(t, lead_dim, T, B) for t in tensors]
        return type(tensors)(restored) if isinstance(tensors, list) else tuple(restored)
    return _restore_one(tensors, lead_dim, T, B)


def select_at_indexes(indexes: torch.Tensor, tensor: torch.Tensor) -> torch.Tensor:
    """Pick ``tensor[..., indexes, ...]`` element-wise over shared leading dims.

    ``tensor``'s leading dims must equal ``indexes.shape``; the next dim of
    ``tensor`` is indexed, and any trailing dims are kept.  E.g. action values
    ``q[T,B,A]`` and actions ``a[T,B]`` give ``q[t,b,a[t,b]]`` of shape ``[T,B]``.
    """
    dim = indexes.dim()
    if tuple(tensor.shape[:dim]) != tuple(indexes.shape) or tensor.dim() <= dim:
        raise ValueError(
            f"select_at_indexes: tensor shape {tuple(tensor.shape)} must start with indexes "
            f"shape {tuple(indexes.shape)} and have at least one more dim."
        )
    num = indexes.numel()
    flat = tensor.reshape((num,) + tuple(tensor.shape[dim:]))
    rows = torch.arange(num, device=indexes.device)
    selected = flat[rows, indexes.reshape(-1).long()]
    return selected.reshape(tuple(indexes.shape) + tuple(tensor.shape[dim + 1:]))


def to_onehot(indexes: torch.Tensor, num: int, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """One-hot encode integer ``indexes`` into a new trailing dim of size ``num``.

    ``dtype`` defaults to the dtype of ``indexes`` (pass e.g. ``torch.float`` to
    feed the result to a network).
    """
    if dtype is None:
        dtype = indexes.dtype
    onehot = torch.zeros(tuple(indexes.shape) + (num,), dtype=dtype, device=indexes.device)
    onehot.scatter_(-1, indexes.unsqueeze(-1).long(), 1)
    return onehot


def from_onehot(onehot: torch.Tensor, dim: int = -1,
                dtype: Optional[torch.dtype] = None) -> torch.Tensor:
    """Argmax over ``dim`` (default trailing) of ``onehot``, optionally cast to ``dtype``."""
    indexes = torch.argmax(onehot, dim=dim)
    if dtype is not None:
        indexes = indexes.type(dtype)
    return indexes


def valid_mean(
    tensor: torch.Tensor, valid: Optional[torch.Tensor] = None, dim: Optional[int] = None
) -> torch.Tensor:
    """Mean of ``tensor`` over entries where ``valid`` is nonzero, optionally along ``dim``.

    ``valid`` may have fewer dims than ``tensor`` (e.g. ``[T,B]`` mask for a
    ``[T,B,A]`` tensor); it is broadcast over the trailing dims.  Where no entry
    is valid the mean is 0 rather than NaN, so an all-invalid batch cannot poison
    a loss.
    """
    if valid is None:
        return tensor.mean() if dim is None else tensor.mean(dim=dim)
    valid = valid.to(dtype=tensor.dtype)
    if valid.dim() < tensor.dim():
        valid = valid.reshape(tuple(valid.shape) + (1,) * (tensor.dim() - valid.dim()))
    valid = valid.expand_as(tensor)
    total = (tensor * valid).sum() if dim is None else (tensor * valid).sum(dim=dim)
    count = valid.sum() if dim is None else valid.sum(dim=dim)
    return total / torch.where(count == 0, torch.ones_like(count), count)
