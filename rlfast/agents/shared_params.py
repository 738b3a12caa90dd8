"""Parameters published by an asynchronous optimizer for its sampler process.

The optimizer trains its own model (maybe on a GPU) and, every ``updates_per_sync`` updates,
*publishes* it: under the write side of a reader-writer lock every tensor of the model's state
is copied into one CPU copy in shared memory, and a version counter moves. Before each batch
the sampler compares the counter with the version it holds and, only when it moved, copies
the published tensors into its own model under the read side of the lock, so it never reads
a half-written set. The update count at publication travels with the version, which lets the
runner log the policy lag (updates made since the parameters the sampler acts with).
"""
from __future__ import annotations

import numpy as np
import torch

from rlfast.utils.buffer import np_mp_array
from rlfast.utils.synchronize import RWLock

__all__ = ["SharedParams"]


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


def _state_tensors(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {name: tensor for name, tensor in _unwrap(model).state_dict(keep_vars=True).items()}


class SharedParams:
    """A shared-memory CPU copy of ``model``'s state with a version counter and an RW lock.

    Build it in the parent before forking (the memory and lock are inherited). The publisher
    calls :meth:`publish`; each reader calls :meth:`pull` with its own model and keeps its own
    record of the version it holds.
    """

    def __init__(self, model: torch.nn.Module, ctx=None):
        self.names = list(_state_tensors(model))
        self.shared = {}
        for name, tensor in _state_tensors(model).items():
            tensor = tensor.detach()
            array = np_mp_array(tuple(tensor.shape), tensor.cpu().numpy().dtype)
            self.shared[name] = torch.from_numpy(np.asarray(array))
            self.shared[name].copy_(tensor)
        # [version, updates at that version]: written under the write lock, one int64 each.
        self._counters = torch.from_numpy(np.asarray(np_mp_array(2, np.int64)))
        self.lock = RWLock(ctx)
        self._pairs: tuple | None = None  # (model, [(shared, own)]) of the last caller
        self.version_held = 0  # per process: the version this process's model holds

    def _pairs_for(self, model: torch.nn.Module) -> list:
        if isinstance(model, torch.nn.parallel.DistributedDataParallel):
            model = model.module  # an optimizer rank's wrapped model: the same tensors
        if self._pairs is None or self._pairs[0] is not model:
            own = _state_tensors(model)
            if list(own) != self.names:
                raise ValueError(f"model state {sorted(own)[:5]}... does not match the "
                                 f"published one {sorted(self.names)[:5]}...")
            self._pairs = (model, [(self.shared[n], own[n]) for n in self.names])
        return self._pairs[1]

    @property
    def version(self) -> int:
        """How many times parameters were published (0: only the initial ones)."""
        return int(self._counters[0])

    @property
    def published_updates(self) -> int:
        """The optimizer's update count when the current version was published."""
        return int(self._counters[1])

    @torch.no_grad()
    def publish(self, model: torch.nn.Module, updates: int) -> None:
        """Copy ``model``'s state into shared memory (write lock) and move the version."""
        pairs = self._pairs_for(model)
        with self.lock.write_lock:
            for shared, own in pairs:
                shared.copy_(own.detach())
            self._counters[1] = int(updates)
            self._counters[0] += 1

    @torch.no_grad()
    def pull(self, model: torch.nn.Module) -> int | None:
        """Copy the published state into ``model`` (read lock) if the version moved since
        this process last pulled; returns the update count of what was copied, or None when
        nothing new was published."""
        if int(self._counters[0]) == self.version_held:
            return None
        pairs = self._pairs_for(model)
        with self.lock.read_lock:
            version, updates = int(self._counters[0]), int(self._counters[1])
            for shared, own in pairs:
                own.copy_(shared)
        self.version_held = version
        return updates
