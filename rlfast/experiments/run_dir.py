"""What a finished (or interrupted) run directory holds, read back for resume, eval and watch.

``rlfast train`` writes ``params.json`` (the algorithm, environment, sampler, seed, runner,
affinity code and the fully resolved ``config``) and snapshots: ``params.pkl`` (snapshot
mode "last") or ``itr_<n>.pkl`` ("all", "gap"). These helpers find and check them, with
errors that say what is missing and how the directory was expected to look.

A run on an env family, algorithm or sampler that a plug-in registered records the plug-in
modules under ``plugins`` in ``params.json`` (:func:`rlfast.experiments.catalog.run_plugins`).
:func:`reopening` imports them again before a run is rebuilt (eval, watch, export, resume),
from the directory they were imported from at train time when nothing else makes them
importable, so reopening a run needs no ``RLFAST_PLUGINS``; a module that cannot be
imported is a one-line :class:`PluginImportError` that names it and ``RLFAST_PLUGINS``.
"""
from __future__ import annotations

import argparse
import contextlib
import functools
import importlib
import importlib.util
import json
import os
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from rlfast.experiments import catalog
from rlfast.experiments.config import ConfigError
from rlfast.utils.logging.context import experiment_dir, find_run_files, snapshot_files
from rlfast.utils.logging.snapshot import SnapshotCorruptError

__all__ = ["RunDirError", "PluginImportError", "read_run_params", "load_run_plugins",
           "reopening", "reopens_run", "latest_snapshot", "snapshot_files",
           "safe_dir_name", "log_dir_for_run", "check_log_dir", "existing_run_message"]

F = TypeVar("F", bound=Callable[..., Any])

# The keys ``rlfast train`` records that rebuilding the experiment needs.
REQUIRED_PARAMS = ("algo", "env", "config", "seed", "sampler")


class RunDirError(ValueError):
    """A directory is not a run that rlfast can read back (no params.json, no snapshot, or a
    params.json that does not describe an rlfast experiment)."""


class PluginImportError(RunDirError):
    """A module that reopening a run needs cannot be imported: a plug-in the run recorded
    (it registered the run's env family, algorithm or sampler), or a module that the
    environment id or the snapshot names."""


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


def _recorded_plugins(params: dict, where: str) -> list[dict]:
    """``params["plugins"]``, checked: a list of dicts with a ``module`` name (absent in runs
    made before rlfast recorded plug-ins: none)."""
    records = params.get("plugins") or []
    if not isinstance(records, list) or not all(
            isinstance(r, dict) and isinstance(r.get("module"), str) and r["module"]
            for r in records):
        raise RunDirError(f"{where}: plugins is {records!r}; expected a list of "
                          f"{{\"module\": NAME, \"path\": DIR, ...}} records")
    return records


def _importable(module: str) -> bool:
    """Whether ``import module`` would find it (its parent packages are imported to look)."""
    if module in sys.modules:
        return True
    try:
        return importlib.util.find_spec(module) is not None
    except Exception:  # a parent package that is missing or fails to import
        return False


def load_run_plugins(params: dict, run_dir: str | os.PathLike) -> list[str]:
    """Import the plug-in modules that ``params`` (a run's ``params.json``) recorded, after
    the plug-ins every command loads (entry points, ``RLFAST_PLUGINS``); returns the names
    imported now. A module that is not importable otherwise is looked for in the directory
    it was imported from at train time (appended to ``sys.path``, which spawned worker
    processes inherit); an entry point's function is called after its module is imported.
    A module that still cannot be imported, or fails while importing, is a
    :class:`PluginImportError` naming it, where it came from, and ``RLFAST_PLUGINS``."""
    where = os.fspath(run_dir)
    records = _recorded_plugins(params, os.path.join(where, "params.json"))
    catalog.load_plugins()
    imported = []
    for record in records:
        module = record["module"]
        if module in sys.modules:
            continue
        path = record.get("path")
        if isinstance(path, str) and os.path.isdir(path) and not _importable(module) \
                and path not in sys.path:
            sys.path.append(path)
        try:
            target = importlib.import_module(module)
            if record.get("call"):
                getattr(target, record["call"])()
        except Exception as e:
            raise PluginImportError(_plugin_message(where, record, e)) from e
        imported.append(module)
    return imported


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _plugin_message(where: str, record: dict, error: BaseException) -> str:
    """The one line for a recorded plug-in module that does not load again."""
    module, path, source = record["module"], record.get("path"), str(record.get("source"))
    provides = ", ".join(record.get("provides") or []) or "part of the run"
    how = "imported" if source == "import" else f"loaded through {source}"
    found_in = f" from {path}" if path else ""
    hint = f"PYTHONPATH={path}" if path else "its directory on PYTHONPATH"
    remedy = (f"make it importable ({hint}) and name it in {catalog.PLUGIN_ENV} "
              f"({catalog.PLUGIN_ENV}={module})")
    if source.startswith("entry point"):
        remedy = f"install the package that declares its {source} again, or {remedy}"
    return (f"{where} was trained with the plug-in module {module} ({how}{found_in}), which "
            f"registered its {provides}; it cannot be imported now ({_first_line(error)}): "
            f"{remedy}")


def _missing_module_message(where: str, module: str | None, reason: str) -> str:
    """The one line for a module the run needs that no recorded plug-in provides."""
    what, provider = (f"the module {module!r}", repr(module)) if module else ("a module", "it")
    return (f"reopening {where} needs {what}, which cannot be imported ({reason}): a run on "
            f"an env family, algorithm or sampler registered by a plug-in needs that "
            f"plug-in; make its module importable (PYTHONPATH) and name it in "
            f"{catalog.PLUGIN_ENV} ({catalog.PLUGIN_ENV}=MODULE), or install the package "
            f"that provides {provider}")


_GLOBAL = re.compile(r"GLOBAL ([A-Za-z_][\w.]*)")
_NO_MODULE = re.compile(r"No module named '([\w.]+)'")


def _unimportable_global(error: SnapshotCorruptError) -> str | None:
    """The missing module behind a snapshot that does not unpickle because it names an
    object of a module that cannot be imported (``weights_only`` reports it as an
    unsupported ``GLOBAL module.Name``; a plain unpickler raises ModuleNotFoundError);
    None when the snapshot failed for another reason."""
    cause = error.__cause__
    while cause is not None:
        if isinstance(cause, ModuleNotFoundError) and cause.name:
            return cause.name
        cause = cause.__cause__
    match = _GLOBAL.search(str(error))
    if match is None:
        return None
    parts = match.group(1).split(".")[:-1]  # the object's name is the last part
    for i in range(1, len(parts) + 1):  # the outermost package that is not there
        if not _importable(".".join(parts[:i])):
            return ".".join(parts[:i])
    return None


@contextlib.contextmanager
def reopening(run_dir: str | os.PathLike) -> Iterator[dict]:
    """Reopen the run in ``run_dir`` to rebuild it: yields its checked ``params.json`` after
    :func:`load_run_plugins`; inside the block, a ModuleNotFoundError (an env id whose module
    is gone, a snapshot or pickled state naming a missing module) becomes a one-line
    :class:`PluginImportError` that names the module and ``RLFAST_PLUGINS`` instead of a
    traceback."""
    where = os.fspath(run_dir)
    params = read_run_params(run_dir)
    load_run_plugins(params, run_dir)
    try:
        yield params
    except ModuleNotFoundError as e:
        named = e.name or next(iter(_NO_MODULE.findall(str(e))), None)  # gymnasium drops .name
        raise PluginImportError(_missing_module_message(
            where, named, f"No module named {named!r}" if named else _first_line(e))) from e
    except SnapshotCorruptError as e:
        module = _unimportable_global(e)
        if module is None:
            raise
        raise PluginImportError(_missing_module_message(
            where, module, "the run's snapshot holds an object defined in it")) from e


def reopens_run(func: F) -> F:
    """Decorate ``func(run_dir, ...)`` to run inside :func:`reopening` ``(run_dir)``: the
    run's plug-ins are imported first, and a missing module is a :class:`PluginImportError`."""
    @functools.wraps(func)
    def reopened(run_dir: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
        with reopening(run_dir):
            return func(run_dir, *args, **kwargs)
    return reopened  # type: ignore[return-value]


def latest_snapshot(run_dir: str | os.PathLike) -> str:
    """The path of the run's newest snapshot: ``params.pkl`` if present (mode "last"), else
    the ``itr_<n>.pkl`` with the largest n."""
    found = snapshot_files(run_dir)
    if not found:
        raise RunDirError(f"{os.fspath(run_dir)} holds no snapshot (params.pkl or itr_<n>.pkl): "
                          f"the run was started with --snapshot-mode none, or stopped before "
                          f"its first log interval")
    return found[-1]


def safe_dir_name(name: str) -> str:
    """``name`` with each run of characters other than letters, digits, ``.``, ``-``, ``_``
    turned into one ``_``: a default directory name (``ppo_atari:pong`` -> ``ppo_atari_pong``)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name)


def log_dir_for_run(args: argparse.Namespace) -> str:
    """The absolute experiment directory of the run: ``--log-dir`` as given, else a
    date-stamped ``<data dir>/local/<date>/<time>/<algo>_<env>/run_0``, where each run of
    characters other than letters, digits, ``.``, ``-``, ``_`` becomes ``_`` (``ppo_atari_pong``:
    a ``:`` breaks some tools, a ``/`` in ``ale_py:ALE/Pong-v5`` would nest directories)."""
    if args.log_dir is not None:
        return experiment_dir(args.log_dir, 0, override_prefix=True)
    return experiment_dir(safe_dir_name(f"{args.algo}_{args.env}"), 0)


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
