"""The asynchronous optimizer's pace: the batches in replay and the updates they allow.

The optimizer is throttled so that the replay ratio (training samples used / environment
samples in replay, counted from the first learning step) never exceeds the algorithm's
``replay_ratio``: it waits for new batches when it is ahead. :class:`ReplayPace` counts the
batches the sampler finished (``received``) and those appended to replay (``copied``),
appends the batches waiting for the optimizer (``pending``, with ``copier="optimizer"``;
with ``sampler_throttle`` only while the optimizer owes no updates, so that the sampler waits
and the replay ratio never falls below ``replay_ratio`` either), keeps the policy lag of
every batch, and writes the async columns of each log row:
``Diagnostics/ReplayRatio`` (achieved since the last row), ``Diagnostics/SamplerItrPerSecond``,
``Diagnostics/UpdatesPerSecond`` and ``Diagnostics/PolicyLag`` (updates made between the
parameters a batch was sampled with and its arrival, averaged over the row's batches).
"""
from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from rlfast.utils.logging import logger

__all__ = ["COPIERS", "ReplayPace", "check_copier"]

COPIERS = ("optimizer", "process")


def check_copier(copier: str, sampler_throttle: bool) -> None:
    """Refuse an unknown ``copier``, and ``sampler_throttle`` without the optimizer copier."""
    if copier not in COPIERS:
        raise ValueError(f"copier must be one of {COPIERS}; got {copier!r}")
    if sampler_throttle and copier != "optimizer":
        raise ValueError("sampler_throttle=True needs copier='optimizer' (the optimizer "
                         "decides when a batch enters replay)")


class ReplayPace:
    """The pace of one asynchronous run with ``algo`` and iterations of ``itr_batch_size``
    environment steps (see the module docstring); ``append_slot(slot)`` appends a pending
    batch's double-buffer slot to replay and frees it."""

    def __init__(self, algo: Any, itr_batch_size: int,
                 append_slot: Callable[[int], None] | None = None,
                 sampler_throttle: bool = False):
        self.algo = algo
        self.itr_batch_size = itr_batch_size
        self.append_slot = append_slot
        self.sampler_throttle = sampler_throttle
        self.received = self.copied = 0
        self.pending: list[int] = []  # received batches not yet in replay (optimizer copier)
        self.finished = False  # the sampler sent its last batch
        self.lags: list[int] = []
        # Updates the replay ratio allows count from learn_from, on top of base.
        self.allowance = (algo.min_itr_learn, 0)
        self._row = dict(time=time.time(), copied=0, updates=0, received=0)

    def resume(self, start_itr: int) -> None:
        """A run resumed at iteration ``start_itr`` (the algorithm restored): its batches
        count as received and in replay, and the updates the replay ratio allows count from
        the steps already trained on (replay restored), or from the refill after which
        learning starts again."""
        algo = self.algo
        self.received = self.copied = start_itr
        self._row.update(copied=start_itr, received=start_itr, updates=algo.update_counter)
        learn_from = max(algo.min_itr_learn, algo.learn_after_itr)
        self.allowance = (learn_from, 0 if learn_from == algo.min_itr_learn
                          else algo.update_counter)

    def batch_arrived(self, itr: int, param_updates: int, to_append: bool) -> None:
        """The sampler finished batch ``itr`` with the parameters of update
        ``param_updates``; ``to_append``: the optimizer appends it to replay."""
        self.received = itr + 1
        self.lags.append(self.algo.update_counter - param_updates)
        if to_append:
            self.pending.append(itr)

    def append_pending(self) -> None:
        """Append the pending batches to replay, in order (with ``sampler_throttle``, only
        while the optimizer owes no updates)."""
        while self.pending and not (self.sampler_throttle and self.owes_updates()):
            self.append_slot(self.pending.pop(0) % 2)
            self.copied += 1

    def updates_allowed(self) -> int:
        """Updates the replay ratio allows so far: ``replay_ratio`` times the steps in replay
        since learning began, over the training batch size."""
        algo = self.algo
        learn_from, base = self.allowance
        learning = self.copied - learn_from
        if learning <= 0:
            return base
        return base + math.floor(algo.replay_ratio * learning * self.itr_batch_size
                                 / algo.batch_size + 1e-9)

    def owes_updates(self) -> bool:
        """Whether the replay ratio allows one more ``optimize_agent`` call."""
        return self.algo.update_counter + self.algo.updates_per_optimize <= self.updates_allowed()

    def restart_row(self) -> None:
        """Time the next row from now (after the pre-training evaluation)."""
        self._row["time"] = time.time()

    def record_columns(self) -> None:
        """The async columns of the next log row (see the module docstring)."""
        now = time.time()
        row = self._row
        elapsed = max(now - row["time"], 1e-9)
        steps = (self.copied - row["copied"]) * self.itr_batch_size
        updates = self.algo.update_counter - row["updates"]
        with logger.tabular_prefix("Diagnostics/"):
            logger.record_tabular("ReplayRatio", updates * self.algo.batch_size / steps
                                  if steps else float("nan"))
            logger.record_tabular("SamplerItrPerSecond", (self.received - row["received"])
                                  / elapsed)
            logger.record_tabular("UpdatesPerSecond", updates / elapsed)
            logger.record_tabular("PolicyLag", float(np.mean(self.lags)) if self.lags
                                  else float("nan"))
        self.lags = []
        self._row = dict(time=now, copied=self.copied, updates=self.algo.update_counter,
                         received=self.received)
