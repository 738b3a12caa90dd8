"""How replay buffers choose what to replay: uniformly, or in proportion to priority.

A sampling scheme picks *start steps* in a :class:`~rlfast.replays.storage.ReplayStorage`.
Starts are restricted to multiples of ``stride`` (1 for single transitions; the RNN-state
interval for sequences, which may only start where a state was stored), and to steps whose
``off_backward`` following steps are written and whose ``off_forward`` preceding steps are
not overwritten (see :mod:`rlfast.replays.ring`). :class:`PrioritizedSampling` keeps one
sum-tree leaf per allowed start (``[T // stride, B]``). With ``share_memory`` a scheme keeps its
state (the tree, the count of started rows, ``beta``) on OS shared memory, for buffers shared
with forked children.
"""
from __future__ import annotations

import math
from typing import Any, Callable

import numpy as np

from rlfast.replays.cells import cell_array, cell_property
from rlfast.replays.ring import rows_from_ages, valid_age_range, valid_rows
from rlfast.replays.storage import ReplayStorage
from rlfast.replays.sum_tree import AsyncSumTree, SumTree, check_priorities
from rlfast.utils.checks import check_fraction, check_int

__all__ = ["UniformSampling", "PrioritizedSampling", "check_starts", "check_alpha",
           "tree_windows", "alpha_power", "advance_tree", "importance_weights"]


# ---------------------------------------------------------------- shared with the device twins
# The checks and arithmetic below serve these schemes and their device twins alike
# (rlfast.replays.device_buffers, rlfast.replays.device_tree): they need only the storage's
# host integers T, B, size, off_forward and n_appended.

def check_starts(storage: Any, off_backward: int, stride: int) -> tuple[int, int]:
    """Checked ``(off_backward, stride)``: the stride divides ``T`` and some row is valid."""
    off_backward = check_int(off_backward, "off_backward", minimum=0)
    stride = check_int(stride, "stride", minimum=1)
    if storage.T % stride:
        raise ValueError(f"stride {stride} must divide T={storage.T}")
    if off_backward + storage.off_forward >= storage.T:
        raise ValueError(_too_small(storage, off_backward))
    return off_backward, stride


def check_alpha(alpha: float) -> float:
    """The priority exponent as a float >= 0."""
    try:
        alpha = float(alpha)
    except (TypeError, ValueError):
        raise TypeError(f"alpha must be a number >= 0; got {alpha!r}") from None
    if not alpha >= 0:
        raise ValueError(f"alpha must be >= 0; got {alpha}")
    return alpha


def tree_windows(storage: Any, off_backward: int, stride: int) -> tuple[int, int, int]:
    """``(tree_T, tree_back, tree_forward)``: tree rows are allowed starts; windows in rows
    cover the step windows (conservative by less than one stride when appends are not
    aligned to it)."""
    tree_T = storage.T // stride
    tree_back = math.ceil(off_backward / stride)
    tree_forward = math.ceil(storage.off_forward / stride)
    if tree_back + tree_forward >= tree_T:
        raise ValueError(
            f"replay too short for a priority tree: T={storage.T} steps (size="
            f"{storage.size}, B={storage.B}) give {tree_T} starts of stride {stride}, "
            f"of which {tree_back} newest and {tree_forward} oldest are never valid; "
            f"increase size")
    return tree_T, tree_back, tree_forward


def alpha_power(priorities: Any, alpha: float) -> np.ndarray:
    """Raw host priorities, checked (ValueError), to ``p ** alpha``."""
    return check_priorities(priorities) ** alpha


def advance_tree(scheme: Any, priorities: Any, to_tree: Callable[[Any], Any]) -> None:
    """Move a prioritized scheme's tree over the starts its storage's last append wrote;
    raw ``priorities`` go to the tree as ``to_tree(priorities)`` (their ``p ** alpha``)."""
    started = -(-scheme.storage.n_appended // scheme.stride)  # ceil
    n_rows = started - scheme._rows_started
    scheme._rows_started = started
    if priorities is not None:
        if not scheme.input_priorities:
            raise ValueError("samples carry priorities but the buffer was built with "
                             "input_priorities=False")
        priorities = to_tree(priorities)
    if n_rows > 0:  # samples without priorities get default_priority
        scheme.tree.advance(n_rows, priorities=priorities)


def importance_weights(p: Any, total: Any, n_valid: int, beta: float) -> Any:
    """``w = (N * P(i)) ** -beta`` over the batch's largest, with ``P(i) = p / total`` and
    ``N = n_valid`` allowed starts (numpy arrays or torch tensors alike, in float64)."""
    weights = (n_valid * (p / total)) ** -beta
    return weights / weights.max()


class UniformSampling:
    """Start steps drawn uniformly among the allowed ones, environment index uniform.

    It keeps no state of its own (it reads the storage's cursor), so ``share_memory`` only
    records that the storage it samples is shared.
    """

    def __init__(self, storage: ReplayStorage, off_backward: int, stride: int = 1,
                 share_memory: bool = False):
        self.storage = storage
        self.share_memory = bool(share_memory)
        self.off_backward, self.stride = check_starts(storage, off_backward, stride)

    def advance(self, T_in: int, priorities: Any = None) -> None:
        """Called after each append (nothing to track for uniform sampling)."""
        if priorities is not None:
            raise ValueError("input priorities were given to a uniform replay buffer; use a "
                             "Prioritized* buffer with input_priorities=True")

    def sample(self, n: int) -> tuple[np.ndarray, np.ndarray, None]:
        """``(T_idxs, B_idxs, None)`` of ``n`` starts (with replacement)."""
        s = self.storage
        lo, hi = valid_age_range(s.t, s.full, s.T, self.off_backward, s.off_forward)
        if self.stride == 1:
            if hi < lo:
                raise RuntimeError(_not_enough(s, self.off_backward))
            T_idxs = rows_from_ages(np.random.randint(lo, hi + 1, size=n), s.t, s.T)
        else:
            starts = np.arange(0, s.T, self.stride)
            starts = starts[valid_rows(starts, s.t, s.full, s.T, self.off_backward,
                                       s.off_forward)]
            if starts.size == 0:
                raise RuntimeError(_not_enough(s, self.off_backward))
            T_idxs = starts[np.random.randint(0, starts.size, size=n)]
        return T_idxs, np.random.randint(0, s.B, size=n), None


class PrioritizedSampling:
    """Proportional prioritized sampling over allowed starts, with importance weights.

    Priorities given to the scheme (input priorities with new samples, or new priorities of
    the last batch) are raw values ``p``; the tree stores ``p ** alpha``. Importance weights
    are ``w = (N * P(i)) ** -beta`` with ``P(i)`` the sampling probability and ``N`` the
    number of allowed starts, divided by the batch's largest weight. With ``share_memory``
    the tree is an :class:`~rlfast.replays.sum_tree.AsyncSumTree` and the started-row count
    and ``beta`` are on shared memory too.
    """

    _rows_started = cell_property("_counts", 0, int,
                                  "Tree rows whose start step has been written (unwrapped).")
    beta = cell_property("_beta_cell", 0, float, "The importance-sampling exponent.")

    def __init__(self, storage: ReplayStorage, off_backward: int, stride: int = 1,
                 alpha: float = 0.6, beta: float = 0.4, default_priority: float = 1,
                 unique: bool = False, input_priorities: bool = False,
                 input_priority_shift: int = 0, share_memory: bool = False):
        self.storage = storage
        self.share_memory = bool(share_memory)
        self._counts = cell_array(1, np.int64, self.share_memory)
        self._beta_cell = cell_array(1, np.float64, self.share_memory)
        off_backward, self.stride = check_starts(storage, off_backward, stride)
        self.alpha = check_alpha(alpha)
        self.beta = check_fraction(beta, "beta")
        default = float(check_priorities(default_priority, "default_priority"))
        self.unique = bool(unique)
        self.input_priorities = bool(input_priorities)
        tree_T, tree_back, tree_forward = tree_windows(storage, off_backward, self.stride)
        tree_cls = AsyncSumTree if self.share_memory else SumTree
        self.tree = tree_cls(
            T=tree_T, B=storage.B, off_backward=tree_back, off_forward=tree_forward,
            default_value=default ** self.alpha,
            enable_input_priorities=self.input_priorities,
            input_priority_shift=input_priority_shift, share_memory=self.share_memory)
        self._rows_started = 0  # tree rows whose start step has been written (unwrapped)

    def set_beta(self, beta: float) -> None:
        """Set the importance-sampling exponent (annealed by the algorithm)."""
        self.beta = check_fraction(beta, "beta")

    def advance(self, T_in: int, priorities: Any = None) -> None:
        """Move the tree over the starts the last append wrote (``priorities`` raw)."""
        advance_tree(self, priorities, lambda p: alpha_power(p, self.alpha))

    def sample(self, n: int, uniforms: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(T_idxs, B_idxs, is_weights)`` of ``n`` starts drawn by priority; ``uniforms``
        (``[n]`` draws in ``[0, 1)``) replace the random draws (see :meth:`SumTree.sample`)."""
        rows, B_idxs, p = self.tree.sample(n, unique=self.unique, uniforms=uniforms)
        weights = importance_weights(p, self.tree.total, self.tree.n_valid_rows() * self.tree.B,
                                     self.beta)
        return rows * self.stride, B_idxs, weights.astype(np.float32)

    def update_batch_priorities(self, priorities: Any) -> None:
        """New raw priorities for the last sampled batch (stored as ``p ** alpha``)."""
        p = priorities.detach().cpu().numpy() if hasattr(priorities, "detach") else priorities
        self.tree.update_batch_priorities(alpha_power(p, self.alpha))

    def update_priorities(self, T_idxs: Any, B_idxs: Any, priorities: Any) -> None:
        """New raw priorities (stored as ``p ** alpha``) for the starts ``(T_idxs[i],
        B_idxs[i])`` of a batch drawn earlier, e.g. by a prefetching thread some batches ago;
        starts whose row is no longer valid are skipped (see :meth:`SumTree.update_priorities`)."""
        T_idxs, B_idxs = np.asarray(T_idxs), np.asarray(B_idxs)
        for name, idxs, bound in (("T_idxs", T_idxs, self.storage.T),
                                  ("B_idxs", B_idxs, self.storage.B)):
            if idxs.dtype.kind not in "iu":
                raise TypeError(f"{name} must be integers; got dtype {idxs.dtype}")
            if idxs.size and (idxs.min() < 0 or idxs.max() >= bound):
                raise ValueError(f"{name} must lie in [0, {bound}); got values from "
                                 f"{idxs.min()} to {idxs.max()}")
        if T_idxs.shape != B_idxs.shape:
            raise ValueError(f"T_idxs and B_idxs must have the same shape; got {T_idxs.shape} "
                             f"and {B_idxs.shape}")
        if np.any(T_idxs % self.stride):
            raise ValueError(f"T_idxs must be multiples of the stride {self.stride} (starts the "
                             f"scheme can draw); got {T_idxs[T_idxs % self.stride != 0][:5]}")
        p = priorities.detach().cpu().numpy() if hasattr(priorities, "detach") else priorities
        leaves = (T_idxs // self.stride) * self.tree.B + B_idxs
        self.tree.update_priorities(leaves, alpha_power(p, self.alpha))


def _too_small(storage: Any, off_backward: int) -> str:
    return (f"replay of T={storage.T} rows (size={storage.size}, B={storage.B}) is too short: "
            f"{off_backward} newest and {storage.off_forward} oldest rows are never valid; "
            f"increase size")


def _not_enough(storage: Any, off_backward: int) -> str:
    return (f"not enough data to sample: {storage.n_appended} steps appended, replay needs more "
            f"than {off_backward} (n-step / sequence length); append more before sampling")
