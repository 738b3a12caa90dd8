"""What a training snapshot holds, and how a runner continues from one (resume).

A snapshot is written at every log interval (per the logger's snapshot mode) and, with a
wall-clock cadence (``--snapshot-every MINUTES``, :class:`~rlfast.runners.cadence.SnapshotClock`),
at the end of the first iteration once that many minutes passed since the last one. Besides the
agent's parameters it holds everything a continued run needs to go on as if it had never
stopped:

* ``agent_state_dict`` (models, targets, observation-normalization statistics) and
  ``optimizer_state_dict``;
* ``algo_state``: the update counter, a learning-rate scheduler's position (schedules that
  follow the iteration, such as epsilon and PER beta, need nothing);
* ``rng_state``: Python's, numpy's and torch's generators;
* ``sampler_state``: the environments mid-episode, the agent inputs and the running
  trajectories (the serial sampler, when every environment can be captured; otherwise None,
  and the resumed run starts new episodes with reseeded environments);
* ``runner_state``: counters and what the log rows are computed from (training time,
  completed trajectories, the window of recent returns, the evaluations so far);
* ``itr``, ``cum_steps``, ``n_steps``, ``seed`` and ``resume_count``;
* with ``snapshot_replay``, the replay buffer in a sidecar ``.npz`` file (see
  ``rlfast.replays.state``), named under ``sidecar_files``.

Everything is plain data or tensors, so ``load_snapshot`` reads it with
``torch.load(weights_only=True)``.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any, Protocol

from rlfast.agents.param_sharing import publish_to
from rlfast.algos.replay_choice import replay_to_save
from rlfast.replays.state import load_replay_file, save_replay_file
from rlfast.runners.cadence import SnapshotClock, check_snapshot_minutes
from rlfast.utils.logging import logger
from rlfast.utils.seed import get_rng_state, set_rng_state

__all__ = ["Snapshots", "SnapshotRunner", "build_snapshot", "fresh_episode_seed", "log_resumed",
           "replay_sidecars", "restore_snapshot", "check_resumable", "restore_models_and_replay",
           "restore_training_state", "resume_start_itr", "REPLAY_SUFFIX", "RESUME_SEED_STRIDE"]

REPLAY_SUFFIX = "replay.npz"
# A resumed run whose environments start afresh seeds them ``seed + 1 + stride * resumes``,
# so that it does not replay the episodes the run began with.
RESUME_SEED_STRIDE = 100_003
_REQUIRED = ("itr", "agent_state_dict", "optimizer_state_dict", "algo_state", "rng_state",
             "runner_state")


def fresh_episode_seed(seed: int, resume_count: int) -> int:
    """The sampler's seed in a run resumed ``resume_count`` times (0: a fresh run):
    ``seed + 1``, plus ``RESUME_SEED_STRIDE`` per resume, so that environments that start
    afresh do not replay the episodes the run began with."""
    return seed + 1 + RESUME_SEED_STRIDE * resume_count


class SnapshotRunner(Protocol):
    """What the functions here read of a runner (every runner has it)."""

    agent: Any  # the trained agent
    sampling_agent: Any  # the agent the sampler acts with (the trained one but under overlap)
    algo: Any
    sampler: Any
    n_steps: int
    seed: int | None
    rank: int  # 0 in a single-process run
    itr_batch_size: int
    snapshot_replay: bool

    def runner_state(self) -> dict:
        """What the runner's log rows are computed from."""

    def load_runner_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`runner_state`'s output."""


class Snapshots:
    """A runner's snapshots and resume: hands each snapshot to the logger, which keeps it (or
    not) according to the run's snapshot mode; says whether a final snapshot is due when a
    run is interrupted, and whether the wall-clock cadence (``every_minutes``, None: none)
    asks for one; holds the snapshot a run resumes from (``resume_from``) and how many times
    the run was resumed (``resume_count``, 0 for a fresh run)."""

    def __init__(self) -> None:
        self.covered_itrs = 0  # iterations covered by the last snapshot handed over
        self.resume: tuple[Mapping[str, Any], str | None] | None = None
        self.resume_count = 0
        self.clock = SnapshotClock()  # the wall-clock cadence (--snapshot-every)

    @property
    def every_minutes(self) -> float | None:
        """Minutes of the wall-clock snapshot cadence (``--snapshot-every``), or None: a
        positive finite number, checked when set."""
        return self.clock.every_minutes

    @every_minutes.setter
    def every_minutes(self, minutes: float | None) -> None:
        self.clock.every_minutes = check_snapshot_minutes(minutes, "snapshot every_minutes")

    def start(self, itrs_done: int) -> int:
        """Training starts (or resumes) with ``itrs_done`` iterations done: those count as
        covered by a snapshot, and the wall clock's first interval starts now. Returns
        ``itrs_done``."""
        self.covered_itrs = itrs_done
        self.clock.restart()
        return itrs_done

    def resume_from(self, snapshot: Mapping[str, Any], snapshot_dir: str | None = None) -> None:
        """Make the next run continue from ``snapshot`` (refused when it lacks what resuming
        needs; ``snapshot_dir``: where its sidecar files lie)."""
        check_resumable(snapshot)
        self.resume = (snapshot, snapshot_dir)
        self.resume_count = int(snapshot.get("resume_count", 0)) + 1

    def save(self, runner: SnapshotRunner, itr: int) -> None:
        """Hand the snapshot of iteration ``itr`` (and the replay buffer, with
        ``snapshot_replay``) to the logger."""
        if logger.get_snapshot_dir() is not None and logger.get_snapshot_mode() != "none":
            logger.log("saving snapshot...")
            written = logger.save_itr_params(itr, build_snapshot(runner, itr, self.resume_count),
                                             sidecars=replay_sidecars(runner))
            if written is not None:  # the wall clock counts from the last snapshot on disk
                self.clock.restart()
        self.covered_itrs = itr + 1

    def final_due(self, itrs_done: int) -> bool:
        """Whether an interrupted run that finished ``itrs_done`` iterations saves a final
        snapshot: iterations finished since the last one, and the logger keeps a snapshot of
        the last one (see :func:`_kept`)."""
        itr = itrs_done - 1
        return 0 <= itr and self.covered_itrs <= itr and _kept(itr)

    def time_due(self, itr: int) -> bool:
        """Whether the wall-clock cadence asks for a snapshot after iteration ``itr``: its
        minutes passed since the last snapshot was written (or training started), no
        snapshot covers ``itr`` yet, and the logger keeps one of it (see :func:`_kept`; in
        mode "gap" the snapshot waits for an iteration the gap selects)."""
        return self.clock.due() and self.covered_itrs <= itr and _kept(itr)


def _kept(itr: int) -> bool:
    """Whether the logger keeps a snapshot of iteration ``itr``: a snapshot directory is set,
    and the mode is "last" or "all", or "gap" on an iteration the gap selects."""
    if logger.get_snapshot_dir() is None:
        return False
    mode = logger.get_snapshot_mode()
    return mode in ("last", "all") or (mode == "gap" and itr % logger.get_snapshot_gap() == 0)


def build_snapshot(runner: SnapshotRunner, itr: int, resume_count: int = 0) -> dict:
    """The snapshot of ``runner`` after iteration ``itr`` of a run resumed ``resume_count``
    times (see the module docstring)."""
    return dict(itr=itr, cum_steps=(itr + 1) * runner.itr_batch_size,
                agent_state_dict=runner.agent.state_dict(),
                optimizer_state_dict=runner.algo.optim_state_dict(),
                algo_state=runner.algo.state_dict(),
                rng_state=get_rng_state(),
                sampler_state=runner.sampler.state_dict(),
                runner_state=runner.runner_state(),
                n_steps=runner.n_steps, seed=runner.seed,
                resume_count=resume_count)


def replay_sidecars(runner: SnapshotRunner) -> dict:
    """The sidecar writers for ``logger.save_itr_params``: the replay buffer when the runner
    snapshots it (``snapshot_replay``) and the algorithm has one."""
    buffer = getattr(runner.algo, "replay_buffer", None)
    if not runner.snapshot_replay or buffer is None:
        return {}
    return {REPLAY_SUFFIX: lambda f: save_replay_file(replay_to_save(buffer), f)}


def check_resumable(snapshot: Mapping[str, Any], where: str = "snapshot") -> None:
    """Refuse a snapshot that lacks what resuming needs (one written by an rlfast from before
    resume existed holds the agent and optimizer only)."""
    missing = [k for k in _REQUIRED if k not in snapshot]
    if missing:
        raise ValueError(f"{where} cannot be resumed: it lacks {', '.join(missing)} (saved by "
                         f"an older rlfast, or not a training snapshot); it can still be "
                         f"evaluated with rlfast eval")


def resume_start_itr(runner: SnapshotRunner, snapshot: Mapping[str, Any], n_itr: int) -> int:
    """The first iteration a run resumed from ``snapshot`` trains; refuses a snapshot that
    already covers the run's ``n_itr`` iterations."""
    start = int(snapshot["itr"]) + 1
    if start >= n_itr:
        raise ValueError(f"the snapshot is at {start * runner.itr_batch_size} steps and the run "
                         f"trains to n_steps={runner.n_steps}: nothing is left to do; give a "
                         f"larger total (rlfast resume --steps N)")
    return start


def restore_models_and_replay(runner: SnapshotRunner, snapshot: Mapping[str, Any],
                              snapshot_dir: str | None) -> None:
    """The first part of a resume: the agent's parameters, the algorithm's counters and the
    replay buffer (an asynchronous runner does this before it forks its sampler, which then
    acts with the trained parameters and appends to the restored buffer)."""
    runner.agent.load_state_dict(snapshot["agent_state_dict"])
    if runner.sampling_agent is not runner.agent:  # overlap: the sampler acts with a copy
        publish_to(runner.agent, runner.sampling_agent)
    runner.algo.load_state_dict(snapshot["algo_state"])
    if not getattr(runner.algo, "replay_deferred", False):
        restore_replay(runner, snapshot, snapshot_dir)


def restore_replay(runner: SnapshotRunner, snapshot: Mapping[str, Any],
                   snapshot_dir: str | None) -> None:
    """The replay buffer's part of a resume (part of :func:`restore_models_and_replay`; an
    asynchronous run whose optimizer builds the replay on its device calls it once built):
    the saved replay file, or learning paused until replay is refilled."""
    itr = int(snapshot["itr"])
    # In a multi-rank run rank 0 alone saved the snapshot: its replay and environments are
    # rank 0's, and the other ranks refill their buffers and start new episodes.
    own_state = runner.rank == 0
    buffer = getattr(runner.algo, "replay_buffer", None)
    if buffer is not None:
        replay_file = (snapshot.get("sidecar_files") or {}).get(REPLAY_SUFFIX)
        if replay_file is not None and snapshot_dir is not None and own_state:
            path = os.path.join(snapshot_dir, replay_file)
            if not os.path.isfile(path):
                raise FileNotFoundError(f"the snapshot names replay file {path}, which is "
                                        f"missing")
            load_replay_file(replay_to_save(buffer), path)
            logger.log(f"Resumed replay buffer from {path}", console=True)
        else:
            runner.algo.resume_without_replay(itr + 1)
            logger.log(f"Replay buffer not in the snapshot (save it with --snapshot-replay): "
                       f"learning resumes at iteration {runner.algo.learn_after_itr}, once "
                       f"replay holds min_steps_learn steps again", console=True)


def restore_training_state(runner: SnapshotRunner, snapshot: Mapping[str, Any]) -> int:
    """The second part of a resume, once the optimizer is built: its state, the
    environments (when the sampler can continue them), the runner's log state and, last, the
    random generators, so that nothing drawn while restoring shifts them. Returns the first
    iteration to run."""
    runner.algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    sampler_state = snapshot.get("sampler_state")
    restores = getattr(runner.sampler, "restores_state", False)  # the serial sampler can
    if sampler_state is not None and restores and runner.rank == 0:
        runner.sampler.load_state_dict(sampler_state)
    else:
        logger.log("Environments start new episodes (their state was not saved, or this "
                   "sampler cannot restore it); the continued run is not step-for-step the "
                   "uninterrupted one", console=True)
    runner.load_runner_state(snapshot["runner_state"])
    set_rng_state(snapshot["rng_state"])
    return int(snapshot["itr"]) + 1


def log_resumed(start_itr: int, itr_batch_size: int, n_steps: int) -> None:
    """Tell the console where a resumed run continues and where it goes."""
    logger.log(f"Resumed from iteration {start_itr - 1} ({start_itr * itr_batch_size} "
               f"steps); training to {n_steps} steps", console=True)


def restore_snapshot(runner: SnapshotRunner, snapshot: Mapping[str, Any],
                     snapshot_dir: str | None) -> int:
    """Load ``snapshot`` into a runner whose ``startup`` has built and initialized
    everything (both parts above), and return the first iteration to run."""
    restore_models_and_replay(runner, snapshot, snapshot_dir)
    return restore_training_state(runner, snapshot)
