"""What every replay buffer does: append, choose indexes, extract a batch as torch tensors.

A buffer *has* a :class:`~rlfast.replays.storage.ReplayStorage` (the ``[T, B]`` arrays), a
sampling scheme (:class:`~rlfast.replays.sampling.UniformSampling` or
:class:`~rlfast.replays.sampling.PrioritizedSampling`, which owns the sum tree), and says in
``extract_batch`` what a batch holds. The concrete classes only wire these together.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np

from rlfast.replays.collections import (SamplesFromReplay, SamplesFromReplayPri,
                                        SamplesFromReplayTL, SamplesFromReplayTLPri,
                                        SequenceSamplesFromReplay, SequenceSamplesFromReplayPri)
from rlfast.replays.sampling import PrioritizedSampling, UniformSampling
from rlfast.replays.storage import ReplayStorage
from rlfast.utils.buffer import torchify_buffer
from rlfast.utils.checks import check_int

__all__ = ["ReplayBufferBase", "split_priorities"]

_WITH_WEIGHTS = {SamplesFromReplay: SamplesFromReplayPri,
                 SamplesFromReplayTL: SamplesFromReplayTLPri,
                 SequenceSamplesFromReplay: SequenceSamplesFromReplayPri}


def split_priorities(samples: Any) -> tuple[Any, Any]:
    """``(priorities or None, samples)``: accepts a ``PrioritiesSamplesToBuffer``-like wrapper
    (fields ``priorities`` and ``samples``) or samples with a ``priorities`` field."""
    fields = tuple(getattr(samples, "_fields", ()))
    if set(fields) == {"priorities", "samples"}:
        return samples.priorities, samples.samples
    if "priorities" in fields:
        return samples.priorities, samples
    return None, samples


class ReplayBufferBase(abc.ABC):
    """Append ``[T_in, B]`` samples; ``sample_batch(batch_B)`` returns torch tensors.

    Subclasses build the storage and scheme and define :meth:`extract_batch`. Prioritized
    buffers also expose :meth:`update_batch_priorities` and :meth:`set_beta` (on a uniform
    buffer these raise TypeError).
    """

    frame_based = False

    def __init__(self, storage: ReplayStorage, scheme: UniformSampling | PrioritizedSampling):
        self.storage = storage
        self.scheme = scheme

    # ---------------------------------------------------------------- shape and data
    T = property(lambda self: self.storage.T, doc="Time length of the ring.")
    B = property(lambda self: self.storage.B, doc="Number of environments (columns).")
    size = property(lambda self: self.storage.size, doc="Capacity in transitions (T * B).")
    t = property(lambda self: self.storage.t, doc="Cursor: the next row to be written.")
    n_step_return = property(lambda self: self.storage.n_step_return,
                             doc="Steps summed into each replayed return.")
    discount = property(lambda self: self.storage.discount, doc="Discount of those returns.")
    samples = property(lambda self: self.storage.samples, doc="The stored [T, B] arrays.")
    samples_return_ = property(lambda self: self.storage.samples_return_,
                               doc="The [T, B] n-step returns (the rewards when n is 1).")
    samples_done_n = property(lambda self: self.storage.samples_done_n,
                              doc="The [T, B] n-step done flags (the dones when n is 1).")
    nbytes = property(lambda self: self.storage.nbytes + self._tree_nbytes(),
                      doc="Bytes of all storage, sum tree included.")

    def _tree_nbytes(self) -> int:
        tree = getattr(self.scheme, "tree", None)
        return 0 if tree is None else int(tree.tree.nbytes + tree._kept.nbytes)

    @property
    def priority_tree(self) -> Any:
        """The :class:`~rlfast.replays.sum_tree.SumTree` (None for uniform buffers)."""
        return getattr(self.scheme, "tree", None)

    # ---------------------------------------------------------------- the API
    def append_samples(self, samples: Any) -> tuple[int, np.ndarray]:
        """Write ``[T_in, B]`` samples (numpy or torch) at the cursor; returns
        ``(T_in, rows written)``. Priorities may come along (see :func:`split_priorities`)."""
        priorities, samples = split_priorities(samples)
        T_in, rows = self.storage.append(samples)
        self.scheme.advance(T_in, priorities)
        return T_in, rows

    def sample_idxs(self, batch_B: int) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """``(T_idxs, B_idxs, is_weights or None)`` of a batch of valid starts, drawn by the
        buffer's sampling scheme (uniform or by priority) among steps that may be replayed."""
        return self.scheme.sample(check_int(batch_B, "batch_B", minimum=1))

    def sample_batch(self, batch_B: int) -> Any:
        """A batch of ``batch_B`` samples as torch tensors (plus ``is_weights`` if prioritized):
        what the algorithm trains on; see each buffer's module for the fields."""
        T_idxs, B_idxs, is_weights = self.sample_idxs(batch_B)
        batch = self.extract_batch(T_idxs, B_idxs)
        if is_weights is not None:
            batch = _WITH_WEIGHTS[type(batch)](*batch, is_weights)
        return torchify_buffer(batch)

    @abc.abstractmethod
    def extract_batch(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> Any:
        """The numpy batch at these start indexes; what each buffer kind replays (transitions,
        sequences, time-limit fields) is defined here."""

    def update_batch_priorities(self, priorities: Any) -> None:
        """New priorities (raw, e.g. |TD error|; stored as ``p ** alpha``) for the batch last
        returned by :meth:`sample_batch`, in the same order."""
        self._prioritized("update_batch_priorities").update_batch_priorities(priorities)

    def set_beta(self, beta: float) -> None:
        """Importance-sampling exponent for the next batches, in [0, 1]; algorithms anneal it
        towards 1 (full correction of the sampling bias) as training goes on."""
        self._prioritized("set_beta").set_beta(beta)

    @property
    def beta(self) -> float:
        """The current importance-sampling exponent (prioritized buffers only)."""
        return self._prioritized("beta").beta

    @property
    def alpha(self) -> float:
        """The priority exponent: priorities are stored as ``p ** alpha`` (prioritized only)."""
        return self._prioritized("alpha").alpha

    def _prioritized(self, what: str) -> PrioritizedSampling:
        if not isinstance(self.scheme, PrioritizedSampling):
            raise TypeError(f"{type(self).__name__} is not prioritized: it has no {what}; use "
                            f"a Prioritized* replay buffer")
        return self.scheme
