"""What a training snapshot holds, and how a runner continues from one (resume).

A snapshot is written at every log interval (per the logger's snapshot mode). Besides the
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
from typing import TYPE_CHECKING, Any

from rlfast.algos.replay_choice import replay_to_save
from rlfast.replays.state import load_replay_file, save_replay_file
from rlfast.utils.logging import logger
from rlfast.utils.seed import get_rng_state, set_rng_state

if TYPE_CHECKING:
    from rlfast.runners.minibatch_rl import MinibatchRlBase

__all__ = ["build_snapshot", "replay_sidecars", "restore_snapshot", "check_resumable",
           "restore_models_and_replay", "restore_training_state", "resume_start_itr",
           "REPLAY_SUFFIX", "RESUME_SEED_STRIDE"]

REPLAY_SUFFIX = "replay.npz"
# A resumed run whose environments start afresh seeds them ``seed + 1 + stride * resumes``,
# so that it does not replay the episodes the run began with.
RESUME_SEED_STRIDE = 100_003
_REQUIRED = ("itr", "agent_state_dict", "optimizer_state_dict", "algo_state", "rng_state",
             "runner_state")


def build_snapshot(runner: MinibatchRlBase, itr: int) -> dict:
    """The snapshot of ``runner`` after iteration ``itr`` (see the module docstring)."""
    return dict(itr=itr, cum_steps=(itr + 1) * runner.itr_batch_size,
                agent_state_dict=runner.agent.state_dict(),
                optimizer_state_dict=runner.algo.optim_state_dict(),
                algo_state=runner.algo.state_dict(),
                rng_state=get_rng_state(),
                sampler_state=runner.sampler.state_dict(),
                runner_state=runner.runner_state(),
                n_steps=runner.n_steps, seed=runner.seed,
                resume_count=runner.resume_count)


def replay_sidecars(runner: MinibatchRlBase) -> dict:
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


def resume_start_itr(runner: MinibatchRlBase, snapshot: Mapping[str, Any], n_itr: int) -> int:
    """The first iteration a run resumed from ``snapshot`` trains; refuses a snapshot that
    already covers the run's ``n_itr`` iterations."""
    start = int(snapshot["itr"]) + 1
    if start >= n_itr:
        raise ValueError(f"the snapshot is at {start * runner.itr_batch_size} steps and the run "
                         f"trains to n_steps={runner.n_steps}: nothing is left to do; give a "
                         f"larger total (rlfast resume --steps N)")
    return start


def restore_models_and_replay(runner: MinibatchRlBase, snapshot: Mapping[str, Any],
                              snapshot_dir: str | None) -> None:
    """The first part of a resume: the agent's parameters, the algorithm's counters and the
    replay buffer (an asynchronous runner does this before it forks its sampler, which then
    acts with the trained parameters and appends to the restored buffer)."""
    runner.agent.load_state_dict(snapshot["agent_state_dict"])
    if runner.sampling_agent is not runner.agent:  # overlap: the sampler acts with a copy
        runner.agent.publish_to(runner.sampling_agent)
    runner.algo.load_state_dict(snapshot["algo_state"])
    if not getattr(runner.algo, "replay_deferred", False):
        restore_replay(runner, snapshot, snapshot_dir)


def restore_replay(runner: MinibatchRlBase, snapshot: Mapping[str, Any],
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


def restore_training_state(runner: MinibatchRlBase, snapshot: Mapping[str, Any]) -> int:
    """The second part of a resume, once the optimizer is built: its state, the
    environments (when the sampler can continue them), the runner's log state and, last, the
    random generators, so that nothing drawn while restoring shifts them. Returns the first
    iteration to run."""
    runner.algo.load_optim_state_dict(snapshot["optimizer_state_dict"])
    sampler_state = snapshot.get("sampler_state")
    if sampler_state is not None and runner.sampler_restores_state and runner.rank == 0:
        runner.sampler.load_state_dict(sampler_state)
    else:
        logger.log("Environments start new episodes (their state was not saved, or this "
                   "sampler cannot restore it); the continued run is not step-for-step the "
                   "uninterrupted one", console=True)
    runner.load_runner_state(snapshot["runner_state"])
    set_rng_state(snapshot["rng_state"])
    return int(snapshot["itr"]) + 1


def restore_snapshot(runner: MinibatchRlBase, snapshot: Mapping[str, Any],
                     snapshot_dir: str | None) -> int:
    """Load ``snapshot`` into a runner whose ``startup`` has built and initialized
    everything (both parts above), and return the first iteration to run."""
    restore_models_and_replay(runner, snapshot, snapshot_dir)
    return restore_training_state(runner, snapshot)
