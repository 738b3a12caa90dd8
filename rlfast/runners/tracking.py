"""How a runner tracks performance: online, from its training trajectories, or offline, from
evaluations of the agent.

:class:`TrainTrajWindow` (``MinibatchRl``, ``SyncRl``, ``AsyncRl``) keeps the last
``log_traj_window`` completed training trajectories; each row shows their statistics, which
costs no extra environment steps. :class:`EvalReturns` (the ``*Eval`` runners) keeps every
evaluation's average return with the steps it was taken at; each row shows the evaluation
trajectories, and ``stop_return`` ends training at the first evaluation that reaches it.
Both save what their rows are computed from in snapshots (``state`` / ``load_state``).
"""
from __future__ import annotations

from collections import deque
from collections.abc import Mapping
from typing import Any

import numpy as np

from rlfast.runners.diagnostics import TrajInfos, nan_to_none, none_to_nan
from rlfast.utils.logging import logger

__all__ = ["EvalReturns", "TrainTrajWindow"]


def _mean_return(traj_infos: TrajInfos) -> float:
    """The trajectories' average return; NaN when none completed (no score)."""
    return float(np.mean([t["Return"] for t in traj_infos])) if traj_infos else float("nan")


class TrainTrajWindow:
    """Online tracking: the window of the last ``log_traj_window`` completed training
    trajectories, the count completed since the last row and the return of the last row."""

    def __init__(self, log_traj_window: int = 100):
        self.window: deque = deque(maxlen=log_traj_window)
        self.new_completed = 0
        self.last_return = float("nan")

    def add(self, traj_infos: TrajInfos) -> None:
        """Add completed training trajectories to the window and the count."""
        self.window.extend(traj_infos)
        self.new_completed += len(traj_infos)

    def row_trajs(self) -> deque:
        """Record ``Diagnostics/NewCompletedTrajs`` (and restart that count), update
        ``last_return`` from the window, and return the window: the row's trajectories."""
        logger.record_tabular("Diagnostics/NewCompletedTrajs", self.new_completed)
        self.new_completed = 0
        if self.window:
            self.last_return = _mean_return(self.window)
        return self.window

    def result(self, n_itr: int, itrs_done: int, itr_batch_size: int) -> dict:
        """``final_return`` (mean return of the window at the last row), ``n_itr`` and the
        ``cum_steps`` of ``n_itr`` iterations (``itrs_done`` is not counted: an online run
        reports its planned steps)."""
        return dict(final_return=self.last_return, n_itr=n_itr,
                    cum_steps=n_itr * itr_batch_size)

    def state(self) -> dict:
        """The window, the count since the last row and the last row's return."""
        return dict(traj_window=[dict(t) for t in self.window],
                    new_completed=self.new_completed, last_return=nan_to_none(self.last_return))

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`'s output."""
        self.window.clear()
        self.window.extend(state["traj_window"])
        self.new_completed = int(state["new_completed"])
        self.last_return = none_to_nan(state["last_return"])


class EvalReturns:
    """Offline tracking: every evaluation's ``(steps, average return)`` in ``eval_returns``,
    the last one's in ``last_eval_return``, the returns of the training episodes since
    the last row (the row's ``Diagnostics/TrainReturn``) and those of the last
    ``log_traj_window`` training episodes (``Diagnostics/TrainReturnWindow``: the
    training-curve figure that published Atari results quote, e.g. over the last 32)."""

    def __init__(self, log_traj_window: int = 100) -> None:
        self.last_eval_return = float("nan")
        self.eval_returns: list[tuple[int, float]] = []
        self.train_returns: list[float] = []
        self.train_window: deque = deque(maxlen=log_traj_window)

    def add(self, traj_infos: TrajInfos) -> None:
        """Keep completed training trajectories' returns for the next row's
        ``TrainReturn`` and the window's ``TrainReturnWindow``."""
        returns = [float(t["Return"]) for t in traj_infos]
        self.train_returns.extend(returns)
        self.train_window.extend(returns)

    def record(self, steps: int, traj_infos: TrajInfos) -> float:
        """An evaluation after ``steps`` environment steps: its average return (NaN when no
        episode completed) becomes ``last_eval_return`` and joins ``eval_returns``."""
        self.last_eval_return = _mean_return(traj_infos)
        self.eval_returns.append((steps, self.last_eval_return))
        return self.last_eval_return

    def record_columns(self, traj_infos: TrajInfos) -> None:
        """The evaluation row's own columns: ``NumEvalTrajs`` and ``TrainReturn`` (the mean
        return of the training episodes since the last row, whose record restarts)."""
        logger.record_tabular("Diagnostics/NumEvalTrajs", len(traj_infos))
        logger.record_tabular("Diagnostics/TrainReturn", float(np.mean(self.train_returns))
                              if self.train_returns else float("nan"))
        logger.record_tabular("Diagnostics/TrainReturnWindow",
                              float(np.mean(self.train_window)) if self.train_window
                              else float("nan"))
        self.train_returns.clear()

    def stop_reached(self, stop_return: float | None, steps: int) -> bool:
        """Whether the last evaluation, after ``steps`` steps, reached ``stop_return`` (None:
        never); logged when it did."""
        if stop_return is None or not self.last_eval_return >= stop_return:
            return False
        logger.log(f"Evaluation return {self.last_eval_return:.2f} reached stop_return "
                   f"{stop_return}: stopping after {steps} steps", console=True)
        return True

    def result(self, n_itr: int, itrs_done: int, itr_batch_size: int) -> dict:
        """``final_return`` (the last evaluation's average return), every
        ``(steps, return)`` in ``eval_returns``, ``n_itr`` and the ``cum_steps`` of the
        ``itrs_done`` iterations trained (fewer than ``n_itr`` after an early stop)."""
        return dict(final_return=self.last_eval_return, eval_returns=list(self.eval_returns),
                    n_itr=n_itr, cum_steps=itrs_done * itr_batch_size)

    def state(self) -> dict:
        """Every evaluation so far, the last one's return, the training returns since the
        last row and those of the window (NaN saved as None)."""
        return dict(eval_returns=[[steps, nan_to_none(ret)] for steps, ret in self.eval_returns],
                    last_eval_return=nan_to_none(self.last_eval_return),
                    train_returns=list(self.train_returns),
                    train_window=list(self.train_window))

    def load_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state`'s output."""
        self.eval_returns = [(int(steps), none_to_nan(ret))
                             for steps, ret in state["eval_returns"]]
        self.last_eval_return = none_to_nan(state["last_eval_return"])
        self.train_returns = [float(r) for r in state.get("train_returns", [])]
        self.train_window.clear()
        self.train_window.extend(float(r) for r in state.get("train_window", []))
