"""``rlfast resume RUN_DIR``: continue a run from its last snapshot.

The run is rebuilt from what it recorded in ``params.json`` (algorithm, environment,
sampler, seed, affinity code and the fully resolved config, not today's preset, which may
have changed since), its newest snapshot is loaded (``weights_only``, digest checked), and
training continues from the iteration after it up to ``--steps`` total environment steps
(default: the run's original total). The run directory is continued, never replaced:
``debug.log`` and ``progress.csv`` are appended to (rows logged after the snapshot, whose
iterations are redone, are dropped), snapshots keep their names, and ``params.json`` gains a
record of every resume under ``resumes``.

Changing the configuration on resume (``--set``, ``--n-envs``, ``--sampler``,
``--affinity``, the number of ranks) is refused unless ``--force``; forced changes are
recorded in that resume's entry in ``params.json``.

A run whose env family, algorithm or sampler came from a plug-in recorded its modules in
``params.json``; they are imported again before anything is rebuilt (``RLFAST_PLUGINS`` need
not be set again), and one that cannot be imported is a one-line error naming it.

The device is not part of the configuration: ``--device`` (default ``auto``) is resolved
again on every resume, as ``rlfast train`` does (the run's affinity code, when it has one,
decides), so a run trained on a GPU continues on the CPU and the other way round. Snapshots
load onto the CPU (``map_location="cpu"``) and their tensors are copied into the models and
optimizer on the learner's device; ``params.json`` records the device of each resume. The
run keeps its recorded sampler (the gpu and alternating samplers also run with the agent
on the CPU).

A multi-rank (DistributedDataParallel) run resumes with its ranks spawned again, or under
the launcher (torchrun, srun) that starts ``rlfast resume`` on every rank: every rank loads
the snapshot (parameters, optimizer, counters); rank 0, which saved it, also continues its
environments and replay buffer, while the other ranks start new episodes and refill theirs.
An asynchronous run (``--runner async``) resumes with its sampler process starting at the
snapshot's iteration, acting with the snapshot's parameters, and its replay buffer restored
(or refilled) before the sampler starts; its environments start new episodes.

A multi-rank ``rlfast train`` under torchrun's elastic agent (``--max-restarts N``) is
restartable: when a rank dies the agent restarts every rank with the same command line and
``TORCHELASTIC_RESTART_COUNT`` > 0, and :func:`configure_train_or_restart` turns that
``train`` into this module's resume of the run in ``--log-dir`` from its newest snapshot.
It does so only for the run that the same torchrun invocation wrote there
(``params.json`` records its ``TORCHELASTIC_RUN_ID`` as ``launcher_run_id``) with the same
algorithm, environment, seed, runner and configuration; a run that saved no snapshot yet
is trained again from the start in its own directory, and any other directory is treated
as ``rlfast train`` treats it (one that holds another run is refused).
"""
from __future__ import annotations

import argparse
import json
import os
from typing import Any

from rlfast.experiments import assembly, catalog
from rlfast.experiments.arguments import add_console_arguments, add_wandb_arguments, wandb_settings
from rlfast.experiments.assembly import (TrainRun, affinity_for_run, distributed_setup,
                                         resolve_config, run_command, snapshot_cadence)
from rlfast.experiments.config import ConfigError
from rlfast.experiments.device import device_label, device_summary, learner_device
from rlfast.experiments.placement import run_affinity
from rlfast.experiments.presets import RUNNERS, build_experiment
from rlfast.experiments.resume_changes import checked_changes, config_changes, resume_record
from rlfast.experiments.run_dir import (RunDirError, latest_snapshot, log_dir_for_run,
                                        read_run_params, reopening, snapshot_files)
from rlfast.runners.rank_group import elastic_restart
from rlfast.runners.snapshots import check_resumable
from rlfast.utils.distributed import launch_env
from rlfast.utils.logging.serialization import json_safe
from rlfast.utils.logging.snapshot import load_snapshot

__all__ = ["add_resume_parser", "configure_resume", "config_changes", "checked_changes",
           "resume_record", "resume_main", "restarted_run", "configure_train_or_restart",
           "restartable_train_main"]


def add_resume_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Add the ``resume`` subcommand."""
    resume = subparsers.add_parser(
        "resume", help="continue a run from its last snapshot",
        description="Continue the run in RUN_DIR from its newest snapshot, appending to its "
                    "logs, up to --steps total environment steps (default: its original "
                    "total).")
    resume.add_argument("run_dir", help="the run directory (holds params.json and params.pkl "
                                        "or itr_<n>.pkl)")
    resume.add_argument("--steps", type=int, default=None,
                        help="total environment steps to train to (default: the run's "
                             "original total)")
    resume.add_argument("--snapshot", default=None, metavar="PATH",
                        help="resume from this snapshot file instead of the newest")
    resume.add_argument("--set", dest="overrides", action="append", default=[],
                        metavar="KEY=VALUE", help="change a config value (needs --force)")
    resume.add_argument("--n-envs", type=int, default=None,
                        help="change batch_B (needs --force; environments restart)")
    resume.add_argument("--sampler", choices=catalog.sampler_names(), default=None,
                        help="change the sampler (needs --force)")
    resume.add_argument("--affinity", default=None, metavar="CODE",
                        help="change the affinity code (needs --force)")
    resume.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N",
                        help="where the learner computes now, whatever it trained on: auto "
                             "(default: GPU 0 when CUDA is available), cpu, cuda or cuda:N; "
                             "the run's affinity code decides instead when it has one")
    resume.add_argument("--world-size", type=int, default=None, metavar="N",
                        help="ranks to spawn (default: as the run was trained; under torchrun "
                             "or srun the launcher's)")
    resume.add_argument("--force", action="store_true",
                        help="accept configuration changes; they are recorded in params.json")
    resume.add_argument("--snapshot-every", type=float, default=None, metavar="MINUTES",
                        help="snapshot on the wall clock every MINUTES as well as at the log "
                             "rows (default: as the run did)")
    resume.add_argument("--snapshot-replay", default=None, action=argparse.BooleanOptionalAction,
                        help="save the replay buffer with each snapshot (default: as the run "
                             "did)")
    add_console_arguments(resume)
    add_wandb_arguments(resume)  # a run trained with --wandb continues its W&B run anyway
    return resume


def configure_resume(args: argparse.Namespace) -> Any:
    """Rebuild the run in ``args.run_dir``, load its snapshot into the runner, and return
    a ``TrainRun`` that :func:`rlfast.experiments.assembly.run_train` continues. Raises
    ``ConfigError`` for a directory that holds no resumable run, a snapshot that does not
    load, an unforced configuration change, or a total that is already reached, and
    :class:`~rlfast.experiments.run_dir.PluginImportError` (one line) for a plug-in module
    the run recorded, or a module it names, that cannot be imported."""
    run_dir = os.path.abspath(args.run_dir)
    with reopening(run_dir) as params:  # the run's plug-ins are imported again first
        return _rebuild_run(args, run_dir, params)


def _rebuild_run(args: argparse.Namespace, run_dir: str, params: dict) -> Any:
    """:func:`configure_resume` once the run's ``params.json`` is read and its plug-ins are
    imported."""
    runner_kind = params.get("runner") or "sync"
    if runner_kind not in RUNNERS:
        raise ConfigError(f"{run_dir}: params.json names runner {runner_kind!r}; expected one "
                          f"of {', '.join(RUNNERS)}")
    snapshot_path = os.path.abspath(args.snapshot) if args.snapshot else latest_snapshot(run_dir)
    try:
        snapshot = load_snapshot(snapshot_path)
    except FileNotFoundError as e:
        raise ConfigError(f"no snapshot file {snapshot_path}") from e
    if params.get("es"):  # an evolution-strategies run (rlfast train cem|cmaes|openai_es)
        from rlfast.experiments.es_train import configure_es_resume
        return configure_es_resume(args, params, run_dir, snapshot, snapshot_path)
    check_resumable(snapshot, where=f"snapshot {snapshot_path}")

    old_config = params["config"]
    original_steps = int(old_config["runner"]["n_steps"])
    steps = int(args.steps) if args.steps is not None else original_steps
    config = resolve_config(old_config, {"sampler.batch_B": args.n_envs,
                                         "runner.n_steps": steps},
                            overrides=args.overrides)
    if config["runner"]["n_steps"] < 1:
        raise ConfigError(f"--steps must be >= 1; got {args.steps}")
    sampler = args.sampler or params["sampler"]
    extra = {"sampler": [params["sampler"], sampler]} if sampler != params["sampler"] else {}
    changes, affinity_code = checked_changes(run_dir, params, old_config, config, args,
                                             ignore=("runner.n_steps",), extra=extra)
    done_steps = int(snapshot.get("cum_steps", 0))
    if config["runner"]["n_steps"] <= done_steps:
        raise ConfigError(f"{run_dir} already trained {done_steps} steps (snapshot "
                          f"{os.path.basename(snapshot_path)}), and the run's total is "
                          f"{config['runner']['n_steps']}: pass a larger --steps to train on")

    affinity = affinity_for_run(affinity_code, runner_kind)
    # The run's ranks: spawned again by this command, or the launcher's (torchrun, srun).
    recorded_world = int(params.get("world_size") or 1)
    requested = args.world_size
    if requested is None and launch_env() is None:
        requested = recorded_world
    dist_env, world_size = distributed_setup(requested, affinity, runner_kind)
    if world_size != recorded_world:
        changes["world_size"] = [recorded_world, world_size]
        if not args.force:
            raise ConfigError(f"resuming {run_dir}, trained on {recorded_world} rank(s), on "
                              f"{world_size}; pass --force to accept it")
    distributed = world_size > 1 or isinstance(affinity, list)
    multi_rank = distributed and runner_kind == "sync"
    # The device is resolved again: a run trained on a GPU may continue on the CPU and the
    # other way round (snapshots load onto the CPU and are copied to the learner's device).
    cuda_idx = learner_device(args.device, affinity, code=affinity_code, multi_rank=multi_rank)
    affinity = run_affinity(config, sampler, runner_kind, affinity, args.device,
                            multi_rank=multi_rank, code=affinity_code)
    runner = build_experiment(params["algo"], params["env"], config, sampler=sampler,
                              seed=params["seed"], affinity=affinity, runner=runner_kind,
                              world_size=None if dist_env is not None else world_size,
                              backend=params.get("backend"), distributed=distributed)
    runner.progress_bar = not args.no_progress
    snapshot_replay = (params.get("snapshot_replay", False) if args.snapshot_replay is None
                       else bool(args.snapshot_replay))
    runner.snapshot_replay = snapshot_replay
    snapshot_every = snapshot_cadence(params.get("snapshot_every") if args.snapshot_every is None
                                      else args.snapshot_every, params.get("snapshot_mode", "last"))
    runner.snapshots.every_minutes = snapshot_every
    runner.resume_from(snapshot, os.path.dirname(snapshot_path))

    log_params = {k: v for k, v in params.items() if k not in ("name", "run_ID")}
    log_params.update(config=config, sampler=sampler, affinity=affinity_code,
                      snapshot_replay=snapshot_replay, snapshot_every=snapshot_every,
                      world_size=world_size,
                      launcher=dist_env.launcher if dist_env is not None else None,
                      device=device_label(cuda_idx))
    tracking = wandb_settings(args, params.get("wandb"))
    if tracking is not None:
        from rlfast.experiments.wandb_tracking import require_wandb
        require_wandb()
        log_params["wandb"] = tracking
    log_params["resumes"], run_args = resume_record(
        params, args, run_dir, snapshot, snapshot_path, done_steps,
        config["runner"]["n_steps"], changes, sampler, device=device_label(cuda_idx))
    return TrainRun(args=run_args, config=config, runner=runner, log_params=log_params,
                    exp_dir=run_dir, dist_env=dist_env,
                    device=device_summary(affinity, sampler, multi_rank=multi_rank),
                    resume=dict(itr=int(snapshot["itr"]), cum_steps=done_steps))


def resume_main(args: argparse.Namespace) -> int:
    """``rlfast resume``: rebuild the run, then continue training it (exit status as for
    ``rlfast train``)."""
    return run_command(configure_resume, args)


# ---- a rank group restarted by torchrun ----------------------------------------------------
def restarted_run(args: argparse.Namespace) -> tuple[str, str | None] | None:
    """What ``rlfast train ARGS`` continues as a rank group that torchrun's elastic agent
    restarted: ``(run directory, its newest snapshot, or None when the run saved none
    yet)``, or None when this is no restart of a run (outside torchrun, its first start, no
    ``--log-dir``, or a directory that holds no run of this torchrun invocation and command
    line; see the module docstring)."""
    restarts, run_id = elastic_restart()
    if restarts == 0 or run_id is None or getattr(args, "log_dir", None) is None:
        return None
    env = launch_env()
    if env is None or env.launcher != "torchrun":
        return None
    run_dir = log_dir_for_run(args)
    try:
        params = read_run_params(run_dir)
    except RunDirError:  # nothing written yet, or not a run
        return None
    if params.get("launcher_run_id") != run_id or not _same_run(args, params):
        return None
    found = snapshot_files(run_dir)
    return run_dir, (found[-1] if found else None)


def _same_run(args: argparse.Namespace, params: dict) -> bool:
    """Whether the run ``params.json`` describes is the one ``rlfast train ARGS`` starts: the
    same algorithm, environment, seed, runner, sampler (when given) and configuration."""
    recorded = (params.get("algo"), params.get("env"), params.get("seed"),
                params.get("runner") or "sync")
    if recorded != (args.algo, args.env, args.seed, getattr(args, "runner", "sync")):
        return False
    if args.sampler is not None and args.sampler != params.get("sampler"):
        return False
    config = json.loads(json.dumps(json_safe(assembly.train_config(args))))  # as recorded
    return not config_changes(params["config"], config)


def _resume_args(args: argparse.Namespace, run_dir: str, snapshot: str) -> argparse.Namespace:
    """``rlfast resume RUN_DIR --snapshot SNAPSHOT`` with its defaults, and the console,
    device, rank and W&B options of the ``train`` command line being restarted."""
    parser = argparse.ArgumentParser(prog="rlfast")
    add_resume_parser(parser.add_subparsers(dest="command"))
    resumed = parser.parse_args(["resume", run_dir, "--snapshot", snapshot])
    for name in ("device", "world_size", "no_progress", "verbose", "wandb",
                 "wandb_artifacts", "wandb_group"):
        if hasattr(args, name):
            setattr(resumed, name, getattr(args, name))
    return resumed


def configure_train_or_restart(args: argparse.Namespace) -> TrainRun:
    """``rlfast train``'s run: :func:`~rlfast.experiments.assembly.configure_train`, or, in
    a rank group that torchrun restarted (:func:`restarted_run`), :func:`configure_resume`
    of the run in ``--log-dir`` from its newest snapshot (a run with no snapshot yet starts
    over in its directory). Its ``notes`` name the restart."""
    restart = restarted_run(args)
    restarts, _ = elastic_restart()
    if restart is None:
        run = assembly.configure_train(args)
        if restarts and args.log_dir is None and run.dist_env is not None:
            run.notes.append(f"warning: torchrun restart {restarts}: without --log-dir every "
                             f"start writes a new directory, so this one cannot find the "
                             f"snapshots of the run before it and trains from the start")
        return run
    run_dir, snapshot = restart
    if snapshot is None:  # the run's own files, no snapshot to continue from
        args.overwrite = True
        run = assembly.configure_train(args)
        run.notes.append(f"note: torchrun restart {restarts}: {run_dir} holds no snapshot "
                         f"of this run yet; training starts over")
        return run
    run = configure_resume(_resume_args(args, run_dir, snapshot))
    run.log_params["resumes"][-1]["launcher_restart"] = restarts
    run.notes.append(f"note: torchrun restart {restarts}: resuming {run_dir} from "
                     f"{os.path.basename(snapshot)} (iteration {run.resume['itr']})")
    return run


def restartable_train_main(args: argparse.Namespace) -> int:
    """``rlfast train`` of an algorithm (exit status as
    :func:`~rlfast.experiments.assembly.train_main`), resuming the run instead when torchrun
    restarted its rank group (:func:`configure_train_or_restart`)."""
    return run_command(configure_train_or_restart, args)
