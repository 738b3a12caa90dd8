"""One-hot conversions shared by discrete distributions."""
from __future__ import annotations


import torch

from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import from_onehot, to_onehot

__all__ = ["DiscreteMixin"]


class DiscreteMixin:
    """Holds the number of discrete outcomes and converts to and from one-hot.

    ``dtype`` is the dtype of integer samples (``torch.long`` by default) and
    ``onehot_dtype`` the dtype of one-hot vectors (float by default, ready to
    feed a network).  Leading dims are preserved by both conversions.
    """

    def __init__(self, dim: int, dtype: torch.dtype = torch.long,
                 onehot_dtype: torch.dtype = torch.float):
        self._dim = check_positive(dim, "dim", integer=True, owner=type(self).__name__)
        self.dtype = dtype
        self.onehot_dtype = onehot_dtype

    @property
    def dim(self) -> int:
        """Number of discrete outcomes."""
        return self._dim

    def to_onehot(self, indexes: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Integer indexes ``[...]`` to one-hot ``[..., dim]`` (``onehot_dtype`` by default)."""
        return to_onehot(indexes, self._dim, dtype=dtype or self.onehot_dtype)

    def from_onehot(self, onehot: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """One-hot ``[..., dim]`` to integer indexes ``[...]`` (``dtype`` by default)."""
        return from_onehot(onehot, dtype=dtype or self.dtype)
