"""The ``rlfast`` command line: argument parsing and dispatch.

Everything a command does lives in ``rlfast.experiments``: run assembly and the exit-status
policy in :mod:`~rlfast.experiments.assembly`, resume, evaluation and playback, plotting and
tuning in their own modules. Nothing in rlfast imports this module.
"""
from __future__ import annotations

import argparse
import importlib
import sys

from rlfast.experiments import catalog
from rlfast.experiments.arguments import add_console_arguments, add_wandb_arguments
from rlfast.experiments.builtin import ENV_FAMILIES
from rlfast.experiments.config import ConfigError
from rlfast.experiments.device import DEVICE_HELP
from rlfast.experiments.presets import RUNNERS
from rlfast.experiments.registry import env_id_help
from rlfast.utils.distributed import BACKENDS


def _parser() -> argparse.ArgumentParser:
    """The argument parser of ``rlfast`` and its ``train`` subcommand."""
    parser = argparse.ArgumentParser(prog="rlfast", description="High-throughput deep RL.")
    sub = parser.add_subparsers(dest="command", required=True)
    train = sub.add_parser("train", help="train an agent from a preset",
                           description="Train ALGO on the environment ENV, an id of any "
                                       "registered env family.")
    train.add_argument("algo", help=f"algorithm: {', '.join(catalog.algorithm_names())}; or "
                                    f"an evolution strategy: "
                                    f"{', '.join(catalog.es_strategy_names())}")
    catalog.load_plugins()  # the families plug-ins register are choices too
    train.add_argument("env", help=env_id_help(ENV_FAMILIES))
    train.add_argument("--steps", type=int, default=None, help="environment steps to train for")
    train.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    train.add_argument("--n-envs", type=int, default=None, help="parallel environments (batch_B)")
    train.add_argument("--sampler", choices=catalog.sampler_names(), default=None,
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
                       metavar="KEY=VALUE",
                       help="override a preset value, e.g. algo.learning_rate=3e-4")
    train.add_argument("--config", default=None, metavar="FILE",
                       help="JSON file of preset overrides, nested like the preset "
                            '({"algo": {"learning_rate": 0.001}}) or by dotted key '
                            '({"algo.learning_rate": 0.001}); applied after --steps and '
                            "--n-envs, before --set (rlfast tune writes best_config.json in "
                            "this form)")
    train.add_argument("--snapshot-mode", default="last", choices=("none", "last", "all", "gap"),
                       help="which training snapshots to keep (default: last)")
    train.add_argument("--affinity", default=None, metavar="CODE",
                       help="hardware affinity code (rlfast.launching), e.g. "
                            "0slt_2cpu_0gpu_0hto; without a slot token, slot 0 is used")
    train.add_argument("--snapshot-every", type=float, default=None, metavar="MINUTES",
                       help="also snapshot on the wall clock: at the end of the first "
                            "iteration once MINUTES (a positive number, e.g. 30 or 0.5) "
                            "passed since the last snapshot, so that a run killed without "
                            "warning (a power cut) loses at most that much; kept by rlfast "
                            "resume (default: snapshots at the log rows only)")
    train.add_argument("--snapshot-replay", action="store_true",
                       help="also save the replay buffer beside each snapshot (.npz), so that "
                            "rlfast resume continues replay-based runs exactly")
    train.add_argument("--tensorboard", action="store_true",
                       help="also write TensorBoard event files into the log directory "
                            "(needs pip install rlfast[tensorboard])")
    add_console_arguments(train)
    add_wandb_arguments(train)
    from rlfast.experiments.playback import add_eval_parser, add_watch_parser
    from rlfast.experiments.plot import add_plot_parser
    from rlfast.experiments.resume import add_resume_parser
    add_resume_parser(sub)
    add_eval_parser(sub)
    add_watch_parser(sub)
    add_plot_parser(sub)
    from rlfast.experiments.tune import add_tune_parser
    add_tune_parser(sub)
    from rlfast.experiments.export import add_export_parser
    add_export_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``rlfast`` console script; returns the exit status.

    ``train`` and ``resume`` go through :func:`rlfast.experiments.assembly.run_command`:
    a configuration error (an unknown environment id, a log directory that cannot be
    written or already holds a run, ...) prints ``rlfast: error: ...`` and returns 2; an
    interrupted run returns 128 + the signal number (143 for SIGTERM, 130 for Ctrl-C). The
    other subcommands return their own status.
    """
    try:
        args = _parser().parse_args(argv)
    except ConfigError as e:  # a plug-in (RLFAST_PLUGINS, entry point) did not load
        print(f"rlfast: error: {e}", file=sys.stderr)
        return 2
    if args.command == "train" and args.algo in catalog.es_strategy_names():
        module, function = "rlfast.experiments.es_train", "es_train_main"
    else:
        module, function = _COMMANDS[args.command]
    return getattr(importlib.import_module(module), function)(args)


# Subcommand -> (module, function taking the parsed args and returning the exit status).
_COMMANDS = dict(train=("rlfast.experiments.resume", "restartable_train_main"),
                 resume=("rlfast.experiments.resume", "resume_main"),
                 eval=("rlfast.experiments.playback", "eval_main"),
                 watch=("rlfast.experiments.playback", "watch_main"),
                 plot=("rlfast.experiments.plot", "plot_main"),
                 tune=("rlfast.experiments.tune", "tune_main"),
                 export=("rlfast.experiments.export", "export_main"))


if __name__ == "__main__":
    sys.exit(main())
