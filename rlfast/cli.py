"""The ``rlfast`` command line: ``rlfast train ALGO ENV [options]``."""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys

from rlfast.experiments.config import ConfigError, apply_overrides
from rlfast.experiments.presets import (PRESETS, SAMPLERS, build_experiment, default_sampler,
                                       get_preset)
from rlfast.runners import MinibatchRlEval


def _parser() -> argparse.ArgumentParser:
    """The argument parser of ``rlfast`` and its ``train`` subcommand."""
    parser = argparse.ArgumentParser(prog="rlfast", description="High-throughput deep RL.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent from a preset",
                           description="Train ALGO on the gymnasium environment ENV.")
    train.add_argument("algo", help=f"preset name: {', '.join(sorted(PRESETS))}")
    train.add_argument("env", help="gymnasium id (CartPole-v1, Pendulum-v1, ...) or atari:<game> "
                                   "(atari:pong) for rlfast's AtariEnv")
    train.add_argument("--steps", type=int, default=None, help="environment steps to train for")
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    train.add_argument("--n-envs", type=int, default=None, help="parallel environments (batch_B)")
    train.add_argument("--sampler", choices=SAMPLERS, default=None,
                       help="serial: one process (default for ddpg/td3/sac); cpu: workers run "
                            "the agent (default otherwise); "
                            "gpu / alternating: workers step envs, the master batches the agent "
                            "(on GPU 0 when CUDA is available)")
    train.add_argument("--log-dir", default=None,
                       help="write progress.csv, debug.log, params.json here "
                            "(default: data/local/<date>/<time>/<algo>_<env>/run_0)")
    train.add_argument("--set", dest="overrides", action="append", default=[],
                       metavar="KEY=VALUE", help="override a preset value, e.g. algo.learning_rate=3e-4")
    train.add_argument("--snapshot-mode", default="last", choices=("none", "last", "all", "gap"),
                       help="which training snapshots to keep (default: last)")
    train.add_argument("--affinity", default=None, metavar="CODE",
                       help="hardware affinity code (rlfast.utils.launching), e.g. "
                            "0slt_2cpu_0gpu_0hto; without a slot token, slot 0 is used")
    train.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    return parser


@dataclasses.dataclass
class TrainRun:
    """A fully configured ``rlfast train`` run, built but not started: the runner, the
    resolved configuration and what the logger records about it."""

    args: argparse.Namespace
    config: dict
    runner: MinibatchRlEval
    log_params: dict


def resolve_config(args: argparse.Namespace) -> dict:
    """The configuration of one run: the preset for (algo, env), then the named options
    (``--steps``, ``--n-envs``), then the ``--set`` overrides, later ones winning."""
    config = get_preset(args.algo, args.env)
    if args.steps is not None:
        config["runner"]["n_steps"] = args.steps
    if args.n_envs is not None:
        config["sampler"]["batch_B"] = args.n_envs
    return apply_overrides(config, args.overrides)


def affinity_for_run(code: str | None) -> dict | None:
    """The affinity dict of one single-process run from an affinity code, or None.

    A code without a run-slot token means slot 0. Codes that describe several processes
    (multi-GPU or asynchronous runs) are refused: ``rlfast train`` runs one.
    """
    if code is None:
        return None
    from rlfast.utils.launching import affinity_from_code, prepend_run_slot
    if "slt" not in code:
        code = prepend_run_slot(0, code)
    affinity = affinity_from_code(code)
    if isinstance(affinity, list) or "optimizer" in affinity:
        raise ValueError(f"--affinity {code}: multi-GPU and asynchronous codes describe "
                         f"several processes; rlfast train runs one (use a code without "
                         f"gpr > 1 or ass)")
    return dict(affinity)


def configure_train(args: argparse.Namespace) -> TrainRun:
    """Resolve and build everything ``rlfast train`` needs, starting nothing.

    Preset lookup, overrides, affinity parsing and experiment construction all happen
    here, so that a mistake in the command line is reported (as ``ConfigError`` or
    ``ValueError``) before any process starts or any directory is written.
    """
    if args.sampler is None:
        args.sampler = default_sampler(args.algo)
    config = resolve_config(args)
    affinity = affinity_for_run(args.affinity)
    runner = build_experiment(args.algo, args.env, config, sampler=args.sampler, seed=args.seed,
                              affinity=affinity)
    runner.progress_bar = not args.no_progress
    log_params = dict(algo=args.algo, env=args.env, sampler=args.sampler, seed=args.seed,
                      affinity=args.affinity, config=config)
    return TrainRun(args=args, config=config, runner=runner, log_params=log_params)


def run_train(run: TrainRun) -> dict:
    """Train a configured run inside its logger context and print where the logs went and
    the final (and best) evaluation return. Returns the runner's result dict; errors
    raised while training propagate unchanged."""
    from rlfast.utils.logging import logger, logger_context

    args = run.args
    if args.log_dir is not None:
        context = logger_context(os.path.abspath(args.log_dir), 0, f"{args.algo}_{args.env}",
                                 run.log_params, snapshot_mode=args.snapshot_mode,
                                 override_prefix=True)
    else:
        context = logger_context(f"{args.algo}_{args.env}", 0, f"{args.algo}_{args.env}",
                                 run.log_params, snapshot_mode=args.snapshot_mode)
    with context as exp_dir:
        logger.log(f"rlfast train {args.algo} {args.env}: logging to {exp_dir}")
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
    is being configured prints ``rlfast: error: ...`` and returns 2. Once training has
    started, an exception propagates with its full traceback (a bug there must not be
    mistaken for a typo in the command line); Ctrl-C returns 130.
    """
    args = _parser().parse_args(argv)
    if args.command != "train":
        return 0
    try:
        try:
            run = configure_train(args)
        except (ConfigError, ValueError) as e:
            print(f"rlfast: error: {e}", file=sys.stderr)
            return 2
        run_train(run)
    except KeyboardInterrupt:
        print("rlfast: interrupted", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
