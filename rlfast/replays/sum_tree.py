"""Sum tree over a ``[T, B]`` ring of priorities, for proportional prioritized replay.

Leaves are the ``T * B`` priorities (row-major: leaf ``t * B + b``), padded with zeros up to a
power of two; every internal node holds the sum of its two children, so drawing a leaf with
probability proportional to its priority is one descent from the root. All operations are
vectorized over the leaves or samples involved (one numpy step per tree level), and internal
nodes are always recomputed from their children rather than adjusted by differences, so
rounding error never accumulates. The tree is float64: in float32 a descent can end on a
zero leaf when the remaining mass is rounded past the last positive one.

Rows near the cursor are temporarily invalid (see :mod:`rlfast.replays.ring`); their leaves are
held at zero while the priority they will get is kept aside, and switched on once valid.
"""
from __future__ import annotations

from typing import Any, Callable, NamedTuple

import numpy as np

from rlfast.replays.cells import cell_array, cell_property
from rlfast.replays.ring import n_valid_rows, ring_rows, valid_rows
from rlfast.utils.buffer import np_mp_array
from rlfast.utils.checks import check_int

__all__ = ["SumTree", "AsyncSumTree"]


def check_priorities(priorities: Any, name: str = "priorities") -> np.ndarray:
    """``priorities`` as float64, rejecting negative and non-finite values."""
    p = np.asarray(priorities, dtype=np.float64)
    if p.size and (not np.all(np.isfinite(p)) or p.min() < 0):
        bad = p[~np.isfinite(p) | (p < 0)].ravel()[:5]
        raise ValueError(f"{name} must be finite and >= 0; got values such as {bad.tolist()}")
    return p


def check_uniforms(uniforms: Any, n: int, unique: bool) -> np.ndarray:
    """``uniforms`` as a float64 ``[n]`` array of draws in ``[0, 1)`` for a non-unique sample."""
    if unique:
        raise ValueError("uniforms can only be given with unique=False (a unique sample draws "
                         "a data-dependent number of values)")
    u = np.asarray(uniforms, dtype=np.float64)
    if u.shape != (n,):
        raise ValueError(f"uniforms must have shape [n]=[{n}]; got shape {u.shape}")
    if u.size and not (np.all(u >= 0) and np.all(u < 1)):  # NaN fails both
        bad = u[~((u >= 0) & (u < 1))][:5]
        raise ValueError(f"uniforms must lie in [0, 1); got values such as {bad.tolist()}")
    return u


class TreeShape(NamedTuple):
    """The checked arguments of a sum tree, its depth and the index of its first leaf."""
    T: int
    B: int
    off_backward: int
    off_forward: int
    default_value: float
    enable_input_priorities: bool
    input_priority_shift: int
    n_levels: int
    L: int


def tree_shape(T: int, B: int, off_backward: int, off_forward: int, default_value: float,
               enable_input_priorities: bool, input_priority_shift: int) -> TreeShape:
    """Check a sum tree's arguments (shared by :class:`SumTree` and its device twin)."""
    T = check_int(T, "T", minimum=1)
    B = check_int(B, "B", minimum=1)
    off_backward = check_int(off_backward, "off_backward", minimum=0)
    off_forward = check_int(off_forward, "off_forward", minimum=0)
    if off_backward + off_forward >= T:
        raise ValueError(f"off_backward + off_forward ({off_backward} + {off_forward}) must be "
                         f"< T ({T}), else no row is valid")
    default_value = float(check_priorities(default_value, "default_value"))
    input_priority_shift = check_int(input_priority_shift, "input_priority_shift", minimum=0)
    if input_priority_shift >= T:
        raise ValueError(f"input_priority_shift must be < T ({T}); got {input_priority_shift}")
    n_levels = (T * B - 1).bit_length()  # depth of the leaves below the root
    return TreeShape(T, B, off_backward, off_forward, default_value,
                     bool(enable_input_priorities), input_priority_shift, n_levels,
                     1 << n_levels)  # L: index of the first leaf; the root is node 1


def check_advance(T: int, tree_T: int) -> int:
    """``T`` new rows for a tree of ``tree_T`` rows: an int in ``[0, tree_T]``."""
    T = check_int(T, "T", minimum=0)
    if T > tree_T:
        raise ValueError(f"cannot advance by T={T}: more rows than the tree has ({tree_T})")
    return T


def rows_to_refresh(tree: Any, old: int, T: int) -> np.ndarray:
    """Rows whose validity an advance by ``T`` from cursor ``old`` may change: those leaving
    the backward window, the new rows, and the new forward window."""
    n_refresh = min(tree.T, T + tree.off_backward + tree.off_forward)
    return ring_rows(old - tree.off_backward, n_refresh, tree.T)


def descend(tree: Any, values: Any, nodes: Any, n_levels: int,
            where: Callable[[Any, Any, Any], Any]) -> Any:
    """Leaf nodes reached from ``nodes`` by the mass ``values`` (numpy arrays with
    ``np.where``, or torch tensors with ``torch.where``): one step per level."""
    for _ in range(n_levels):
        left = nodes << 1
        left_sum = tree[left]
        # Go right when the value is past the left mass, unless the right side is empty
        # (rounding): every node visited then has a positive sum, so leaves are never zero.
        right = (values >= left_sum) & (tree[left + 1] > 0)
        values = where(right, values - left_sum, values)
        nodes = left + right
    return nodes


class SumTree:
    """Binary sum tree over ``[T, B]`` priorities with a wrapping time cursor.

    ``advance(T)`` moves the cursor over ``T`` new rows: they get ``default_value`` (or input
    priorities), the ``off_backward`` rows before the new cursor and the ``off_forward`` rows
    from it on get zero, and rows that left those windows get their kept priority back.
    ``sample(n)`` draws leaves proportionally to priority; ``update_batch_priorities`` sets new
    priorities at the leaves of the last sample. ``input_priority_shift`` assigns input
    priorities to rows that many rows behind the new ones (e.g. a sequence's priority known
    only after later data arrived).

    With ``share_memory`` the nodes, the kept priorities, the cursor and the wrapped flag live
    on OS shared memory, so forked children advance and update the tree their parent samples
    (callers serialize access). The leaves of the last sample stay local to the process that
    drew them: each sampling process updates its own batch.
    """

    t = cell_property("_cells", 0, int, "Cursor: the next row to be advanced over.")
    _full = cell_property("_cells", 1, bool, "Whether the cursor has wrapped at least once.")

    def __init__(self, T: int, B: int, off_backward: int, off_forward: int,
                 default_value: float = 1, enable_input_priorities: bool = False,
                 input_priority_shift: int = 0, share_memory: bool = False):
        (self.T, self.B, self.off_backward, self.off_forward, self.default_value,
         self.enable_input_priorities, self.input_priority_shift, self.n_levels, self._L) = \
            tree_shape(T, B, off_backward, off_forward, default_value, enable_input_priorities,
                       input_priority_shift)
        self.share_memory = bool(share_memory)
        zeros = np_mp_array if self.share_memory else np.zeros
        self.tree = zeros(2 * self._L, np.float64)
        self._kept = zeros((self.T, self.B), np.float64)  # priority each row will get
        self._cells = cell_array(2, np.int64, self.share_memory)  # t, full
        self.t = 0
        self._full = False
        self._last_leaves: np.ndarray | None = None

    # ---------------------------------------------------------------- read-only views
    @property
    def total(self) -> float:
        """Sum of all leaves (zero when nothing can be sampled)."""
        return float(self.tree[1])

    @property
    def leaves(self) -> np.ndarray:
        """The ``[T, B]`` leaf priorities (a read-only view)."""
        view = self.tree[self._L:self._L + self.T * self.B].reshape(self.T, self.B)
        view.flags.writeable = False
        return view

    @property
    def full(self) -> bool:
        """Whether the cursor has wrapped at least once (every row holds data)."""
        return self._full

    def n_valid_rows(self) -> int:
        """How many rows may be sampled now (their leaves are the only non-zero ones)."""
        return n_valid_rows(self.t, self._full, self.T, self.off_backward, self.off_forward)

    # ---------------------------------------------------------------- writing
    def advance(self, T: int, priorities: Any = None) -> None:
        """Move the cursor over ``T`` new rows; ``priorities`` (scalar, ``[B]`` or ``[T, B]``,
        only with ``enable_input_priorities``) go to the rows ``input_priority_shift`` back."""
        T = check_advance(T, self.T)
        old = self.t
        new_rows = ring_rows(old, T, self.T)
        self._kept[new_rows] = self.default_value
        self.t = (old + T) % self.T
        self._full = self._full or old + T >= self.T
        if priorities is not None:
            if not self.enable_input_priorities:
                raise ValueError("priorities were given to advance() but this SumTree was "
                                 "built with enable_input_priorities=False")
            p = check_priorities(priorities)
            try:
                p = np.broadcast_to(p, (T, self.B))
            except ValueError:
                raise ValueError(f"priorities must be a scalar or broadcast to [B]=[{self.B}] "
                                 f"or [T, B]=[{T}, {self.B}]; got shape {p.shape}") from None
            shifted = (new_rows - self.input_priority_shift) % self.T
            self._kept[shifted] = p
            self._refresh_rows(shifted)
        self._refresh_rows(rows_to_refresh(self, old, T))

    def _refresh_rows(self, rows: np.ndarray) -> None:
        """Set these rows' leaves to their kept priority where valid, else to zero."""
        if rows.size == 0:
            return
        ok = valid_rows(rows, self.t, self._full, self.T, self.off_backward, self.off_forward)
        values = self._kept[rows] * ok[:, None]
        leaves = (rows[:, None] * self.B + np.arange(self.B)).ravel()
        self._set_leaves(leaves, values.ravel())

    def _set_leaves(self, leaves: np.ndarray, values: np.ndarray) -> None:
        """Write leaf values and recompute every ancestor from its children."""
        tree = self.tree
        nodes = leaves + self._L
        tree[nodes] = values
        for _ in range(self.n_levels):
            nodes = np.unique(nodes >> 1)
            left = nodes << 1
            tree[nodes] = tree[left] + tree[left + 1]

    # ---------------------------------------------------------------- sampling
    def _descend(self, n: int, uniforms: np.ndarray | None = None) -> np.ndarray:
        """Leaf indexes of ``n`` proportional draws (iid); ``uniforms`` ([n] draws in [0, 1))
        replace ``np.random.rand(n)`` when given."""
        tree = self.tree
        values = (np.random.rand(n) if uniforms is None else uniforms) * tree[1]
        nodes = descend(tree, values, np.ones(n, dtype=np.int64), self.n_levels, np.where)
        return nodes - self._L

    def sample(self, n: int, unique: bool = False, uniforms: Any = None
               ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Draw ``n`` leaves with probability proportional to priority, with replacement
        unless ``unique``; returns ``(T_idxs, B_idxs, priorities)`` and remembers the leaves
        for :meth:`update_batch_priorities`. ``uniforms`` (``[n]`` draws in ``[0, 1)``, only
        without ``unique``) replace the random draws, so tests can feed two trees the same."""
        n = check_int(n, "n", minimum=1)
        if uniforms is not None:
            uniforms = check_uniforms(uniforms, n, unique)
        if not self.tree[1] > 0:
            raise RuntimeError("SumTree.sample: no valid leaves yet (all priorities are zero); "
                               "append more data before sampling")
        if unique:
            leaves = self._sample_unique(n)
        else:
            leaves = self._descend(n, uniforms)
        self._last_leaves = leaves
        priorities = self.tree[leaves + self._L]
        T_idxs, B_idxs = np.divmod(leaves, self.B)
        return T_idxs, B_idxs, priorities

    def _sample_unique(self, n: int) -> np.ndarray:
        """Draw without replacement: drawn leaves are zeroed between rounds, then restored."""
        chosen: list[np.ndarray] = []
        saved: list[np.ndarray] = []
        remaining = n
        try:
            while remaining > 0:
                if not self.tree[1] > 0:
                    raise RuntimeError(f"SumTree.sample(unique=True): fewer than n={n} leaves "
                                       f"have non-zero priority")
                draws = np.unique(self._descend(remaining))[:remaining]
                saved.append(self.tree[draws + self._L].copy())
                chosen.append(draws)
                self._set_leaves(draws, np.zeros(len(draws)))
                remaining -= len(draws)
        finally:
            if chosen:
                self._set_leaves(np.concatenate(chosen), np.concatenate(saved))
        leaves = np.concatenate(chosen)
        return leaves[np.random.permutation(n)]

    def update_batch_priorities(self, priorities: Any) -> None:
        """Set the leaves of the last :meth:`sample` to ``priorities`` (one per sample).

        Leaves whose row became invalid since the sample (the cursor moved) are left at zero.
        """
        if self._last_leaves is None:
            raise RuntimeError("update_batch_priorities called before any sample()")
        self.update_priorities(self._last_leaves, priorities)

    def update_priorities(self, leaves: Any, priorities: Any) -> None:
        """Set the given leaves (``t * B + b``, e.g. of a batch sampled a while ago) to
        ``priorities`` (one per leaf, stored as given); leaves whose row is not valid now (the
        cursor moved past it) are left at zero, as in :meth:`update_batch_priorities`. A leaf
        named twice gets its last priority."""
        leaves = np.asarray(leaves)
        if leaves.dtype.kind not in "iu":
            raise TypeError(f"leaves must be integers; got dtype {leaves.dtype}")
        leaves = leaves.reshape(-1).astype(np.int64, copy=False)
        n_leaves = self.T * self.B
        if leaves.size and (leaves.min() < 0 or leaves.max() >= n_leaves):
            bad = leaves[(leaves < 0) | (leaves >= n_leaves)][:5]
            raise ValueError(f"leaves must lie in [0, T * B) = [0, {n_leaves}); got values such "
                             f"as {bad.tolist()}")
        p = check_priorities(priorities).reshape(-1)
        if p.shape != leaves.shape:
            raise ValueError(f"expected {leaves.size} priorities (one per sampled leaf); got "
                             f"{p.size}")
        if leaves.size > 1:  # keep each leaf's last occurrence (fancy assignment's order is
            _, first_from_end = np.unique(leaves[::-1], return_index=True)  # not guaranteed)
            last = leaves.size - 1 - first_from_end
            leaves, p = leaves[last], p[last]
        rows = leaves // self.B
        ok = valid_rows(rows, self.t, self._full, self.T, self.off_backward, self.off_forward)
        self._kept.reshape(-1)[leaves[ok]] = p[ok]
        self._set_leaves(leaves[ok], p[ok])

    # ---------------------------------------------------------------- debugging
    def print_tree(self, level: int | None = None) -> None:
        """Print the node values of one level (0 = root) or of every level."""
        levels = range(self.n_levels + 1) if level is None else [level]
        for lv in levels:
            if not 0 <= lv <= self.n_levels:
                raise ValueError(f"level must be in [0, {self.n_levels}]; got {lv}")
            print(f"level {lv}: {self.tree[1 << lv:2 << lv]}")


class AsyncSumTree(SumTree):
    """A :class:`SumTree` on OS shared memory (``share_memory=True`` by default), for replay
    buffers that one process appends to while another samples: both see the same nodes, kept
    priorities and cursor. It adds no locking; the owning buffer holds a reader-writer lock."""

    def __init__(self, T: int, B: int, off_backward: int, off_forward: int,
                 default_value: float = 1, enable_input_priorities: bool = False,
                 input_priority_shift: int = 0, share_memory: bool = True):
        super().__init__(T, B, off_backward, off_forward, default_value=default_value,
                         enable_input_priorities=enable_input_priorities,
                         input_priority_shift=input_priority_shift, share_memory=share_memory)
