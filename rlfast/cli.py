"""The ``rlfast`` command line: ``rlfast train ALGO ENV [options]``."""
from __future__ import annotations

import argparse
import dataclasses
import difflib
import importlib
import os
import signal
import sys
import tempfile

from rlfast.experiments.config import (ConfigError, apply_config_values, apply_overrides,
                                       load_config_file)
from rlfast.experiments.device import (DEVICE_HELP, device_label, device_summary,
                                       learner_device)
from rlfast.experiments.presets import (ATARI_PREFIX, PRESETS, RUNNERS, SAMPLERS,
                                       build_experiment, check_runner, default_sampler,
                                       get_preset, run_affinity, run_params)
from rlfast.runners import MinibatchRlBase, TrainingInterrupted
from rlfast.utils.interrupts import signal_name
from rlfast.utils.distributed import BACKENDS, DistEnv, launch_env
from rlfast.utils.logging.context import ExistingRunError, experiment_dir, find_run_files

# ``rlfast train`` algorithms that are evolution strategies, trained by
# rlfast.experiments.es_train rather than by a preset's runner.
ES_ALGOS = ("cem", "cmaes", "openai_es")


def _parser() -> argparse.ArgumentParser:
    """The argument parser of ``rlfast`` and its ``train`` subcommand."""
    parser = argparse.ArgumentParser(prog="rlfast", description="High-throughput deep RL.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent from a preset",
                           description="Train ALGO on the gymnasium environment ENV.")
    train.add_argument("algo", help=f"preset name: {', '.join(sorted(PRESETS))}; or an "
                                    f"evolution strategy: {', '.join(ES_ALGOS)}")
    train.add_argument("env", help="gymnasium id (CartPole-v1, Pendulum-v1, ...) or atari:<game> "
                                   "(atari:pong) for rlfast's AtariEnv")
    train.add_argument("--steps", type=int, default=None, help="environment steps to train for")
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    train.add_argument("--n-envs", type=int, default=None, help="parallel environments (batch_B)")
    train.add_argument("--sampler", choices=SAMPLERS, default=None,
                       help="serial: one process (default for ddpg/td3/sac); cpu: workers run "
                            "the agent (default otherwise, except atari:<game> with the "
                            "learner on a GPU: gpu or cpu, whichever measured faster for the "
                            "number of envs per core); gpu / alternating: workers step envs, "
                            "the master batches the agent on the learner's device")
    train.add_argument("--device", default="auto", metavar="auto|cpu|cuda|cuda:N",
                       help=DEVICE_HELP + " (the evolution strategies, which have no "
                                          "learner, take auto or cpu)")
    train.add_argument("--runner", choices=RUNNERS, default="sync",
                       help="sync: sampling and training take turns (default); async: the "
                            "sampler runs in its own process at full speed while the optimizer "
                            "trains from the shared replay buffer (replay-based algorithms)")
    train.add_argument("--world-size", type=int, default=None, metavar="N",
                       help="train with N ranks on this machine (SyncRl: each rank its own "
                            "sampler and a DistributedDataParallel copy of the agent; spawned "
                            "by this command). Under torchrun or Slurm srun the ranks come "
                            "from the launcher's environment instead")
    train.add_argument("--backend", choices=BACKENDS, default=None,
                       help="torch.distributed backend of a multi-rank run (default: nccl "
                            "when the agent is on a GPU, else gloo)")
    train.add_argument("--log-dir", default=None,
                       help="write progress.csv, debug.log, params.json here "
                            "(default: data/local/<date>/<time>/<algo>_<env>/run_0); "
                            "a directory that already holds a run is refused")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run already in --log-dir (its logs and snapshots "
                            "are deleted; other files stay)")
    train.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY=VALUE", help="override a preset value, e.g. algo.learning_rate=3e-4")
    train.add_argument("--config", default=None, metavar="FILE",
                       help="JSON file of preset overrides, nested like the preset "
                            '({"algo": {"learning_rate": 0.001}}) or by dotted key '
                            '({"algo.learning_rate": 0.001}); applied after --steps and '
                            "--n-envs, before --set (rlfast tune writes best_config.json in "
                            "this form)")
    train.add_argument("--snapshot-mode", default="last", choices=("none", "last", "all", "gap"),
                       help="which training snapshots to keep (default: last)")
    train.add_argument("--affinity", default=None, metavar="CODE",
                       help="hardware affinity code (rlfast.utils.launching), e.g. "
                            "0slt_2cpu_0gpu_0hto; without a slot token, slot 0 is used")
    train.add_argument("--snapshot-replay", action="store_true",
                       help="also save the replay buffer beside each snapshot (.npz), so that "
                            "rlfast resume continues replay-based runs exactly")
    train.add_argument("--tensorboard", action="store_true",
                       help="also write TensorBoard event files into the log directory "
                            "(needs pip install rlfast[tensorboard])")
    add_console_arguments(train)
    from rlfast.experiments.playback import add_eval_parser, add_watch_parser
    from rlfast.experiments.plot import add_plot_parser
    from rlfast.experiments.resume import add_resume_parser
    add_resume_parser(sub)
    add_eval_parser(sub)
    add_watch_parser(sub)
    add_plot_parser(sub)
    from rlfast.experiments.tune import add_tune_parser
    add_tune_parser(sub)
    return parser


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` and ``--verbose``, shared by train and resume."""
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--verbose", action="store_true",
                        help="print every log line and the full diagnostics table of each "
                             "log interval (by default one summary line per interval; the "
                             "tables always go to debug.log and progress.csv)")


@dataclasses.dataclass
class TrainRun:
    """A fully configured ``rlfast train`` run, built but not started: the runner, the
    resolved configuration and what the logger records about it."""

    args: argparse.Namespace
    config: dict
    runner: MinibatchRlBase
    log_params: dict
    exp_dir: str
    dist_env: DistEnv | None = None  # the launcher's (torchrun / srun) identity of this rank
    resume: dict | None = None  # rlfast resume: dict(itr=, cum_steps=) of the snapshot
    device: str | None = None  # where it computes, for the first console line (device_summary)

    @property
    def is_logging_rank(self) -> bool:
        """Rank 0 (or a single process): the one that writes logs and prints."""
        return self.dist_env is None or self.dist_env.rank == 0


def resolve_config(args: argparse.Namespace) -> dict:
    """The configuration of one run: the preset for (algo, env), then the named options
    (``--steps``, ``--n-envs``), then the ``--config`` file, then the ``--set`` overrides,
    later ones winning."""
    config = get_preset(args.algo, args.env)
    if args.steps is not None:
        config["runner"]["n_steps"] = args.steps
    if args.n_envs is not None:
        config["sampler"]["batch_B"] = args.n_envs
    config_file = getattr(args, "config", None)
    if config_file is not None:
        config = apply_config_values(config, load_config_file(config_file),
                                     source=f"--config {config_file}")
    return apply_overrides(config, args.overrides)


def affinity_for_run(code: str | None, runner: str = "sync") -> dict | list | None:
    """The affinity of one run from an affinity code, or None.

    A code without a run-slot token means slot 0. A synchronous run takes a one-process
    code, or a multi-GPU code (``gpr`` > 1: a list, one dict per rank, and a SyncRl run of
    that many ranks); async (``ass``) codes are refused, ``--runner async`` needs them.
    """
    if code is None:
        return None
    from rlfast.utils.launching import affinity_from_code, prepend_run_slot, validate_affinity
    if "slt" not in code:
        code = prepend_run_slot(0, code)
    affinity = affinity_from_code(code)
    is_async = not isinstance(affinity, list) and "optimizer" in affinity
    if runner == "async":
        if not is_async:
            raise ValueError(f"--affinity {code}: --runner async needs an async code (with "
                             f"the 1ass token, e.g. 0slt_2cpu_0gpu_2cpr_1res_1ass)")
        from rlfast.runners.async_rl import async_affinity
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
    """Refuse (``ConfigError``) a gymnasium id that is not registered, naming close matches.

    ``atari:<game>`` ids are rlfast's own and checked where the game is resolved;
    ``module:Env-v0`` ids import their module first, as ``gymnasium.make`` does.
    """
    if env_id.startswith(ATARI_PREFIX):
        return
    import gymnasium
    from gymnasium.envs.registration import find_highest_version, parse_env_id

    module, _, name = env_id.rpartition(":")
    reason = ""
    if module:
        try:
            importlib.import_module(module)  # registers its environments
        except ImportError as e:
            reason = f" (importing {module!r} failed: {e})"
    if not reason:
        if name in gymnasium.registry:
            return
        try:
            namespace, base, version = parse_env_id(name)
        except gymnasium.error.Error:
            pass  # not even shaped like an id
        else:
            if version is None and find_highest_version(namespace, base) is not None:
                return  # gymnasium.make takes the latest version
    by_lower = {registered.lower(): registered for registered in gymnasium.registry}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), by_lower, n=3,
                                                            cutoff=0.6)]
    if close:
        hint = f"did you mean {' or '.join(close)}?"
    else:
        hint = ("gymnasium.pprint_registry() lists the registered ids; "
                f"use {ATARI_PREFIX}<game> for Atari")
    raise ConfigError(f"unknown gymnasium environment {env_id!r}{reason}; {hint}")


def log_dir_for_run(args: argparse.Namespace) -> str:
    """The absolute experiment directory of the run: ``--log-dir`` as given, else a
    date-stamped ``<data dir>/local/<date>/<time>/<algo>_<env>/run_0``."""
    if args.log_dir is not None:
        return experiment_dir(args.log_dir, 0, override_prefix=True)
    return experiment_dir(f"{args.algo}_{args.env}", 0)


def check_log_dir(exp_dir: str, option: str = "--log-dir", overwrite: bool = False) -> None:
    """Refuse (``ConfigError``) a log directory that cannot be written or, unless
    ``overwrite``, that already holds a run.

    Writability is tried, not guessed from permission bits (which root ignores and which
    say nothing of /proc or read-only mounts): the missing directories are created, a
    temporary file is written and removed, and whatever was created is removed again, so
    the check leaves no trace. ``option`` names the directory in messages.
    """
    if os.path.exists(exp_dir) and not os.path.isdir(exp_dir):
        raise ConfigError(f"{option} {exp_dir} is not a directory")
    created = []
    probe = exp_dir
    while not os.path.lexists(probe):
        created.append(probe)
        parent = os.path.dirname(probe)
        if parent == probe:
            break
        probe = parent
    try:
        os.makedirs(exp_dir, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=exp_dir, prefix=".rlfast-write-check-")
        os.close(fd)
        os.unlink(tmp)
    except OSError as e:
        where = f" ({e.filename})" if e.filename and e.filename != exp_dir else ""
        raise ConfigError(f"cannot write to {option} {exp_dir}: "
                          f"{e.strerror or e}{where}") from None
    finally:
        for path in created:  # deepest first
            try:
                os.rmdir(path)
            except OSError:
                pass
    if find_run_files(exp_dir) and not overwrite:
        raise ConfigError(_existing_run_message(exp_dir, option))


def _existing_run_message(exp_dir: str, option: str) -> str:
    return (f"{option} {exp_dir} already holds a run ({', '.join(find_run_files(exp_dir))}); "
            f"pass --overwrite to replace it, or choose another --log-dir")


def _log_dir_option(args: argparse.Namespace) -> str:
    return "--log-dir" if args.log_dir is not None else "log directory"


def configure_train(args: argparse.Namespace) -> TrainRun:
    """Resolve and build everything ``rlfast train`` needs, starting nothing.

    Environment id, preset lookup, overrides, affinity parsing, the device, the log
    directory (writable, and holding no earlier run unless ``--overwrite``) and experiment
    construction are all checked here, so that a mistake in the command line is reported
    (as ``ConfigError`` or ``ValueError``) before any process starts or any file is
    written.

    The device (``--device``, default ``auto``) follows
    :func:`rlfast.experiments.device.learner_device`: an ``--affinity`` code decides where
    given, else ``auto`` is GPU 0 when CUDA is available. Without ``--sampler`` the sampler
    is :func:`~rlfast.experiments.presets.default_sampler`'s for that device.
    """
    if args.algo in PRESETS:  # an unknown algorithm is reported by get_preset
        check_env_id(args.env)
    runner_kind = getattr(args, "runner", "sync")
    config = resolve_config(args)  # an unknown algorithm is reported first, here
    check_runner(args.algo, runner_kind)
    affinity = affinity_for_run(args.affinity, runner_kind)
    dist_env, world_size = _distributed_setup(args, affinity, runner_kind)
    distributed = world_size > 1 or isinstance(affinity, list)
    multi_rank = distributed and runner_kind == "sync"
    device = getattr(args, "device", "auto")
    cuda_idx = learner_device(device, affinity, code=args.affinity, multi_rank=multi_rank)
    if args.sampler is None:
        args.sampler = default_sampler(args.algo, args.env, cuda_idx=cuda_idx,
                                       n_envs=config["sampler"]["batch_B"],
                                       n_cpus=_sampler_cpus(affinity), runner=runner_kind)
    affinity = run_affinity(config, args.sampler, runner_kind, affinity, device,
                            multi_rank=multi_rank, code=args.affinity)
    exp_dir = log_dir_for_run(args)
    if dist_env is None or dist_env.rank == 0:  # the other ranks write nothing
        check_log_dir(exp_dir, _log_dir_option(args), overwrite=getattr(args, "overwrite", False))
    runner = build_experiment(args.algo, args.env, config, sampler=args.sampler, seed=args.seed,
                              affinity=affinity, runner=runner_kind,
                              world_size=None if dist_env is not None else world_size,
                              backend=getattr(args, "backend", None), distributed=distributed)
    runner.progress_bar = not args.no_progress
    runner.snapshot_replay = bool(getattr(args, "snapshot_replay", False))
    log_params = run_params(args.algo, args.env, config, args.sampler, args.seed,
                            affinity=args.affinity, runner=runner_kind, world_size=world_size,
                            backend=getattr(args, "backend", None),
                            launcher=dist_env.launcher if dist_env is not None else None,
                            device=device_label(cuda_idx))
    log_params.update(snapshot_mode=args.snapshot_mode,
                      snapshot_replay=bool(getattr(args, "snapshot_replay", False)),
                      tensorboard=bool(getattr(args, "tensorboard", False)))
    return TrainRun(args=args, config=config, runner=runner, log_params=log_params,
                    exp_dir=exp_dir, dist_env=dist_env,
                    device=device_summary(affinity, args.sampler, multi_rank=multi_rank))


def _sampler_cpus(affinity: dict | list | None) -> int | None:
    """The cores an affinity code gives the sampler's workers (None without a code: the
    available ones)."""
    if affinity is None:
        return None
    if isinstance(affinity, list):
        affinity = affinity[0]
    part = affinity.get("sampler", affinity)
    cpus = {c for worker in part.get("workers_cpus") or [] for c in worker}
    return len(cpus) or None


def _distributed_setup(args: argparse.Namespace, affinity: dict | list | None,
                       runner_kind: str) -> tuple[DistEnv | None, int]:
    """(the launcher's identity of this process or None, the run's world size).

    Under torchrun or Slurm the launcher's ``WORLD_SIZE`` rules, and a ``--world-size``
    that disagrees is refused; without one, ``--world-size`` (default: the affinity list's
    length, else 1) ranks are spawned by this command.
    """
    requested = getattr(args, "world_size", None)
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
    """Train a configured run inside its logger context and print where the logs went and
    the final (and best) evaluation return. Returns the runner's result dict; errors
    raised while training propagate unchanged."""
    from rlfast.utils.logging import logger, logger_context

    args = run.args
    if not run.is_logging_rank:  # rank > 0 under a launcher: rank 0 logs and prints
        return run.runner.train()
    context = logger_context(run.exp_dir, 0, f"{args.algo}_{args.env}", run.log_params,
                             snapshot_mode=args.snapshot_mode, override_prefix=True,
                             overwrite=getattr(args, "overwrite", False), resume=run.resume,
                             use_summary_writer=bool(getattr(args, "tensorboard", False)),
                             console="tables" if getattr(args, "verbose", False) else "lines")
    with context as exp_dir:
        verb = "resume" if run.resume is not None else "train"
        where = f" on {run.device}" if run.device else ""
        logger.log(f"rlfast {verb} {args.algo} {args.env}{where}: logging to {exp_dir}",
                   console=True)
        result = run.runner.train()
    scored = [(steps, ret) for steps, ret in result["eval_returns"] if ret == ret]  # not NaN
    print(f"Logs: {exp_dir}")
    if scored:
        best_steps, best = max(scored, key=lambda sr: (sr[1], -sr[0]))
        best_text = f"best {best:.2f} at {best_steps} steps"
    else:
        best_text = "no evaluation episode completed; raise sampler.eval_max_steps"
    print(f"Final evaluation return: {result['final_return']:.2f} after {result['cum_steps']} "
          f"steps ({best_text})")
    return result


def train(args: argparse.Namespace) -> dict:
    """``rlfast train``: configure the run, then train it (``configure_train`` then
    ``run_train``)."""
    return run_train(configure_train(args))


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlfast`` console script; returns the exit status.

    Only configuration errors are short: a ``ConfigError`` or ``ValueError`` while the run
    is being configured (including an unknown environment id and a log directory that
    cannot be written or already holds a run) prints ``rlfast: error: ...`` and returns 2.
    Once training has started, an exception propagates with its full traceback (a bug
    there must not be mistaken for a typo in the command line). An interrupted run
    (the runner has logged it, saved a final snapshot when one was due and stopped its
    workers) prints ``rlfast: interrupted (SIGTERM)`` or ``(SIGINT)`` and returns
    128 + the signal number: 143 for SIGTERM, 130 for Ctrl-C.
    """
    args = _parser().parse_args(argv)
    if args.command == "train" and args.algo in ES_ALGOS:
        from rlfast.experiments.es_train import es_train_main  # evolution strategies
        return es_train_main(args)
    if args.command in _TOOLS:
        module, function = _TOOLS[args.command]
        return getattr(importlib.import_module(module), function)(args)
    try:
        try:
            if args.command == "resume":
                from rlfast.experiments.resume import configure_resume
                run = configure_resume(args)
            else:
                run = configure_train(args)
        except (ConfigError, ValueError) as e:
            return _config_error(e)
        try:
            run_train(run)
        except ExistingRunError:  # a run appeared in the directory since the check
            return _config_error(_existing_run_message(run.exp_dir, _log_dir_option(args)))
    except KeyboardInterrupt as e:  # Ctrl-C, or SIGTERM as TrainingInterrupted
        signum = e.signum if isinstance(e, TrainingInterrupted) else signal.SIGINT
        print(f"rlfast: interrupted ({signal_name(signum)})", file=sys.stderr)
        return 128 + int(signum)
    return 0


# Subcommands that train nothing in this process: (module, function taking the parsed
# args, returning status). ``tune`` runs its trials as ``rlfast train`` subprocesses.
_TOOLS = dict(eval=("rlfast.experiments.playback", "eval_main"),
              watch=("rlfast.experiments.playback", "watch_main"),
              plot=("rlfast.experiments.plot", "plot_main"),
              tune=("rlfast.experiments.tune", "tune_main"))


def _config_error(error: Exception) -> int:
    print(f"rlfast: error: {error}", file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
