"""What a finished (or interrupted) run directory holds, read back for resume, eval and watch.

``rlfast train`` writes ``params.json`` (the algorithm, environment, sampler, seed, runner,
affinity code and the fully resolved ``config``) and snapshots: ``params.pkl`` (snapshot
mode "last") or ``itr_<n>.pkl`` ("all", "gap"). These helpers find and check them, with
errors that say what is missing and how the directory was expected to look.
"""
from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

from rlfast.experiments.config import ConfigError
from rlfast.utils.logging.context import experiment_dir, find_run_files, snapshot_files

__all__ = ["RunDirError", "read_run_params", "latest_snapshot", "snapshot_files",
           "log_dir_for_run", "check_log_dir", "existing_run_message"]

# The keys ``rlfast train`` records that rebuilding the experiment needs.
REQUIRED_PARAMS = ("algo", "env", "config", "seed", "sampler")


class RunDirError(ValueError):
    """A directory is not a run that rlfast can read back (no params.json, no snapshot, or a
    params.json that does not describe an rlfast experiment)."""


def read_run_params(run_dir: str | os.PathLike) -> dict[str, Any]:
    """The ``params.json`` of a run made by ``rlfast train`` (or a launch script that logs
    the same keys), checked to hold ``algo``, ``env``, ``config``, ``seed`` and
    ``sampler``."""
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise RunDirError(f"{run_dir} is not a directory")
    path = os.path.join(run_dir, "params.json")
    if not os.path.isfile(path):
        raise RunDirError(f"{run_dir} holds no params.json: not a run directory written by "
                          f"rlfast train (it writes params.json, progress.csv, debug.log and "
                          f"params.pkl)")
    try:
        with open(path, "r", encoding="utf-8") as f:
            params = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise RunDirError(f"{path} cannot be read as JSON: {e}") from e
    if not isinstance(params, dict):
        raise RunDirError(f"{path} holds a {type(params).__name__}, not the dict rlfast writes")
    missing = [k for k in REQUIRED_PARAMS if k not in params]
    if missing:
        raise RunDirError(f"{path} lacks {', '.join(missing)}: the run was not started by "
                          f"rlfast train (a launch script must log "
                          f"rlfast.experiments.presets.run_params(...) to be resumable)")
    if not isinstance(params["config"], dict):
        raise RunDirError(f"{path}: config is a {type(params['config']).__name__}, not a dict")
    return params


def latest_snapshot(run_dir: str | os.PathLike) -> str:
    """The path of the run's newest snapshot: ``params.pkl`` if present (mode "last"), else
    the ``itr_<n>.pkl`` with the largest n."""
    found = snapshot_files(run_dir)
    if not found:
        raise RunDirError(f"{os.fspath(run_dir)} holds no snapshot (params.pkl or itr_<n>.pkl): "
                          f"the run was started with --snapshot-mode none, or stopped before "
                          f"its first log interval")
    return found[-1]


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
        raise ConfigError(existing_run_message(exp_dir, option))


def existing_run_message(exp_dir: str, option: str) -> str:
    """The error for a directory that already holds a run."""
    return (f"{option} {exp_dir} already holds a run ({', '.join(find_run_files(exp_dir))}); "
            f"pass --overwrite to replace it, or choose another --log-dir")
