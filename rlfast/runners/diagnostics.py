"""The log rows every runner writes: progress, timing, trajectory and optimizer statistics.

:class:`Diagnostics` gathers, between two rows, the optimizer infos of every update and the
count of completed trajectories, and writes a row at each log interval of the run's
:class:`~rlfast.runners.cadence.LogCadence`: ``Diagnostics/`` progress and timing columns
(evaluation time left out of the training time and speed), statistics of the trajectories
the runner's performance tracking chose (see ``rlfast.runners.tracking``) and of the
optimizer infos. Between rows a progress bar counts toward the next one, when asked for and
stderr is a terminal (in a log file it would be noise).
"""
from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from rlfast.runners.cadence import LogCadence
from rlfast.runners.overlap import PolicyLag
from rlfast.utils.logging import logger
from rlfast.utils.prog_bar import ProgBarCounter

__all__ = ["Diagnostics", "TrajInfos", "nan_to_none", "none_to_nan"]

TrajInfos = Sequence[Mapping[str, Any]]
TRAJ_KEYS = ("Return", "Length", "NonzeroRewards", "DiscountedReturn")


class Diagnostics:
    """The running diagnostics of one run (made at its start-up, once the algorithm is
    initialized): optimizer infos of ``algo.opt_info_fields``, training time, completed
    trajectories (handed to the run's performance ``tracking`` too), the overlapped
    schedule's policy lags (``overlap``), the progress bar (``progress_bar``), and the
    sampler workers restarted so far (``sampler.worker_restarts``, the ``WorkerRestarts``
    column)."""

    def __init__(self, algo: Any, cadence: LogCadence, tracking: Any, overlap: bool = False,
                 progress_bar: bool = True, sampler: Any = None):
        self.algo = algo
        self.sampler = sampler
        self.cadence = cadence
        self.tracking = tracking
        self.overlap = overlap
        self.progress_bar = progress_bar
        self.opt_infos: dict[str, list] = {k: [] for k in algo.opt_info_fields}
        self.cum_time = 0.0
        self.cum_completed_trajs = 0
        self.lags: list[PolicyLag] = []  # overlap: one per iteration
        self._last_time = time.time()
        self._row_itr: int | None = None  # the iteration the last row (or start) followed
        self._pbar: ProgBarCounter | None = None

    # ---- between rows ------------------------------------------------------------------------
    def store(self, itr: int, traj_infos: TrajInfos, opt_info: Any) -> None:
        """Keep iteration ``itr``'s completed trajectories and optimizer infos until the next
        row, and advance the progress bar."""
        if self._row_itr is None:  # the first iteration since start-up (or a resume)
            self._row_itr = itr - 1
        self.add_trajs(traj_infos)
        self.add_opt_info(opt_info)
        if self._pbar is not None:
            self._pbar.update((itr + 1) % self.cadence.log_interval_itrs)

    def add_trajs(self, traj_infos: TrajInfos) -> None:
        """Count completed training trajectories and hand them to the tracking."""
        self.cum_completed_trajs += len(traj_infos)
        self.tracking.add(traj_infos)

    def add_opt_info(self, opt_info: Any) -> None:
        """Keep one ``optimize_agent`` call's infos (None: none) until the next row."""
        for k, v in self.opt_infos.items():
            new = getattr(opt_info, k, [])
            v.extend(new if isinstance(new, list) else [new])

    def start_progress(self) -> None:
        """Draw a bar toward the next row (when asked for and stderr is a terminal)."""
        if self._show_progress():
            self._pbar = ProgBarCounter(self.cadence.log_interval_itrs)

    def stop_progress(self) -> None:
        """Complete and drop the bar, if one is drawn."""
        if self._pbar is not None:
            self._pbar.stop()
            self._pbar = None

    # ---- rows ---------------------------------------------------------------------------------
    def log_row(self, itr: int, traj_infos: Iterable[Mapping[str, Any]],
                eval_time: float = 0.0, prefix: str = "Diagnostics/") -> None:
        """Write the row of iteration ``itr``: progress and timing under ``prefix``,
        statistics of ``traj_infos`` and of the optimizer infos gathered since the last row.
        ``eval_time`` is left out of the training time and speed."""
        if self._pbar is not None:
            self._pbar.stop()
        cadence = self.cadence
        now = time.time()
        itr_time = now - self._last_time - eval_time
        self.cum_time += itr_time
        steps = cadence.steps_after(itr)
        steps_since = self._steps_since_row(itr)
        with logger.tabular_prefix(prefix):
            logger.record_tabular("Iteration", itr)
            logger.record_tabular("CumSteps", steps)
            logger.record_tabular("CumTime (s)", self.cum_time)
            logger.record_tabular("StepsPerSecond", steps_since / max(itr_time, 1e-9))
            logger.record_tabular("CumCompletedTrajs", self.cum_completed_trajs)
            logger.record_tabular("CumUpdates", getattr(self.algo, "update_counter", 0))
            logger.record_tabular("EvalTime (s)", eval_time)
            logger.record_tabular("WorkerRestarts", getattr(self.sampler, "worker_restarts", 0))
            rate = steps / max(self.cum_time, 1e-9)
            logger.record_tabular("ETA (s)", cadence.steps_left(itr) / max(rate, 1e-9))
            if self.overlap:
                lags = self.lags or [PolicyLag(0, 0)]
                logger.record_tabular("PolicyLag", float(np.mean([lag.iterations
                                                                   for lag in lags])))
                logger.record_tabular("PolicyLagGradientSteps",
                                      float(np.mean([lag.gradient_steps for lag in lags])))
                self.lags.clear()
        self._record_stats(traj_infos)
        logger.dump_tabular(with_prefix=False)
        self._last_time = time.time()
        self._row_itr = itr
        self._pbar = None
        if itr < cadence.n_itr - 1:
            self.start_progress()

    def log_first_row(self, traj_infos: TrajInfos, eval_time: float) -> None:
        """Write the row of the pre-training evaluation: no steps, time or updates yet."""
        logger.record_tabular("Diagnostics/Iteration", -1)
        logger.record_tabular("Diagnostics/CumSteps", 0)
        logger.record_tabular("Diagnostics/CumTime (s)", 0.0)
        logger.record_tabular("Diagnostics/StepsPerSecond", float("nan"))
        logger.record_tabular("Diagnostics/CumCompletedTrajs", 0)
        logger.record_tabular("Diagnostics/CumUpdates", 0)
        logger.record_tabular("Diagnostics/EvalTime (s)", eval_time)
        logger.record_tabular("Diagnostics/WorkerRestarts",
                              getattr(self.sampler, "worker_restarts", 0))
        logger.record_tabular("Diagnostics/ETA (s)", float("nan"))
        self._record_stats(traj_infos)
        logger.dump_tabular(with_prefix=False)
        self._last_time = time.time()
        self._row_itr = -1

    def _steps_since_row(self, itr: int) -> int:
        """Environment steps of the iterations since the last row, up to ``itr``: the
        speed's numerator. Counted from the iteration the last row followed (the start of
        the run, or of a resumed run, before the first row), so that a short last interval
        (``n_steps`` not a multiple of the log interval) is not credited with a whole
        interval's steps in the time of a few iterations."""
        cadence = self.cadence
        if self._row_itr is None:  # a row before any stored iteration: one interval's worth
            return min(cadence.log_interval_itrs, itr + 1) * cadence.itr_batch_size
        return max(itr - self._row_itr, 0) * cadence.itr_batch_size

    def _record_stats(self, traj_infos: Iterable[Mapping[str, Any]]) -> None:
        traj_infos = list(traj_infos)
        keys = list(TRAJ_KEYS)
        if traj_infos:
            keys += [k for k in traj_infos[0] if not k.startswith("_") and k not in keys]
        for k in keys:
            values = [info[k] for info in traj_infos if k in info]
            logger.record_tabular_misc_stat(k, np.asarray(values, dtype=np.float64))
        for k, v in self.opt_infos.items():
            logger.record_tabular_misc_stat(k, np.asarray(v, dtype=np.float64))
            v.clear()

    def result(self, itrs_done: int) -> dict:
        """The summary of a run that trained ``itrs_done`` iterations (see the tracking's
        ``result``)."""
        cadence = self.cadence
        return self.tracking.result(cadence.n_itr, itrs_done, cadence.itr_batch_size)

    # ---- snapshots ----------------------------------------------------------------------------
    def state(self) -> dict:
        """What a snapshot keeps: training time, completed trajectories, the optimizer infos
        gathered since the last row (NaN saved as None) and the tracking's state."""
        return dict(cum_time=self.cum_time, cum_completed_trajs=self.cum_completed_trajs,
                    opt_infos={k: [nan_to_none(float(x)) for x in v]
                               for k, v in self.opt_infos.items()},
                    **self.tracking.state())

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`'s output."""
        self.cum_time = float(state["cum_time"])
        self.cum_completed_trajs = int(state["cum_completed_trajs"])
        for key, values in state.get("opt_infos", {}).items():
            if key in self.opt_infos:
                self.opt_infos[key].extend(none_to_nan(x) for x in values)
        self.tracking.load_state(state)

    def _show_progress(self) -> bool:
        return bool(self.progress_bar) and _stderr_is_terminal()


def nan_to_none(value: float) -> float | None:
    """NaN as None: snapshots refuse non-finite numbers, which elsewhere mean diverged
    weights."""
    return None if value != value else float(value)


def none_to_nan(value: float | None) -> float:
    """The inverse of :func:`nan_to_none`."""
    return float("nan") if value is None else float(value)


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed
        return False
