"""Independent categorical distributions, one per action dimension (MultiDiscrete actions).

An action is a vector of ``D`` integers; dimension ``d`` takes one of ``nvec[d]`` values
``start[d], ..., start[d] + nvec[d] - 1``.  The model outputs the ``D`` probability vectors
concatenated along the trailing dim, ``DistInfo(prob=[..., sum(nvec)])`` (each segment sums to
one), so the dist_info is the same namedarraytuple as ``Categorical``'s and travels through
the samples buffer and the algorithms unchanged.  The dimensions are independent, so
log-likelihood, entropy and KL are sums over dimensions; on the concatenated vector the
entropy and KL sums are plain sums over all ``sum(nvec)`` entries.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from rlfast.distributions.base import Distribution
from rlfast.distributions.categorical import (EPS, checked_prob, draw_categorical, probs_entropy,
                                              probs_kl)

__all__ = ["MultiCategorical"]

IntsLike = int | Sequence[int] | np.ndarray


def _int_vector(value: IntsLike, length: int, name: str) -> np.ndarray:
    """``value`` (a scalar or one entry per dimension) as an int64 vector of ``length``."""
    arr = np.asarray(value)
    if arr.dtype.kind not in "biu" and not (arr.dtype.kind == "f" and np.all(arr == np.round(arr))):
        raise ValueError(f"MultiCategorical: {name} must hold integers, got {value!r}.")
    try:
        return np.broadcast_to(arr.astype(np.int64), (length,)).copy()
    except ValueError:
        raise ValueError(f"MultiCategorical: {name} {value!r} must be a scalar or have one entry "
                         f"per dimension ({length}).") from None


class MultiCategorical(Distribution):
    """``D`` independent categoricals over ``nvec[d]`` values each, offset by ``start[d]``.

    Args:
        nvec: number of values per dimension (a 1-D sequence of positive ints).
        start: the smallest value of each dimension (scalar or one per dimension), as in
            gymnasium's ``MultiDiscrete(nvec, start)``; samples and the ``x`` given to
            ``log_likelihood`` are in these units.
        dtype: dtype of sampled actions.
        onehot_dtype: dtype of ``to_onehot`` outputs.

    ``dim`` is ``sum(nvec)``, the trailing size of ``dist_info.prob``; ``n_dims`` is ``D``.
    Samples and ``argmax`` have shape ``[..., D]`` for ``prob`` of shape ``[..., sum(nvec)]``.
    """

    def __init__(self, nvec: IntsLike, start: IntsLike = 0, dtype: torch.dtype = torch.long,
                 onehot_dtype: torch.dtype = torch.float) -> None:
        nvec_arr = np.asarray(nvec)
        if nvec_arr.ndim != 1 or nvec_arr.size == 0:
            raise ValueError(f"MultiCategorical: nvec must be a non-empty 1-D sequence of sizes, "
                             f"got {nvec!r}.")
        nvec_arr = _int_vector(nvec_arr, nvec_arr.size, "nvec")
        if np.any(nvec_arr < 1):
            raise ValueError(f"MultiCategorical: every entry of nvec must be >= 1, got {nvec!r}.")
        self._nvec = tuple(int(n) for n in nvec_arr)
        self._start = tuple(int(s) for s in _int_vector(start, len(self._nvec), "start"))
        self._dim = int(sum(self._nvec))
        self.dtype = dtype
        self.onehot_dtype = onehot_dtype
        offsets = np.concatenate([[0], np.cumsum(self._nvec)[:-1]]).astype(np.int64)
        max_n = max(self._nvec)
        # pad_index[d, k]: position of value k of dimension d in the concatenated vector (0
        # where k >= nvec[d]; pad_mask is False there), so [..., sum(nvec)] -> [..., D, max_n].
        pad_index = offsets[:, None] + np.arange(max_n)[None, :]
        pad_mask = np.arange(max_n)[None, :] < np.asarray(self._nvec)[:, None]
        self._cpu = dict(offsets=torch.as_tensor(offsets),
                         start=torch.as_tensor(self._start, dtype=torch.long),
                         pad_index=torch.as_tensor(np.where(pad_mask, pad_index, 0)),
                         pad_mask=torch.as_tensor(pad_mask))
        self._on_device: dict = {}

    # ---- layout ------------------------------------------------------------------------
    @property
    def nvec(self) -> tuple[int, ...]:
        """Number of values of each dimension."""
        return self._nvec

    @property
    def start(self) -> tuple[int, ...]:
        """Smallest value of each dimension."""
        return self._start

    @property
    def n_dims(self) -> int:
        """Number of action dimensions ``D``."""
        return len(self._nvec)

    def _consts(self, device: torch.device) -> dict:
        """The index tensors on ``device`` (copied once per device)."""
        if device.type == "cpu":
            return self._cpu
        if device not in self._on_device:
            self._on_device[device] = {k: v.to(device) for k, v in self._cpu.items()}
        return self._on_device[device]

    def _prob(self, dist_info: Any) -> torch.Tensor:
        return checked_prob(dist_info, self._dim, f"MultiCategorical(nvec={list(self._nvec)})",
                            f"sum(nvec) = {self._dim}")

    def _padded(self, prob: torch.Tensor) -> torch.Tensor:
        """``[..., sum(nvec)]`` -> ``[..., D, max_n]``, zero beyond each dimension's values."""
        consts = self._consts(prob.device)
        padded = prob[..., consts["pad_index"]]
        return padded.masked_fill(~consts["pad_mask"], 0.0)

    def _selected(self, x: torch.Tensor, prob: torch.Tensor) -> torch.Tensor:
        """``p_d(x_d)`` for every dimension: ``[..., D]``."""
        consts = self._consts(prob.device)
        index = x.long() - consts["start"] + consts["offsets"]
        return torch.gather(prob, -1, index)

    # ---- formulas ----------------------------------------------------------------------
    def sample(self, dist_info: Any) -> torch.Tensor:
        """One value per dimension and leading position, ``[..., D]``, each drawn from its
        own categorical with ``torch.multinomial`` (on CUDA the same law without host
        synchronisation, see ``categorical.draw_categorical``)."""
        prob = self._prob(dist_info)
        padded = self._padded(prob)
        flat = padded.reshape(-1, padded.shape[-1])
        index = draw_categorical(flat).reshape(padded.shape[:-1])
        return (index + self._consts(prob.device)["start"]).type(self.dtype)

    def argmax(self, dist_info: Any) -> torch.Tensor:
        """The most likely value of every dimension, ``[..., D]`` (the joint mode, since the
        dimensions are independent)."""
        prob = self._prob(dist_info)
        index = self._padded(prob).argmax(dim=-1)
        return (index + self._consts(prob.device)["start"]).type(self.dtype)

    def log_likelihood(self, x: torch.Tensor, dist_info: Any) -> torch.Tensor:
        """log p(x) = sum_d log p_d(x_d), with ``x`` shaped ``[..., D]``; returns ``[...]``."""
        return torch.sum(torch.log(self._selected(x, self._prob(dist_info)) + EPS), dim=-1)

    def likelihood_ratio(self, x: torch.Tensor, old_dist_info: Any,
                         new_dist_info: Any) -> torch.Tensor:
        """p_new(x) / p_old(x) = prod_d p_new,d(x_d) / p_old,d(x_d)."""
        new = self._selected(x, self._prob(new_dist_info))
        old = self._selected(x, self._prob(old_dist_info))
        return torch.prod((new + EPS) / (old + EPS), dim=-1)

    def kl(self, old_dist_info: Any, new_dist_info: Any) -> torch.Tensor:
        """KL(old || new) = sum_d sum_k p_dk (log p_dk - log q_dk)."""
        return probs_kl(self._prob(old_dist_info), self._prob(new_dist_info))

    def entropy(self, dist_info: Any) -> torch.Tensor:
        """H = sum_d H(p_d) = -sum_d sum_k p_dk log p_dk."""
        return probs_entropy(self._prob(dist_info))

    # ---- one-hot -----------------------------------------------------------------------
    def to_onehot(self, x: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Actions ``[..., D]`` to the concatenated one-hot vectors ``[..., sum(nvec)]`` (what
        a recurrent model reads as the previous action)."""
        consts = self._consts(x.device)
        index = x.long() - consts["start"] + consts["offsets"]
        out = torch.zeros(*x.shape[:-1], self._dim, dtype=dtype or self.onehot_dtype,
                          device=x.device)
        return out.scatter_(-1, index, 1)

    def from_onehot(self, onehot: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
        """Concatenated one-hot vectors ``[..., sum(nvec)]`` back to actions ``[..., D]``."""
        index = self._padded(onehot).argmax(dim=-1)
        return (index + self._consts(onehot.device)["start"]).type(dtype or self.dtype)

    def __repr__(self) -> str:
        start = "" if not any(self._start) else f", start={list(self._start)}"
        return f"MultiCategorical(nvec={list(self._nvec)}{start})"

