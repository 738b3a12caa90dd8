"""Run assembly: a resolved configuration in, a built run out, for every way of starting one.

``rlfast train``, ``rlfast resume``, ``rlfast tune``, the evolution strategies and the launch
scripts all come through here. :func:`resolve_config` is the one place that applies the
merge order (the base configuration, then the named options, then ``--config`` or a
variant, then ``--set``); :func:`configure_train` turns command-line arguments into a
:class:`TrainRun` without starting anything; :func:`run_train` trains one inside its logger;
:func:`run_command` is the exit-status policy the command line shares.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import os
import signal
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from rlfast.experiments import catalog
from rlfast.experiments.arguments import wandb_settings
from rlfast.experiments.config import (ConfigError, apply_config_values, apply_overrides,
                                       flatten, flatten_unique, load_config_file,
                                       unknown_key_error)
from rlfast.experiments.budget import learning_budget_warning, step_rounding_note
from rlfast.experiments.device import device_label, device_summary, learner_device
from rlfast.experiments.placement import default_sampler, run_affinity
from rlfast.experiments.presets import build_experiment, check_runner, get_preset, run_params
from rlfast.experiments.run_dir import check_log_dir, existing_run_message, log_dir_for_run
from rlfast.runners import TrainingInterrupted
from rlfast.runners.cadence import check_snapshot_minutes
from rlfast.runners.rank_group import elastic_restart
from rlfast.utils.distributed import DistEnv, launch_env
from rlfast.utils.interrupts import signal_name
from rlfast.utils.logging.context import ExistingRunError
from rlfast.utils.logging.serialization import NoSpaceError

__all__ = ["TrainRun", "resolve_config", "train_config", "named_options", "OPTION_FLAGS",
           "affinity_for_run", "check_env_id", "configure_train", "budget_notes",
           "distributed_setup", "run_train", "run_command", "config_error", "train_main",
           "snapshot_cadence"]


@dataclasses.dataclass
class TrainRun:
    """A fully configured run, built but not started: the runner, the resolved configuration
    and what the logger records about it."""

    args: argparse.Namespace
    config: dict
    runner: Any  # a runner of rlfast.runners, or the ES runner: anything with train()
    log_params: dict
    exp_dir: str
    dist_env: DistEnv | None = None  # the launcher's (torchrun / srun) identity of this rank
    resume: dict | None = None  # rlfast resume: dict(itr=, cum_steps=) of the snapshot
    device: str | None = None  # where it computes, for the first console line (device_summary)
    notes: list[str] = dataclasses.field(default_factory=list)  # lines printed after it

    @property
    def is_logging_rank(self) -> bool:
        """Rank 0 (or a single process): the one that writes logs and prints."""
        return self.dist_env is None or self.dist_env.rank == 0


# The command-line options that set a config key, as notes name them.
OPTION_FLAGS = {"runner.n_steps": "--steps", "sampler.batch_B": "--n-envs"}


def resolve_config(base: Mapping, named: Mapping[str, Any] | None = None,
                   config_file: str | None = None, config_values: Mapping | None = None,
                   overrides: Sequence[str] = (), source: str = "variant",
                   notes: list[str] | None = None) -> dict:
    """The configuration of one run, in the merge order every entry point shares.

    ``base`` is the preset with its per-environment overrides (:func:`get_preset`), or the
    configuration a run recorded (``rlfast resume``); then the named options (``named``:
    dotted key -> value, None skipped: ``--steps`` is ``runner.n_steps``, ``--n-envs``
    ``sampler.batch_B``); then the values of the ``--config`` file, or a launch script's
    variant (``config_values``, named by ``source`` in errors); then the ``--set``
    ``overrides``. Later ones win; every key must exist in ``base``. ``base`` is not changed.
    With a ``notes`` list, each named option whose value a later source replaced appends
    one line saying so (``note: --steps 5000 is overridden by runner.n_steps=20480 from
    --config FILE``): pass it only where ``named`` holds what the user gave.
    """
    config = copy.deepcopy(dict(base))
    valid = flatten(config)
    given = {}
    for key, value in (named or {}).items():
        if value is None:
            continue
        if key not in valid:
            raise unknown_key_error(key, valid)
        given[key] = value
        node = config
        *parents, leaf = key.split(".")
        for part in parents:
            node = node[part]
        node[leaf] = value
    stages = [("", config)]  # (where the values came from, the config after it)
    if config_file is not None:
        config = apply_config_values(config, load_config_file(config_file),
                                     source=f"--config {config_file}")
        stages.append((f"--config {config_file}", config))
    if config_values is not None:  # nested like a preset, by dotted key, or both
        config = apply_config_values(config, flatten_unique(config_values, source),
                                     source=source)
        stages.append((source, config))
    config = apply_overrides(config, list(overrides or []))
    stages.append(("--set", config))
    if notes is not None:
        notes.extend(_override_notes(given, stages))
    return config


def _override_notes(given: Mapping[str, Any], stages: Sequence[tuple[str, dict]]) -> list[str]:
    """One line per named option (``given``: dotted key -> value) whose final value differs,
    naming the last of ``stages`` that changed it."""
    lines = []
    for key, value in given.items():
        values = [flatten(config)[key] for _, config in stages]
        if values[-1] == value:
            continue
        origin = next(stages[i][0] for i in range(len(stages) - 1, 0, -1)
                      if values[i] != values[i - 1])
        flag = OPTION_FLAGS.get(key, key)
        lines.append(f"note: {flag} {value} is overridden by {key}={values[-1]} from {origin}")
    return lines


def named_options(args: argparse.Namespace) -> dict[str, Any]:
    """The configuration keys ``rlfast train``'s named options set (None: not given)."""
    return {"runner.n_steps": getattr(args, "steps", None),
            "sampler.batch_B": getattr(args, "n_envs", None)}


def train_config(args: argparse.Namespace, notes: list[str] | None = None) -> dict:
    """``rlfast train``'s configuration: :func:`resolve_config` over the preset for
    (``args.algo``, ``args.env``) with the named options, ``--config`` and ``--set``;
    ``notes`` collects a line for each named option a later source overrides."""
    return resolve_config(get_preset(args.algo, args.env), named_options(args),
                          config_file=getattr(args, "config", None),
                          overrides=getattr(args, "overrides", None) or [], notes=notes)


def affinity_for_run(code: str | None, runner: str = "sync") -> dict | list | None:
    """The affinity of one run from an affinity code, or None.

    A code without a run-slot token means slot 0. A synchronous run takes a one-process
    code, or a multi-GPU code (``gpr`` > 1: a list, one dict per rank, and a SyncRl run of
    that many ranks); async (``ass``) codes are refused, ``--runner async`` needs them.
    """
    if code is None:
        return None
    from rlfast.runners.async_rl import async_affinity
    from rlfast.utils.affinity import affinity_from_code, prepend_run_slot, validate_affinity
    if "slt" not in code:
        code = prepend_run_slot(0, code)
    affinity = affinity_from_code(code)
    is_async = not isinstance(affinity, list) and "optimizer" in affinity
    if runner == "async":
        if not is_async:
            raise ValueError(f"--affinity {code}: --runner async needs an async code (with "
                             f"the 1ass token, e.g. 0slt_2cpu_0gpu_2cpr_1res_1ass)")
        checked = async_affinity(affinity)  # one optimizer rank
        for part in list(checked.optimizer) + [checked.sampler]:
            validate_affinity(part)
        return dict(affinity)
    if is_async:
        raise ValueError(f"--affinity {code}: an asynchronous (ass) code needs --runner async")
    validate_affinity(affinity)  # before any directory or process: cores and GPUs exist
    if isinstance(affinity, list):
        return [dict(a) for a in affinity]  # one per rank
    return dict(affinity)


def check_env_id(env_id: str) -> None:
    """Refuse (``ConfigError`` / ``ValueError``) an environment id its registered family does
    not know: an unregistered gymnasium id names close matches; ``module:Env-v0`` ids import
    their module first, as ``gymnasium.make`` does."""
    catalog.check_env_id(env_id)


def configure_train(args: argparse.Namespace) -> TrainRun:
    """Resolve and build everything ``rlfast train`` needs, starting nothing.

    Environment id, preset lookup, overrides, affinity parsing, the device, the log
    directory (writable, and holding no earlier run unless ``--overwrite``) and experiment
    construction are all checked here, so that a mistake in the command line is reported
    (as ``ConfigError`` or ``ValueError``) before any process starts or any file is
    written. The device (``--device``, default ``auto``) follows
    :func:`rlfast.experiments.device.learner_device`; without ``--sampler`` the sampler is
    :func:`~rlfast.experiments.placement.default_sampler`'s for that device. What the run
    should say at start-up (a ``--steps`` or ``--n-envs`` that ``--config`` or ``--set``
    overrides, a budget rounded up to whole iterations, one that ends before learning
    starts: :func:`budget_notes`) is in ``TrainRun.notes``, printed once by
    :func:`run_train` after its first line.
    """
    if args.algo in catalog.algorithm_names():  # an unknown algorithm: reported by get_preset
        check_env_id(args.env)
    runner_kind = getattr(args, "runner", "sync")
    notes: list[str] = []
    config = train_config(args, notes)
    check_runner(args.algo, runner_kind)
    snapshot_every = snapshot_cadence(getattr(args, "snapshot_every", None), args.snapshot_mode)
    affinity = affinity_for_run(args.affinity, runner_kind)
    dist_env, world_size = distributed_setup(getattr(args, "world_size", None), affinity,
                                             runner_kind)
    distributed = world_size > 1 or isinstance(affinity, list)
    multi_rank = distributed and runner_kind == "sync"
    device = getattr(args, "device", "auto")
    cuda_idx = learner_device(device, affinity, code=args.affinity, multi_rank=multi_rank)
    if args.sampler is None:
        args.sampler = default_sampler(args.algo, args.env, cuda_idx=cuda_idx,
                                       n_envs=config["sampler"]["batch_B"],
                                       n_cpus=sampler_cpus(affinity), runner=runner_kind)
    affinity = run_affinity(config, args.sampler, runner_kind, affinity, device,
                            multi_rank=multi_rank, code=args.affinity)
    exp_dir = log_dir_for_run(args)
    if dist_env is None or dist_env.rank == 0:  # the other ranks write nothing
        check_log_dir(exp_dir, log_dir_option(args), overwrite=getattr(args, "overwrite", False))
    backend = getattr(args, "backend", None)
    runner = build_experiment(args.algo, args.env, config, sampler=args.sampler, seed=args.seed,
                              affinity=affinity, runner=runner_kind,
                              world_size=None if dist_env is not None else world_size,
                              backend=backend, distributed=distributed)
    runner.progress_bar = not args.no_progress
    runner.snapshot_replay = bool(getattr(args, "snapshot_replay", False))
    runner.snapshots.every_minutes = snapshot_every
    log_params = run_params(args.algo, args.env, config, args.sampler, args.seed,
                            affinity=args.affinity, runner=runner_kind, world_size=world_size,
                            backend=backend,
                            launcher=dist_env.launcher if dist_env is not None else None,
                            device=device_label(cuda_idx))
    log_params.update(snapshot_mode=args.snapshot_mode,
                      snapshot_replay=bool(getattr(args, "snapshot_replay", False)),
                      snapshot_every=snapshot_every,
                      tensorboard=bool(getattr(args, "tensorboard", False)))
    run_id = elastic_restart()[1] if dist_env is not None else None
    if run_id is not None and dist_env.launcher == "torchrun":  # a restart finds its run by it
        log_params["launcher_run_id"] = run_id
    tracking = wandb_settings(args)
    if tracking is not None:
        from rlfast.experiments.wandb_tracking import require_wandb
        require_wandb()
        log_params["wandb"] = tracking
    notes += budget_notes(args.algo, runner, config, world_size, getattr(args, "steps", None))
    return TrainRun(args=args, config=config, runner=runner, log_params=log_params,
                    exp_dir=exp_dir, dist_env=dist_env,
                    device=device_summary(affinity, args.sampler, multi_rank=multi_rank),
                    notes=notes)


def snapshot_cadence(minutes: float | None, snapshot_mode: str) -> float | None:
    """``--snapshot-every``'s minutes (None: not given), checked: a positive finite number,
    and refused with ``--snapshot-mode none``, which keeps no snapshot."""
    if minutes is None:
        return None
    minutes = check_snapshot_minutes(minutes, "--snapshot-every")
    if snapshot_mode == "none":
        raise ConfigError(f"--snapshot-every {minutes:g} needs snapshots, and the snapshot "
                          f"mode is none; use --snapshot-mode last, all or gap")
    return minutes


def budget_notes(algo: str, runner: Any, config: Mapping, world_size: int = 1,
                 steps: int | None = None) -> list[str]:
    """The start-up lines about a built run's step budget: that it is rounded up to whole
    iterations (:func:`~rlfast.experiments.budget.step_rounding_note`), and a warning when
    it ends before the algorithm's first update
    (:func:`~rlfast.experiments.budget.learning_budget_warning`). ``steps``: the
    ``--steps`` given, which names the budget when the configuration kept it.

    Such a run is warned about, not refused: a run may be trained in sittings (``rlfast
    train --steps 300``, then ``rlfast resume --steps 600``), and its first sitting can end
    before learning starts on purpose."""
    n_steps = config["runner"]["n_steps"]
    label = f"--steps {steps}" if steps is not None and steps == n_steps else None
    lines = []
    rounding = step_rounding_note(runner, world_size, label)
    if rounding is not None:
        lines.append(f"note: {rounding}")
    unlearned = learning_budget_warning(algo, runner, world_size, label)
    if unlearned is not None:
        lines.append(f"warning: {unlearned}")
    return lines


def log_dir_option(args: argparse.Namespace) -> str:
    """How messages name the run's directory: ``--log-dir`` when given."""
    return "--log-dir" if getattr(args, "log_dir", None) is not None else "log directory"


def sampler_cpus(affinity: dict | list | None) -> int | None:
    """The cores an affinity code gives the sampler's workers (None without a code: the
    available ones)."""
    if affinity is None:
        return None
    if isinstance(affinity, list):
        affinity = affinity[0]
    part = affinity.get("sampler", affinity)
    cpus = {c for worker in part.get("workers_cpus") or [] for c in worker}
    return len(cpus) or None


def distributed_setup(requested: int | None, affinity: dict | list | None,
                      runner_kind: str) -> tuple[DistEnv | None, int]:
    """(the launcher's identity of this process or None, the run's world size).

    Under torchrun or Slurm the launcher's ``WORLD_SIZE`` rules, and a ``--world-size``
    (``requested``) that disagrees is refused; without one, ``requested`` (default: the
    affinity list's length, else 1) ranks are spawned by this command.
    """
    if requested is not None and requested < 1:
        raise ValueError(f"--world-size must be >= 1; got {requested}")
    dist_env = launch_env()
    if dist_env is not None and dist_env.world_size == 1 and requested in (None, 1):
        dist_env = None  # a launcher's single process: a plain run
    if dist_env is not None:
        if requested is not None and requested != dist_env.world_size:
            raise ValueError(f"--world-size {requested} disagrees with the launcher's "
                             f"WORLD_SIZE {dist_env.world_size} ({dist_env.launcher}); leave "
                             f"--world-size out under a launcher")
        world_size = dist_env.world_size
    elif isinstance(affinity, list):
        if requested is not None and requested != len(affinity):
            raise ValueError(f"--world-size {requested} disagrees with --affinity, which "
                             f"describes {len(affinity)} ranks")
        world_size = len(affinity)
    else:
        world_size = requested or 1
    if world_size > 1 and runner_kind != "sync":
        raise ValueError(f"a run of {world_size} ranks needs --runner sync: the asynchronous "
                         f"runner's optimizer ranks come from its affinity code (ass with "
                         f"gpr > 1)")
    return dist_env, world_size


def run_train(run: TrainRun) -> dict:
    """Train a configured run inside its logger context and print where the logs went, the
    run's start-up notes (``run.notes``, after the first line and into ``debug.log``) and
    the final (and best) evaluation return. Returns the runner's result dict; errors
    raised while training propagate unchanged."""
    from rlfast.utils.logging import logger, logger_context

    args = run.args
    if not run.is_logging_rank:  # rank > 0 under a launcher: rank 0 logs and prints
        return run.runner.train()
    if "plugins" not in run.log_params:  # the plug-ins eval, watch and resume import again
        run.log_params["plugins"] = catalog.run_plugins(
            run.log_params["algo"], run.log_params["env"], run.log_params.get("sampler"))
    context = logger_context(run.exp_dir, 0, f"{args.algo}_{args.env}", run.log_params,
                             snapshot_mode=args.snapshot_mode, override_prefix=True,
                             overwrite=getattr(args, "overwrite", False), resume=run.resume,
                             use_summary_writer=bool(getattr(args, "tensorboard", False)),
                             console="tables" if getattr(args, "verbose", False) else "lines")
    with context as exp_dir, _tracking(run, exp_dir):
        verb = "resume" if run.resume is not None else "train"
        where = f" on {run.device}" if run.device else ""
        logger.log(f"rlfast {verb} {args.algo} {args.env}{where}: logging to {exp_dir}",
                   console=True)
        for note in run.notes:  # overridden options, rounded budget, a run that cannot learn
            logger.log(note, console=True)
        result = run.runner.train()
    print(f"Logs: {exp_dir}")
    if "eval_returns" not in result:  # sampler.eval_n_envs=0: the training window's returns
        print(f"Final training return (last {run.runner.log_traj_window} episodes at most): "
              f"{result['final_return']:.2f} after {result['cum_steps']} steps (no evaluation: "
              f"sampler.eval_n_envs=0)")
        return result
    scored = [(steps, ret) for steps, ret in result["eval_returns"] if ret == ret]  # not NaN
    if scored:
        best_steps, best = max(scored, key=lambda sr: (sr[1], -sr[0]))
        best_text = f"best {best:.2f} at {best_steps} steps"
    else:
        best_text = "no evaluation episode completed; raise sampler.eval_max_steps"
    print(f"Final evaluation return: {result['final_return']:.2f} after {result['cum_steps']} "
          f"steps ({best_text})")
    return result


def _tracking(run: TrainRun, exp_dir: str) -> Any:
    """The run's W&B tracking context (``--wandb``), or a context that does nothing."""
    settings = (run.log_params or {}).get("wandb")
    if not settings:
        return contextlib.nullcontext()
    from rlfast.experiments.wandb_tracking import WandbTracking
    return WandbTracking(settings["project"], exp_dir, run.log_params,
                         name=os.path.basename(os.path.normpath(exp_dir)),
                         group=settings.get("group"), artifacts=settings.get("artifacts", False))


def run_command(configure: Callable[[argparse.Namespace], TrainRun],
                args: argparse.Namespace) -> int:
    """Configure a run with ``configure(args)`` and train it; returns the exit status.

    Only configuration errors are short: a ``ConfigError`` or ``ValueError`` while the run is
    being configured prints ``rlfast: error: ...`` and returns 2. Once training has started,
    an exception propagates with its full traceback (a bug there must not be mistaken for a
    typo in the command line). An interrupted run (the runner has logged it, saved a final
    snapshot when one was due and stopped its workers) prints ``rlfast: interrupted
    (SIGTERM)`` or ``(SIGINT)`` and returns 128 + the signal number. A full disk while a
    snapshot is written (:class:`~rlfast.utils.logging.NoSpaceError`: the run has stopped
    cleanly, the previous snapshot intact) is one line too, and returns 1.
    """
    try:
        try:
            run = configure(args)
        except (ConfigError, ValueError) as e:
            return config_error(e)
        try:
            run_train(run)
        except ExistingRunError:  # a run appeared in the directory since the check
            return config_error(existing_run_message(run.exp_dir, log_dir_option(args)))
        except NoSpaceError as e:
            print(f"rlfast: error: {e}", file=sys.stderr)
            return 1
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM as TrainingInterrupted
        signum = e.signum if isinstance(e, TrainingInterrupted) else signal.SIGINT
        print(f"rlfast: interrupted ({signal_name(signum)})", file=sys.stderr)
        return 128 + int(signum)
    return 0


def config_error(error: Exception | str) -> int:
    """Print ``rlfast: error: ...`` and return the exit status of a configuration error."""
    print(f"rlfast: error: {error}", file=sys.stderr)
    return 2


def train_main(args: argparse.Namespace) -> int:
    """``rlfast train`` of an algorithm: configure the run, then train it."""
    return run_command(configure_train, args)
