"""Command-line options that several ``rlfast`` subcommands share (the parsers themselves
live beside the code they configure: ``rlfast.cli`` for train, ``resume``, ``tune``,
``playback`` and ``plot`` for theirs)."""
from __future__ import annotations

import argparse

from rlfast.experiments.wandb_tracking import DEFAULT_PROJECT, WANDB_EXTRA

__all__ = ["add_console_arguments", "add_wandb_arguments", "wandb_settings"]


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` and ``--verbose``, shared by train and resume."""
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--verbose", action="store_true",
                        help="print every log line and the full diagnostics table of each "
                             "log interval (by default one summary line per interval; the "
                             "tables always go to debug.log and progress.csv)")


def add_wandb_arguments(parser: argparse.ArgumentParser, what: str = "the run") -> None:
    """``--wandb [PROJECT]`` (and ``--wandb-artifacts``, ``--wandb-group``): track ``what`` in
    Weights & Biases (see :mod:`rlfast.experiments.wandb_tracking`)."""
    parser.add_argument("--wandb", nargs="?", const=DEFAULT_PROJECT, default=None,
                        metavar="PROJECT",
                        help=f"log {what}'s progress rows and configuration to Weights & Biases "
                             f"(project default {DEFAULT_PROJECT!r}; WANDB_MODE=offline keeps "
                             f"it local; needs {WANDB_EXTRA})")
    parser.add_argument("--wandb-artifacts", action="store_true",
                        help="with --wandb: also upload the snapshots as a model artifact")
    parser.add_argument("--wandb-group", default=None, help=argparse.SUPPRESS)


def wandb_settings(args: argparse.Namespace, recorded: dict | None = None) -> dict | None:
    """What ``params.json`` records of ``--wandb`` (project, artifacts, group), or the
    ``recorded`` settings of the run being resumed when the command names none."""
    project = getattr(args, "wandb", None)
    if project is None:
        return recorded
    return dict(project=project, artifacts=bool(getattr(args, "wandb_artifacts", False)),
                group=getattr(args, "wandb_group", None) or (recorded or {}).get("group"))
