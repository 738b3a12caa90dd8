"""Command-line options that several ``rlfast`` subcommands share (the parsers themselves
live beside the code they configure: ``rlfast.cli`` for train, ``resume``, ``tune``,
``playback`` and ``plot`` for theirs)."""
from __future__ import annotations

import argparse

__all__ = ["add_console_arguments"]


def add_console_arguments(parser: argparse.ArgumentParser) -> None:
    """``--no-progress`` and ``--verbose``, shared by train and resume."""
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--verbose", action="store_true",
                        help="print every log line and the full diagnostics table of each "
                             "log interval (by default one summary line per interval; the "
                             "tables always go to debug.log and progress.csv)")
