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
        # [version, updates at that version, last version a reader pulled]: int64 each.
        self._counters = torch.from_numpy(np.asarray(np_mp_array(3, np.int64)))
        self.lock = RWLock(ctx)
        self._pairs: tuple | None = None  # (model, [(shared, own)]) of the last caller
        self.version_held = 0  # per process: the version this process's model holds
        self._staged: list | None = None  # publish_async: pinned copies of the model's state
        self._in_flight: tuple | None = None  # (CUDA event, updates) of a staged copy

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
        self._counters[2] = version  # the publisher may stage the next one
        return updates

    # The CUDA pieces of publish_async (CPU tests replace them with stand-ins).
    @staticmethod
    def staging_tensor(like: torch.Tensor) -> torch.Tensor:
        """Page-locked host memory shaped like ``like`` (a target for non_blocking copies)."""
        return torch.empty(like.shape, dtype=like.dtype, pin_memory=True)

    @staticmethod
    def new_event() -> "torch.cuda.Event":
        """A CUDA event to record after the staging copies."""
        return torch.cuda.Event()

    @property
    def pulled_version(self) -> int:
        """The last version a reader copied (what :meth:`publish_async` waits for)."""
        return int(self._counters[2])

    @property
    def publishing(self) -> bool:
        """Whether a :meth:`publish_async` copy is staged but not yet published."""
        return self._in_flight is not None

    @torch.no_grad()
    def publish_async(self, model: torch.nn.Module, updates: int) -> bool:
        """Publish ``model`` (on a CUDA device) without making the host wait for it.

        Completes a staged copy whose CUDA event has passed (into shared memory under the
        write lock; the version moves); then, if nothing is staged and the sampler has pulled
        the last version, stages the model's current state: ``non_blocking`` copies into
        page-locked memory on the current stream, and an event after them. Returns whether a
        version was published by this call. The staged state is the one after every update
        queued before the call (the stream orders the copies after them)."""
        published = False
        if self._in_flight is not None:
            event, staged_updates = self._in_flight
            if not event.query():
                return False
            self._finish(staged_updates)
            published = True
        if self.pulled_version < self.version:
            return published  # the sampler has not taken the last one yet
        pairs = self._pairs_for(model)
        if self._staged is None:
            self._staged = [self.staging_tensor(own) for _, own in pairs]
        for staged, (_, own) in zip(self._staged, pairs):
            staged.copy_(own.detach(), non_blocking=True)
        event = self.new_event()
        event.record()
        self._in_flight = (event, int(updates))
        return published

    def flush(self) -> None:
        """Publish a staged copy now, waiting for its event (the run's final parameters)."""
        if self._in_flight is None:
            return
        event, staged_updates = self._in_flight
        event.synchronize()
        self._finish(staged_updates)

    def _finish(self, updates: int) -> None:
        with self.lock.write_lock:
            for shared, staged in zip((shared for shared, _ in self._pairs[1]), self._staged):
                shared.copy_(staged)
            self._counters[1] = int(updates)
            self._counters[0] += 1
        self._in_flight = None
