"""Per-run logging setup (``logger_context``) and small tools over finished runs.

A training run wraps ``runner.train()`` in ``logger_context``, which decides the
experiment directory, points the module-level logger's text (``debug.log``), tabular
(``progress.csv``) and snapshot outputs at it, records the run's configuration in
``params.json``, optionally opens a TensorBoard writer, and undoes all of it on exit so a
second run in the same process starts clean. ``add_exp_param`` and ``check_progress``
help inspect or annotate a directory of runs after the fact.
"""
from __future__ import annotations

import contextlib
import csv
import datetime
import fnmatch
import json
import os
import re
from collections.abc import Iterator, Mapping
from typing import Any

from rlfast.utils.checks import check_choice, check_int
from rlfast.utils.logging import logger

__all__ = ["logger_context", "add_exp_param", "check_progress", "get_data_dir",
           "DATA_DIR_ENV_VAR", "ExistingRunError", "experiment_dir", "find_run_files",
           "remove_run_files", "snapshot_files"]

DATA_DIR_ENV_VAR = "RLFAST_DATA_DIR"

# What marks a directory as holding a run: the files every run writes, and snapshots.
RUN_MARKERS = ("progress.csv", "debug.log", "params.json", "*.pkl")
# Everything a run writes, removed by ``remove_run_files``: the markers (snapshots by the
# names the logger gives them, with any sidecar file), TensorBoard event files, and the
# hidden temporary files of an atomic write that never finished (``.<name>.<hex>.tmp``), and
# the W&B run id a new run must not continue (the W&B files under wandb/ stay, as W&B's own).
RUN_OUTPUTS = ("progress.csv", "debug.log", "params.json", "params.pkl", "itr_*.pkl",
               "params.pkl.*", "itr_*.pkl.*", "events.out.tfevents.*", "wandb_run_id")


_ITR_SNAPSHOT = re.compile(r"^itr_(\d+)\.pkl$")  # the names save_itr_params gives in "all"/"gap"


class ExistingRunError(FileExistsError):
    """The experiment directory already holds a run that starting here would destroy."""


def _matches(name: str, patterns: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def _regular_files(exp_dir: str) -> list[str]:
    try:
        names = os.listdir(exp_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(n for n in names if os.path.isfile(os.path.join(exp_dir, n)))


def find_run_files(exp_dir: str | os.PathLike) -> list[str]:
    """Names of the files in ``exp_dir`` (not its subdirectories) that show it holds a run:
    ``progress.csv``, ``debug.log``, ``params.json`` or any ``*.pkl`` snapshot. Empty when
    the directory is missing or holds none of them."""
    return [n for n in _regular_files(os.fspath(exp_dir)) if _matches(n, RUN_MARKERS)]


def snapshot_files(run_dir: str | os.PathLike) -> list[str]:
    """The run's snapshot files, oldest first: ``itr_<n>.pkl`` by n, then ``params.pkl``."""
    run_dir = os.fspath(run_dir)
    try:
        names = os.listdir(run_dir)
    except (FileNotFoundError, NotADirectoryError):
        return []
    itrs = sorted((int(m.group(1)), n) for n in names if (m := _ITR_SNAPSHOT.match(n)))
    found = [os.path.join(run_dir, n) for _, n in itrs]
    if "params.pkl" in names:
        found.append(os.path.join(run_dir, "params.pkl"))
    return found


def remove_run_files(exp_dir: str | os.PathLike) -> list[str]:
    """Delete the files an earlier run wrote into ``exp_dir`` and return their names.

    Only rlfast's own outputs go (the logs, ``params.json``, ``params.pkl`` and
    ``itr_<n>.pkl`` snapshots with their sidecar files, TensorBoard event files and
    leftover temporary files of interrupted atomic writes); subdirectories and any other
    file stay.
    """
    exp_dir = os.fspath(exp_dir)
    removed = []
    for name in _regular_files(exp_dir):
        base = name
        if name.startswith(".") and name.endswith(".tmp") and name.count(".") >= 3:
            base = name[1:].rsplit(".", 2)[0]  # .<name>.<hex>.tmp -> <name>
        if _matches(base, RUN_OUTPUTS):
            os.unlink(os.path.join(exp_dir, name))
            removed.append(name)
    return removed


def experiment_dir(log_dir: str | os.PathLike, run_ID: int | str,
                   override_prefix: bool = False) -> str:
    """The absolute experiment directory ``logger_context`` uses for these arguments:
    exactly ``log_dir`` with ``override_prefix``, else
    ``<DATA_DIR>/local/<yyyymmdd>/<hhmmss>/<log_dir>/run_<run_ID>`` (stamped now)."""
    log_dir = os.fspath(log_dir)
    if override_prefix:
        return os.path.abspath(log_dir)
    if os.path.isabs(log_dir):
        raise ValueError(
            f"log_dir {log_dir!r} is absolute but override_prefix=False; pass a relative "
            "log_dir (placed under the date-stamped data directory) or override_prefix=True "
            "to use the path exactly.")
    now = datetime.datetime.now()
    return os.path.abspath(os.path.join(get_data_dir(), "local", now.strftime("%Y%m%d"),
                                        now.strftime("%H%M%S"), log_dir, f"run_{run_ID}"))


def get_data_dir() -> str:
    """Root for date-stamped runs: ``$RLFAST_DATA_DIR`` if set, else ``./data``."""
    return os.environ.get(DATA_DIR_ENV_VAR) or os.path.join(os.getcwd(), "data")


def _summary_writer_class() -> Any:
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError as e:
        raise ImportError(
            "use_summary_writer=True needs TensorBoard, which is not installed; "
            "install it with `pip install rlfast[tensorboard]`.") from e
    return SummaryWriter


@contextlib.contextmanager
def logger_context(log_dir: str | os.PathLike, run_ID: int | str, name: str,
                   log_params: Mapping[str, Any] | None = None,
                   snapshot_mode: str = "none", override_prefix: bool = False,
                   use_summary_writer: bool = False, snapshot_gap: int = 1,
                   overwrite: bool = False,
                   resume: Mapping[str, int] | None = None,
                   console: str = "lines") -> Iterator[str]:
    """Direct the logger at one experiment directory for the duration of a run.

    Without ``override_prefix`` the experiment directory is
    ``<DATA_DIR>/local/<yyyymmdd>/<hhmmss>/<log_dir>/run_<run_ID>`` (``log_dir`` must
    then be relative; DATA_DIR from ``get_data_dir``); with ``override_prefix=True`` it
    is exactly ``log_dir``. Inside, ``log`` lines also go to ``debug.log``,
    ``dump_tabular`` rows to ``progress.csv``, snapshots are saved there with
    ``snapshot_mode``/``snapshot_gap``, ``params.json`` holds ``log_params`` plus
    ``name`` and ``run_ID``, and with ``use_summary_writer`` a TensorBoard
    ``SummaryWriter`` writes event files there. On exit (also on error) the outputs and
    writer are closed and the previous snapshot settings and writer restored. Yields
    the absolute experiment directory.

    A directory that already holds a run (see ``find_run_files``) is refused with
    ``ExistingRunError`` (a ``FileExistsError``) before anything is written, so a second
    run never truncates the first one's ``progress.csv``, mixes into its ``debug.log`` or
    replaces its snapshots; with ``overwrite=True`` the earlier run's files are deleted
    (``remove_run_files``) and the new run starts clean. A context nested in one that
    already logs to the same directory continues that run and is not refused.

    ``resume=dict(itr=k, cum_steps=n)`` continues the run already in the directory from
    its snapshot of iteration ``k``: ``debug.log`` is appended to, ``progress.csv`` keeps
    its rows up to iteration ``k`` and continues under the same header (rows logged after
    that snapshot, whose iterations are about to be redone, are dropped), ``params.json``
    is rewritten with ``log_params`` (the caller adds the record of the resume), and a
    TensorBoard writer purges the events after step ``n`` from the earlier event files.

    ``console``: what reaches the terminal meanwhile (see ``logger.set_console_mode``):
    ``"lines"`` (default) one summary line per log row, ``"tables"`` the full tables and
    every log line.
    """
    exp_dir = experiment_dir(log_dir, run_ID, override_prefix)
    if log_params is not None and not isinstance(log_params, Mapping):
        raise TypeError(f"log_params must be a dict or None, got {type(log_params).__name__}.")
    check_choice(snapshot_mode, "snapshot_mode", logger.SNAPSHOT_MODES)
    check_int(snapshot_gap, "snapshot_gap", minimum=1)
    writer_class = _summary_writer_class() if use_summary_writer else None

    text_path = os.path.join(exp_dir, "debug.log")
    tabular_path = os.path.join(exp_dir, "progress.csv")
    if resume is not None:
        if not find_run_files(exp_dir):
            raise FileNotFoundError(f"{exp_dir} holds no run to resume")
    elif text_path not in logger.get_text_outputs():  # not nested in this run's own context
        earlier = find_run_files(exp_dir)
        if earlier and not overwrite:
            raise ExistingRunError(
                f"{exp_dir} already holds a run ({', '.join(earlier)}); pass overwrite=True "
                "to replace it, or choose another log_dir")
        if earlier:
            remove_run_files(exp_dir)
    os.makedirs(exp_dir, exist_ok=True)

    check_choice(console, "console", logger.CONSOLE_MODES)
    previous = (logger.get_snapshot_dir(), logger.get_snapshot_mode(),
                logger.get_snapshot_gap(), logger.get_tf_summary_writer())
    previous_console = logger.get_console_mode()
    # Only remove on exit the outputs this context added (an enclosing context may
    # already log to the same files).
    added_text = text_path not in logger.get_text_outputs()
    added_tabular = tabular_path not in logger.get_tabular_outputs()
    writer = None
    try:
        logger.set_console_mode(console)
        logger.add_text_output(text_path)
        if resume is not None:
            last_itr = int(resume["itr"])
            logger.add_tabular_output(tabular_path, append=True,
                                      keep_row=lambda row: _row_itr(row) <= last_itr)
        else:
            logger.add_tabular_output(tabular_path)
        logger.set_snapshot_dir(exp_dir)
        logger.set_snapshot_mode(snapshot_mode)
        logger.set_snapshot_gap(snapshot_gap)
        params = dict(log_params or {})
        params["name"] = name
        params["run_ID"] = run_ID
        logger.log_parameters_lite(os.path.join(exp_dir, "params.json"), params)
        if writer_class is not None:
            purge = None if resume is None else int(resume["cum_steps"]) + 1
            writer = writer_class(log_dir=exp_dir, purge_step=purge)
            logger.set_tf_summary_writer(writer)
        yield exp_dir
    finally:
        if added_text:
            logger.remove_text_output(text_path)
        if added_tabular:
            logger.remove_tabular_output(tabular_path)
        if writer is not None:
            writer.close()
        snap_dir, snap_mode, snap_gap, prev_writer = previous
        logger.set_snapshot_dir(snap_dir)
        logger.set_snapshot_mode(snap_mode)
        logger.set_snapshot_gap(snap_gap)
        logger.set_tf_summary_writer(prev_writer)
        logger.set_console_mode(previous_console)


def _row_itr(row: Mapping[str, str]) -> float:
    """The ``Diagnostics/Iteration`` of a progress.csv row (-1 when blank or unreadable:
    such rows, like the pre-training evaluation, are kept on resume)."""
    try:
        return float(row.get("Diagnostics/Iteration") or -1)
    except ValueError:
        return -1.0


def add_exp_param(param_name: str, param_val: Any, exp_dir: str | os.PathLike | None = None,
                  write: bool = False) -> list[str]:
    """Set ``param_name = param_val`` in the ``params.json`` of every immediate
    subdirectory of ``exp_dir`` (default: the current directory).

    Useful to add a distinguishing parameter after the fact (e.g. a label combining
    several settings) before plotting. With ``write=False`` (the default) this is a dry
    run that prints what would change; ``write=True`` rewrites the files (atomically).
    Files where the parameter already has that value are left alone. Returns the
    ``params.json`` paths that were (or would be) changed.
    """
    exp_dir = os.getcwd() if exp_dir is None else os.fspath(exp_dir)
    if not os.path.isdir(exp_dir):
        raise FileNotFoundError(f"exp_dir {exp_dir!r} is not a directory.")
    changed = []
    for entry in sorted(os.listdir(exp_dir)):
        params_file = os.path.join(exp_dir, entry, "params.json")
        if not os.path.isfile(params_file):
            continue
        with open(params_file, "r", encoding="utf-8") as f:
            params = json.load(f)
        if param_name in params and params[param_name] == param_val:
            continue
        old = params.get(param_name, "<unset>")
        changed.append(params_file)
        if write:
            params[param_name] = param_val
            logger.log_parameters_lite(params_file, params)
            print(f"{params_file}: set {param_name} = {param_val!r} (was {old!r})")
        else:
            print(f"{params_file}: would set {param_name} = {param_val!r} (was {old!r}); "
                  "pass write=True to apply")
    return changed


def check_progress(exp_dir: str | os.PathLike | None = None) -> dict[str, int]:
    """Print, and return, the number of data rows (logged iterations) in every
    ``progress.csv`` under ``exp_dir`` (default: the current directory), recursively."""
    exp_dir = os.getcwd() if exp_dir is None else os.fspath(exp_dir)
    if not os.path.isdir(exp_dir):
        raise FileNotFoundError(f"exp_dir {exp_dir!r} is not a directory.")
    counts = {}
    for root, dirs, files in os.walk(exp_dir):
        dirs.sort()
        if "progress.csv" in files:
            path = os.path.join(root, "progress.csv")
            with open(path, "r", newline="", encoding="utf-8") as f:
                n_lines = sum(1 for _ in csv.reader(f))
            counts[path] = max(n_lines - 1, 0)  # Minus the header line.
            print(f"{counts[path]:8d} rows  {os.path.relpath(path, exp_dir)}")
    return counts
