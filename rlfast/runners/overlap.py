"""Where the minibatch runner's batches come from: collected just before the learner trains
on them (:class:`SerialBatches`, the exact synchronous schedule), or, with ``overlap=True``,
while it trains on the previous one (:class:`OverlappedBatches`).

While the learner trains on batch k, the sampler collects batch k+1 in a background thread
with the parameters published after update k-1, so every batch but the first is one update
stale (PPO's ratio and clipping are taken against the policy that acted, which its stored
agent infos record). The learner trains a private copy of the agent (``training_twin`` of
``rlfast.agents.param_sharing``), published to the sampling agent between batches, when no
sampling is under way. For on-policy algorithms (PPO, A2C) with a synchronous sampler.
"""
from __future__ import annotations

import queue
import threading
from typing import Any, NamedTuple

from rlfast.agents.param_sharing import publish_to
from rlfast.utils.buffer import buffer_copy_, buffer_method


class PolicyLag(NamedTuple):
    """How stale the policy that sampled a batch was when the batch was trained on: in
    iterations and in gradient steps (the ``PolicyLag*`` columns)."""
    iterations: int
    gradient_steps: int

__all__ = ["BatchThread", "OverlappedBatches", "SerialBatches", "check_overlap"]


def check_overlap(owner: str, algo: Any, sampler: Any) -> None:
    """Refuse ``overlap=True`` for an algorithm that learns from replay or an asynchronous
    sampler (``owner``: the runner's name, for the message)."""
    if not getattr(algo, "on_policy", False):
        raise ValueError(
            f"{owner}: overlap=True overlaps on-policy sampling with learning (PPO, A2C); "
            f"{type(algo).__name__} learns from replay, where AsyncRl (--runner async) "
            f"runs sampling and learning concurrently")
    if getattr(sampler, "is_async", False):
        raise ValueError(f"{owner}: overlap=True needs a synchronous sampler, not "
                         f"{type(sampler).__name__}")


class BatchThread:
    """One background thread that collects batches: ``start`` hands it an iteration,
    ``result`` waits for that batch (re-raising, in the caller's thread, whatever the sampler
    raised), ``stop`` ends the thread. A daemon thread: it never keeps the interpreter
    alive."""

    def __init__(self, sampler: Any):
        self.sampler = sampler
        self._todo: queue.Queue = queue.Queue()
        self._done: queue.Queue = queue.Queue()
        self._busy = False
        self._thread = threading.Thread(target=self._serve, name="rlfast-overlap-sampler",
                                        daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            itr = self._todo.get()
            if itr is None:
                return
            try:
                self._done.put((True, self.sampler.obtain_samples(itr)))
            except BaseException as error:  # handed to the caller's thread
                self._done.put((False, error))

    def start(self, itr: int) -> None:
        """Begin collecting the batch of iteration ``itr`` in the background."""
        if self._busy:
            raise RuntimeError("a batch is already being collected")
        self._busy = True
        self._todo.put(itr)

    def result(self) -> tuple:
        """Wait for the batch under way: ``(samples, traj_infos)``; the sampler's error is
        raised here."""
        ok, value = self._done.get()
        self._busy = False
        if not ok:
            raise value
        return value

    def stop(self, timeout: float = 10.0) -> None:
        """End the thread (after the batch under way, if any, finished or failed: the
        sampler's shutdown ends its workers first)."""
        if self._thread.is_alive():
            self._todo.put(None)
            self._thread.join(timeout)


class SerialBatches:
    """The synchronous schedule: :meth:`begin` collects batch ``itr`` (the agent in sample
    mode) in the caller's thread; :meth:`end` returns the trajectories it completed."""

    def __init__(self, sampler: Any, agent: Any):
        self.sampler, self.agent = sampler, agent
        self._traj_infos: list = []

    def begin(self, itr: int, n_itr: int) -> Any:
        """Collect and return the batch of iteration ``itr``."""
        self.agent.sample_mode(itr)
        samples, self._traj_infos = self.sampler.obtain_samples(itr)
        return samples

    def end(self, itr: int, n_itr: int) -> list:
        """The trajectories completed in batch ``itr``."""
        return self._traj_infos

    def stop(self) -> None:
        """Nothing runs in the background."""


class OverlappedBatches:
    """The overlapped schedule's batches and the parameters they were sampled with.

    Per iteration ``itr``: :meth:`begin` returns the learner's copy of batch ``itr`` (the
    first one collected in the caller's thread) and starts batch itr+1 in the background
    (the sampling agent in sample mode); the learner trains on it; then :meth:`end` waits
    for batch itr+1, copies it into the learner's copy, publishes the learner's parameters
    to the sampling agent, appends batch itr's policy lag (iterations, updates of
    ``optimize_agent``) to ``lags`` and returns the trajectories completed in batch ``itr``.
    """

    def __init__(self, sampler: Any, sampling_agent: Any, learner: Any, algo: Any,
                 lags: list):
        self.sampler, self.sampling_agent, self.learner, self.algo = (
            sampler, sampling_agent, learner, algo)
        self.lags = lags
        self._thread = BatchThread(sampler)
        self._batch: Any = None  # the learner's copy, refilled in place
        self._traj_infos: list = []
        self._sampled_after = self._published = (0, 0)  # (iteration, updates) of parameters
        self._lag = PolicyLag(0, 0)

    def begin(self, itr: int, n_itr: int) -> Any:
        """The batch of iteration ``itr``; batch itr+1 (none after the last) starts in the
        background."""
        if self._batch is None:  # the first batch
            self.sampling_agent.sample_mode(itr)
            samples, self._traj_infos = self.sampler.obtain_samples(itr)
            self._batch = buffer_method(samples, "clone")
            self._sampled_after = self._published = (itr, self._updates())
        if itr + 1 < n_itr:
            self.sampling_agent.sample_mode(itr + 1)
            self._thread.start(itr + 1)
        self._lag = PolicyLag(itr - self._sampled_after[0],
                              self._updates() - self._sampled_after[1])
        return self._batch

    def end(self, itr: int, n_itr: int) -> list:
        """After training on batch ``itr``: take in batch itr+1, publish the parameters,
        record the lag; return the trajectories completed in batch ``itr``."""
        next_infos: list = []
        if itr + 1 < n_itr:
            samples, next_infos = self._thread.result()
            buffer_copy_(self._batch, samples)
            self._sampled_after = self._published
        publish_to(self.learner, self.sampling_agent)
        self._published = (itr + 1, self._updates())
        self.lags.append(self._lag)
        traj_infos, self._traj_infos = self._traj_infos, next_infos
        return traj_infos

    def stop(self) -> None:
        """End the background thread."""
        self._thread.stop()

    def _updates(self) -> int:
        return getattr(self.algo, "update_counter", 0)
