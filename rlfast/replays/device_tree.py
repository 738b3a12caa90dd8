"""Sum tree and prioritized sampling whose state lives in torch tensors on a device.

:class:`DeviceSumTree` and :class:`DevicePrioritizedSampling` are the twins of
:class:`~rlfast.replays.sum_tree.SumTree` and :class:`~rlfast.replays.sampling.PrioritizedSampling`
(same leaves, windows, descent and float64 sums), so that a learner on a GPU draws by priority
and writes priorities back without reading the host: ``sample`` (with replacement) and
``update_batch_priorities`` only launch kernels; ``advance`` copies host-computed indexes over.
The host keeps what it already knows (the cursor, the wrapped flag, so the number of valid
rows). A priority tensor is never read: a negative or non-finite entry leaves its leaf
unchanged (host arrays are checked and rejected as in ``SumTree``). Nor can a draw tell on the
host that every valid leaf has priority zero (it then ends on leaf 0 and its importance
weights are NaN): it raises the tree's ``draw_fault`` flag on the device instead, and a
:class:`~rlfast.replays.draw_alarm.PriorityAlarm` turns the flag into a ``ZeroPriorityError``
naming the buffer when the learner reads it with the rest of its call's diagnostics (one read
per call, as before).
``unique=True`` draws without replacement on the device too, by an exponential race (one
top-k over the leaves, no host read).
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch

from rlfast.replays.draw_alarm import ALL_ZERO, TOO_FEW_POSITIVE
from rlfast.replays.ring import n_valid_rows, ring_rows, valid_rows
from rlfast.replays.sampling import (advance_tree, alpha_power, check_alpha, check_starts,
                                     importance_weights, tree_windows)
from rlfast.replays.sum_tree import (check_advance, check_priorities, check_uniforms, descend,
                                     rows_to_refresh, tree_shape)
from rlfast.utils.checks import check_fraction, check_int

__all__ = ["DeviceSumTree", "DevicePrioritizedSampling"]

_SEED_OFFSET = 0x5EED_7EE  # the tree's generator: torch.initial_seed() + this
_INT_DTYPES = (torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8)


def _host_to_device(array: np.ndarray, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A numpy array on ``device`` with no stream sync (pageable memory is staged first)."""
    array = torch.from_numpy(np.ascontiguousarray(array))
    return array.to(device=device, dtype=dtype, non_blocking=True)


def _tensor_to_device(x: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A caller's tensor on ``device`` as ``dtype``; asynchronous unless it is pinned host
    memory, which the caller may overwrite before an asynchronous copy has run."""
    x = x.detach()
    non_blocking = x.device.type == "cpu" and device.type != "cpu" and not x.is_pinned()
    return x.to(device=device, dtype=dtype, non_blocking=non_blocking)


class DeviceSumTree:
    """Binary sum tree over ``[T, B]`` priorities with a wrapping time cursor, on a device.

    The semantics of :class:`~rlfast.replays.sum_tree.SumTree` (new rows, input priorities
    ``input_priority_shift`` rows back, windows held at zero with their priority kept aside,
    proportional draws). The nodes ``tree`` (float64 ``[2L]``), kept priorities ``_kept``
    (``[T, B]``) and row validity ``_row_valid`` (``[T]``) are device tensors; the cursor ``t``
    and ``full`` are host values. Draws use the tree's own ``generator`` (seeded from
    ``torch.initial_seed()``), saved by :meth:`state_dict`. Callers serialize access.
    """

    def __init__(self, T: int, B: int, off_backward: int, off_forward: int,
                 default_value: float = 1, enable_input_priorities: bool = False,
                 input_priority_shift: int = 0, device: str | torch.device = "cpu"):
        (self.T, self.B, self.off_backward, self.off_forward, self.default_value,
         self.enable_input_priorities, self.input_priority_shift, self.n_levels, self._L) = \
            tree_shape(T, B, off_backward, off_forward, default_value, enable_input_priorities,
                       input_priority_shift)
        self.device = torch.device(device)  # its RuntimeError names a bad device string
        n_leaves = self.T * self.B
        f64 = dict(dtype=torch.float64, device=self.device)
        self.tree = torch.zeros(2 * self._L, **f64)
        self._kept = torch.zeros(self.T, self.B, **f64)  # priority each row will get
        self._row_valid = torch.zeros(self.T, dtype=torch.bool, device=self.device)
        # Scratch for update_priorities: per leaf, the position of its last new value.
        self._last_position = torch.zeros(n_leaves, dtype=torch.int64, device=self.device)
        self._B_range = torch.arange(self.B, device=self.device)
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed((torch.initial_seed() + _SEED_OFFSET) % 2 ** 64)
        self.t = 0  # cursor: the next row to be advanced over (host)
        self.full = False  # whether the cursor has wrapped once: every row holds data (host)
        self._last_leaves: torch.Tensor | None = None
        # Sticky device flag of the draws since it was last zeroed: a code of
        # rlfast.replays.draw_alarm (DRAW_OK, TOO_FEW_POSITIVE, ALL_ZERO); never read here.
        self.draw_fault = torch.zeros((), dtype=torch.int64, device=self.device)
        self.last_unique_n = 0  # the size of the last unique draw (host), for the message

    # ---------------------------------------------------------------- read-only views
    @property
    def total(self) -> torch.Tensor:
        """Sum of all leaves: a 0-d device tensor (a snapshot, not a view)."""
        return self.tree[1].clone()

    @property
    def leaves(self) -> torch.Tensor:
        """The ``[T, B]`` leaf priorities (a view of the nodes: do not write to it)."""
        return self.tree[self._L:self._L + self.T * self.B].view(self.T, self.B)

    def n_valid_rows(self) -> int:
        """How many rows may be sampled now, computed on the host from the cursor."""
        return n_valid_rows(self.t, self.full, self.T, self.off_backward, self.off_forward)

    # ---------------------------------------------------------------- writing
    def advance(self, T: int, priorities: Any = None) -> None:
        """Move the cursor over ``T`` new rows; ``priorities`` (already ``p ** alpha``; scalar,
        ``[B]`` or ``[T, B]``; tensor or array; only with ``enable_input_priorities``) go to
        the rows ``input_priority_shift`` back. Reads nothing from the device."""
        T = check_advance(T, self.T)
        p = None
        if priorities is not None:
            if not self.enable_input_priorities:
                raise ValueError("priorities were given to advance() but this DeviceSumTree "
                                 "was built with enable_input_priorities=False")
            p = self._priority_tensor(priorities, "priorities")
            try:
                p = torch.broadcast_to(p, (T, self.B))
            except RuntimeError:
                raise ValueError(f"priorities must be a scalar or broadcast to [B]=[{self.B}] or "
                                 f"[T, B]=[{T}, {self.B}]; got shape {tuple(p.shape)}") from None
        old = self.t
        new_rows = ring_rows(old, T, self.T)
        if T:
            self._kept[_host_to_device(new_rows, torch.int64, self.device)] = self.default_value
        self.t = (old + T) % self.T
        self.full = self.full or old + T >= self.T
        if p is not None and T:
            shifted = (new_rows - self.input_priority_shift) % self.T
            rows = _host_to_device(shifted, torch.int64, self.device)
            self._kept[rows] = torch.where(_is_priority(p), p, self._kept[rows])  # bad: keep
            self._refresh_rows(shifted)
        self._refresh_rows(rows_to_refresh(self, old, T))

    def _refresh_rows(self, rows: np.ndarray) -> None:
        """Set these rows' leaves to their kept priority where valid, else to zero, and record
        their validity on the device (validity decided on the host)."""
        if rows.size == 0:
            return
        ok = valid_rows(rows, self.t, self.full, self.T, self.off_backward, self.off_forward)
        rows_d = _host_to_device(rows, torch.int64, self.device)
        ok_d = _host_to_device(ok, torch.bool, self.device)
        self._row_valid[rows_d] = ok_d
        values = torch.where(ok_d[:, None], self._kept[rows_d], 0.0)
        leaves = (rows_d[:, None] * self.B + self._B_range).reshape(-1)
        self._set_leaves(leaves, values.reshape(-1))

    def _set_leaves(self, leaves: torch.Tensor, values: torch.Tensor) -> None:
        """Write leaf values (one value per distinct leaf) and recompute every ancestor from
        its children; a parent listed twice is written twice with the same sum."""
        tree, nodes = self.tree, leaves + self._L
        tree[nodes] = values
        for _ in range(self.n_levels):
            nodes = nodes >> 1
            left = nodes << 1
            tree[nodes] = tree[left] + tree[left + 1]

    def update_priorities(self, leaves: Any, priorities: Any) -> None:
        """Set leaves (``t * B + b``) to ``priorities`` (already ``p ** alpha``), a leaf listed
        twice to its last value. Leaves of rows not valid now keep zero (and their kept
        priority); a negative or non-finite tensor value leaves its leaf unchanged. Tensors are
        not read (masks over fixed-size tensors); host arrays are checked and rejected."""
        if isinstance(leaves, torch.Tensor):
            if leaves.dtype not in _INT_DTYPES:
                raise TypeError(f"leaves must be integers; got dtype {leaves.dtype}")
            leaves = _tensor_to_device(leaves, torch.int64, self.device).reshape(-1)
        else:
            host = np.asarray(leaves).reshape(-1)
            if host.dtype.kind not in "iu":
                raise TypeError(f"leaves must be integers; got dtype {host.dtype}")
            if host.size and (host.min() < 0 or host.max() >= self.T * self.B):
                raise ValueError(f"leaves must lie in [0, T * B) = [0, {self.T * self.B}); got "
                                 f"values from {host.min()} to {host.max()}")
            leaves = _host_to_device(host, torch.int64, self.device)
        p = self._priority_tensor(priorities, "priorities").reshape(-1)
        if p.shape != leaves.shape:
            raise ValueError(f"expected {leaves.numel()} priorities (one per leaf); got "
                             f"{p.numel()}")
        n = leaves.numel()
        ok = _is_priority(p) & self._row_valid[leaves // self.B]
        # Position of each leaf's last acceptable value (-1: none), so duplicates agree.
        positions = torch.where(ok, torch.arange(n, device=self.device), -1)
        last = self._last_position
        last.scatter_reduce_(0, leaves, positions, reduce="amax", include_self=False)
        last = last[leaves]
        take = last >= 0
        new = p[last.clamp(min=0)]
        kept = self._kept.view(-1)
        kept[leaves] = torch.where(take, new, kept[leaves])
        self._set_leaves(leaves, torch.where(take, new, self.tree[leaves + self._L]))

    def update_batch_priorities(self, priorities: Any) -> None:
        """Set the leaves of the last :meth:`sample` to ``priorities`` (``[n]``, already
        ``p ** alpha``), with the rules of :meth:`update_priorities`; no host read."""
        if self._last_leaves is None:
            raise RuntimeError("update_batch_priorities called before any sample()")
        self.update_priorities(self._last_leaves, priorities)

    def _priority_tensor(self, priorities: Any, name: str) -> torch.Tensor:
        """Priorities as a float64 device tensor; host values are checked here (ValueError)."""
        if isinstance(priorities, torch.Tensor):
            return _tensor_to_device(priorities, torch.float64, self.device)
        return _host_to_device(check_priorities(priorities, name), torch.float64, self.device)

    # ---------------------------------------------------------------- sampling
    def _descend(self, n: int, uniforms: torch.Tensor | None = None) -> torch.Tensor:
        """Leaf indexes of ``n`` proportional draws (iid), as in ``SumTree._descend``."""
        tree = self.tree
        if uniforms is None:
            uniforms = torch.rand(n, generator=self.generator, device=self.device,
                                  dtype=torch.float64)
        values = uniforms * tree[1]
        nodes = torch.ones(n, dtype=torch.int64, device=self.device)
        return descend(tree, values, nodes, self.n_levels, torch.where) - self._L

    def sample(self, n: int, unique: bool = False, uniforms: Any = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Draw ``n`` leaves proportionally to priority; returns device tensors ``(T_idxs,
        B_idxs, priorities)`` and remembers the leaves for :meth:`update_batch_priorities`.
        Nothing is read on the host: ``uniforms`` (``[n]`` in ``[0, 1)``, tensor or array)
        replace the generator's draws (with replacement only); ``unique=True`` draws without
        replacement (:meth:`_sample_unique`). A draw that found no priority to draw by raises
        :attr:`draw_fault` on the device (see :mod:`~rlfast.replays.draw_alarm`), not an error."""
        n = check_int(n, "n", minimum=1)
        if isinstance(uniforms, torch.Tensor):  # only its shape is checked (no read)
            check_uniforms(np.zeros(tuple(uniforms.shape)), n, unique)
            uniforms = _tensor_to_device(uniforms, torch.float64, self.device)
        elif uniforms is not None:
            uniforms = _host_to_device(check_uniforms(uniforms, n, unique), torch.float64,
                                       self.device)
        if self.n_valid_rows() == 0:
            raise RuntimeError(f"DeviceSumTree.sample: no valid rows yet (t={self.t}, full="
                               f"{self.full}); append more data before sampling")
        fault = (self.tree[1] <= 0).to(torch.int64) * ALL_ZERO
        if unique:
            leaves, too_few = self._sample_unique(n)
            fault = torch.maximum(fault, too_few.to(torch.int64) * TOO_FEW_POSITIVE)
        else:
            leaves = self._descend(n, uniforms)
        torch.maximum(self.draw_fault, fault, out=self.draw_fault)
        self._last_leaves = leaves
        return leaves // self.B, leaves % self.B, self.tree[leaves + self._L]

    def _sample_unique(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(leaves, too_few)``: ``n`` distinct leaves drawn as successive proportional draws
        without replacement, and a 0-d device flag, true when fewer than ``n`` leaves have a
        non-zero priority (zero leaves were then drawn). An exponential race: each leaf waits
        an exponential time of rate equal to its priority and the ``n`` first to arrive are
        the draw, in order (P(first) = p / total, and so on among the rest). One fixed-size
        top-k over every leaf, O(T * B) work per draw, and no host read; more than the
        valid leaves is refused on the host (the cursor tells)."""
        n_valid = self.n_valid_rows() * self.B
        if n > n_valid:
            raise RuntimeError(f"DeviceSumTree.sample(unique=True): fewer than n={n} leaves are "
                               f"valid ({n_valid}); draw fewer or append more data first")
        self.last_unique_n = n
        p = self.tree[self._L:self._L + self.T * self.B]
        positive = p > 0
        race = torch.empty_like(p).exponential_(generator=self.generator)
        arrival = torch.where(positive, race.log() - p.log(), math.inf)  # log(race / p)
        leaves = torch.topk(arrival, n, largest=False, sorted=True).indices
        return leaves, positive.sum() < n

    # ---------------------------------------------------------------- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """The tree's state: cursor, wrapped flag, nodes, kept priorities, generator state."""
        return {"t": self.t, "full": self.full, "tree": self.tree.clone(),
                "kept": self._kept.clone(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a tree of the same shape (validity recomputed)."""
        if {"t", "full", "tree", "kept", "generator"} - set(state):
            raise ValueError(f"state lacks keys; it has {sorted(state)}")
        t = check_int(state["t"], "state['t']", minimum=0)
        if t >= self.T:
            raise ValueError(f"state['t'] must be < T ({self.T}); got {t}")
        for key, target in (("tree", self.tree), ("kept", self._kept)):
            if tuple(state[key].shape) != tuple(target.shape):
                raise ValueError(f"state[{key!r}] has shape {tuple(state[key].shape)}; this "
                                 f"tree needs {tuple(target.shape)}")
        self.tree.copy_(state["tree"])
        self._kept.copy_(state["kept"])
        self.t, self.full = t, bool(state["full"])
        ok = valid_rows(np.arange(self.T), self.t, self.full, self.T, self.off_backward,
                        self.off_forward)
        self._row_valid.copy_(_host_to_device(ok, torch.bool, self.device))
        self.generator.set_state(state["generator"])
        self._last_leaves = None
        self.draw_fault.zero_()


def _is_priority(p: torch.Tensor) -> torch.Tensor:
    """Mask of the usable priorities: finite and >= 0."""
    return torch.isfinite(p) & (p >= 0)


class DevicePrioritizedSampling:
    """Proportional prioritized sampling over allowed starts, on a device: the twin of
    :class:`~rlfast.replays.sampling.PrioritizedSampling` (same arguments, plus ``device``).

    Raw priorities ``p`` are stored as ``p ** alpha`` in a :class:`DeviceSumTree` with one leaf
    per allowed start (``[T // stride, B]``); :meth:`sample` returns device tensors, importance
    weights ``(N * P(i)) ** -beta`` over the batch's largest. ``storage`` needs only the host
    ints ``T``, ``B``, ``size``, ``off_forward`` and ``n_appended``.
    """

    def __init__(self, storage: Any, off_backward: int, stride: int = 1, alpha: float = 0.6,
                 beta: float = 0.4, default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 device: str | torch.device = "cpu"):
        self.storage = storage
        off_backward, self.stride = check_starts(storage, off_backward, stride)
        self.alpha = check_alpha(alpha)
        self.beta = check_fraction(beta, "beta")
        default = float(check_priorities(default_priority, "default_priority"))
        self.unique, self.input_priorities = bool(unique), bool(input_priorities)
        tree_T, tree_back, tree_forward = tree_windows(storage, off_backward, self.stride)
        self.tree = DeviceSumTree(
            T=tree_T, B=storage.B, off_backward=tree_back, off_forward=tree_forward,
            default_value=default ** self.alpha, enable_input_priorities=self.input_priorities,
            input_priority_shift=input_priority_shift, device=device)
        self.device = self.tree.device
        self._rows_started = 0  # tree rows whose start step has been written (unwrapped)

    def set_beta(self, beta: float) -> None:
        """Set the importance-sampling exponent (annealed by the algorithm)."""
        self.beta = check_fraction(beta, "beta")

    def _alpha_power(self, priorities: Any) -> Any:
        """Raw priorities to ``p ** alpha``: host values checked and raised on the host (as
        ``PrioritizedSampling`` does), tensors on the device with bad values turned to NaN
        (which the tree ignores; ``NaN ** 0`` would otherwise be 1)."""
        if isinstance(priorities, torch.Tensor):
            p = _tensor_to_device(priorities, torch.float64, self.device)
            return torch.where(_is_priority(p), p ** self.alpha, math.nan)
        return alpha_power(priorities, self.alpha)

    def advance(self, T_in: int, priorities: Any = None) -> None:
        """Move the tree over the starts the last append wrote (``priorities`` raw)."""
        advance_tree(self, priorities, self._alpha_power)

    def sample(self, n: int, uniforms: Any = None
               ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(T_idxs, B_idxs, is_weights)`` device tensors of ``n`` starts drawn by priority
        (weights float32); ``uniforms`` as in :meth:`DeviceSumTree.sample`."""
        rows, B_idxs, p = self.tree.sample(n, unique=self.unique, uniforms=uniforms)
        weights = importance_weights(p, self.tree.tree[1], self.tree.n_valid_rows() * self.tree.B,
                                     self.beta)
        return rows * self.stride, B_idxs, weights.to(torch.float32)

    def update_batch_priorities(self, priorities: Any) -> None:
        """New raw priorities for the last sampled batch (stored as ``p ** alpha``)."""
        self.tree.update_batch_priorities(self._alpha_power(priorities))

    def state_dict(self) -> dict[str, Any]:
        """The scheme's state: its tree, the started-row count and ``beta``."""
        return {"tree": self.tree.state_dict(), "rows": self._rows_started, "beta": self.beta}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict` of a scheme of the same shape."""
        self.tree.load_state_dict(state["tree"])
        self._rows_started = check_int(state["rows"], "state['rows']", minimum=0)
        self.set_beta(state["beta"])
