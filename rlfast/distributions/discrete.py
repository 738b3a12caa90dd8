"""One-hot conversions shared by discrete distributions."""
from __future__ import annotations

from typing import Optional

import torch

from rlfast.utils.tensor import from_onehot, to_onehot

__all__ = ["DiscreteMixin"]


class DiscreteMixin:
    """Holds the number of discrete outcomes and converts to and from one-hot.

    ``dtype`` is the dtype of integer samples (``torch.long`` by default) and
    ``onehot_dtype`` the dtype of one-hot vectors (float by default, ready to
    feed a network).  Leading dims are preserved by both conversions.
    """

    def __init__(self, dim: int, dtype: torch.dtype = torch.long, onehot_dtype: torch.dtype = torch.float):
        if int(dim) != dim or dim < 1:
            raise ValueError(f"Discrete distribution dim must be a positive integer, got {dim!r}.")
        self._dim = int(dim)
        self.dtype = dtype
        self.onehot_dtype = onehot_dtype

    @property
    def dim(self) -> int:
        """Number of discrete outcomes."""
        return self._dim

    def to_onehot(self, indexes: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """Integer indexes ``[...]`` to one-hot ``[..., dim]`` (``onehot_dtype`` by default)."""
        return to_onehot(indexes, self._dim, dtype=dtype or self.onehot_dtype)

    def from_onehot(self, onehot: torch.Tensor, dtype: Optional[torch.dtype] = None) -> torch.Tensor:
        """One-hot ``[..., dim]`` to integer indexes ``[...]`` (``dtype`` by default)."""
        return from_onehot(onehot, dtype=dtype or self.dtype)
