"""What the synchronous and asynchronous runners have alike, written once.

``MinibatchRlBase`` (``rlfast.runners.minibatch_rl``) and ``AsyncRlBase``
(``rlfast.runners.async_rl``) differ in their loop; the members that only read or hand on
what the components hold (the log cadence, the diagnostics, the snapshots) and the choice of
performance tracking do not. They are written here, each once, and both runner families take
them as class attributes (``n_itr = common.n_itr``): a function both classes use, not a base
class, so that neither family's inheritance grows (see ARCHITECTURE.md, "Runners and
agents": no runner subclasses another to replace its core, at most three levels).

Each member reads the runner's ``cadence``, ``diagnostics``, ``snapshots``, ``interrupts``,
``algo``, ``rank``, ``itrs_done``, ``tracking_cls`` and ``log_traj_window``, which every
runner has.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rlfast.runners.tracking import EvalReturns, TrainTrajWindow
from rlfast.utils.checks import check_int

__all__ = ["check_tracking_settings", "final_result", "get_traj_info_kwargs",
           "itr_batch_size", "load_runner_state", "n_itr", "new_tracking", "resume_from",
           "runner_state", "save_itr_snapshot", "snapshot_if_due", "write_window_row"]

_EVALUATING = "MinibatchRlEval, SyncRlEval, AsyncRlEval"


def check_tracking_settings(runner: Any, log_traj_window: int,
                            stop_return: float | None) -> None:
    """Set ``runner.log_traj_window`` (training returns kept for the rows, at least 1) and
    ``runner.stop_return`` (None, or the evaluation return that ends training early), refusing
    ``stop_return`` on a runner that tracks no evaluations (its ``tracking_cls`` is not
    :class:`~rlfast.runners.tracking.EvalReturns`)."""
    owner = type(runner).__name__
    runner.log_traj_window = check_int(log_traj_window, "log_traj_window", minimum=1,
                                       owner=owner)
    if stop_return is not None and runner.tracking_cls is not EvalReturns:
        raise TypeError(f"{owner}: stop_return={stop_return!r} needs evaluations; give it to "
                        f"an evaluating runner ({_EVALUATING})")
    runner.stop_return = None if stop_return is None else float(stop_return)


@property
def n_itr(self: Any) -> int:
    """Iterations of the run: sampler batches (every rank's together in a multi-rank run);
    set at start-up."""
    return self.cadence.n_itr


@property
def itr_batch_size(self: Any) -> int:
    """Environment steps per iteration, every rank's together; set at start-up."""
    return self.cadence.itr_batch_size


def new_tracking(self: Any) -> TrainTrajWindow | EvalReturns:
    """The performance tracking of a run, made at each start-up: the class's
    ``tracking_cls`` (:class:`~rlfast.runners.tracking.TrainTrajWindow`, the window of recent
    training trajectories, or :class:`~rlfast.runners.tracking.EvalReturns`, the record of
    evaluations), keeping the last ``log_traj_window`` training returns."""
    if self.tracking_cls is None:
        raise TypeError(f"{type(self).__name__} names no tracking_cls (TrainTrajWindow or "
                        f"EvalReturns) and does not override new_tracking")
    return self.tracking_cls(self.log_traj_window)


def write_window_row(self: Any, itr: int) -> None:
    """Log the window of recent training trajectories as the row of iteration ``itr``, then
    save the snapshot (a run killed between the two resumes from the previous snapshot and
    redoes this row)."""
    self.diagnostics.log_row(itr, self.tracking.row_trajs())
    self.save_itr_snapshot(itr)


def get_traj_info_kwargs(self: Any) -> dict:
    """Keyword arguments for the sampler's trajectory infos: the algorithm's discount, so
    that ``DiscountedReturn`` matches what the algorithm optimizes."""
    return dict(discount=getattr(self.algo, "discount", 1.0))


def save_itr_snapshot(self: Any, itr: int) -> None:
    """Hand the snapshot of iteration ``itr`` (and the replay buffer, with
    ``snapshot_replay``) to the logger, which saves it (or not) according to the run's
    snapshot mode (see ``Snapshots.save``). Rank 0 alone saves: every rank holds the same
    parameters (the asynchronous master is rank 0)."""
    if self.rank == 0:
        self.snapshots.save(self, itr)


def snapshot_if_due(self: Any, itr: int) -> None:
    """At the end of iteration ``itr``: save its snapshot when the wall-clock cadence asks for
    one (``--snapshot-every``, see ``Snapshots.time_due``), with SIGTERM and Ctrl-C held
    until it is written. Rank 0 alone saves, as in :func:`save_itr_snapshot`; it needs no
    other rank (they hold the same parameters), so it decides on its own clock."""
    if self.rank == 0 and self.snapshots.time_due(itr):
        with self.interrupts.held():
            self.snapshots.save(self, itr)


def resume_from(self: Any, snapshot: Mapping[str, Any], snapshot_dir: str | None = None) -> None:
    """Make the next ``train()`` continue the run ``snapshot`` was taken from (a dict from
    ``load_snapshot``; ``snapshot_dir``: where its sidecar files, such as the replay buffer,
    lie). The runner must be built as the run was (same algorithm, agent, sampler and batch
    shape); ``n_steps`` may be larger, to train on. An asynchronous sampler process starts at
    the next iteration."""
    self.snapshots.resume_from(snapshot, snapshot_dir)


def runner_state(self: Any) -> dict:
    """What the log rows are computed from, saved in snapshots (see ``Diagnostics.state``)."""
    return self.diagnostics.state()


def load_runner_state(self: Any, state: Mapping[str, Any]) -> None:
    """Restore :meth:`runner_state`'s output (at start-up)."""
    self.diagnostics.load_state(state)


def final_result(self: Any) -> dict:
    """The summary ``train`` returns: ``final_return``, ``n_itr`` and ``cum_steps`` (and
    ``eval_returns`` for the evaluating runners)."""
    return self.diagnostics.result(self.itrs_done)
