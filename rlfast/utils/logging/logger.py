"""Module-level experiment logger: text log, tabular diagnostics and snapshots.

Following rllab/rlpyt, the logger is a module with global state rather than an object,
so any part of the code can call ``logger.log(...)`` or ``logger.record_tabular(...)``
without a logger being threaded through every constructor. It has three channels:

* text: ``log`` prints a (prefixed, time-stamped) line to stdout and appends it to every
  text output file (``debug.log``);
* tabular: ``record_tabular`` collects key/value diagnostics that ``dump_tabular``
  prints as a table and appends as one row to every CSV output (``progress.csv``), and
  optionally to a TensorBoard ``SummaryWriter``;
* snapshots: ``save_itr_params`` writes training state with ``torch.save`` according to
  the snapshot mode, always atomically so a killed run keeps its previous snapshot, never
  with NaN or inf weights, and with a sha256 digest of its content that ``load_snapshot``
  verifies when the snapshot is read back.

``rlfast.utils.logging.context.logger_context`` sets all of this up for one run.
"""
from __future__ import annotations

import contextlib
import datetime
import json
import os
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from rlfast.utils.checks import check_choice, check_int
from rlfast.utils.logging.console import HEADER_EVERY, summary_header, summary_line
from rlfast.utils.logging.serialization import NoSpaceError, atomic_write, json_safe
# load_snapshot and SnapshotCorruptError are re-exported: logger.load_snapshot(path) reads
# back what logger.save_itr_params wrote.
from rlfast.utils.logging.snapshot import (SNAPSHOT_DIGEST_KEY,  # noqa: F401
                                           SnapshotCorruptError, load_snapshot,
                                           snapshot_digest)
from rlfast.utils.logging.tabular_csv import TabularCsvFile, to_cell

SNAPSHOT_MODES = ("none", "last", "all", "gap")
_MAX_NAMED_ENTRIES = 8  # How many non-finite entries a refused save names.
_COLORS = dict(gray=30, red=31, green=32, yellow=33, blue=34, magenta=35, cyan=36,
               white=37, crimson=38)

_prefixes: list[str] = []
_prefix_str = ""
_tabular_prefixes: list[str] = []
_tabular_prefix_str = ""
_tabular: dict[str, Any] = {}
_text_files: dict[str, Any] = {}  # absolute path -> open file
_tabular_files: dict[str, TabularCsvFile] = {}  # absolute path -> csv output
_snapshot_dir: str | None = None
_snapshot_mode = "none"
_snapshot_gap = 1
_log_tabular_only = False
_disable_prefix = False
_tf_summary_writer: Any = None
# Callables given each dumped row ({key: value}), e.g. an experiment tracker (W&B).
_row_sinks: list = []
_dump_count = 0
_muted = False  # ranks other than 0 of a distributed run write nothing
CONSOLE_MODES = ("tables", "lines")
_console_mode = "tables"  # "lines": one summary line per dump on stdout, tables to files
_summary_count = 0  # summary lines printed since the console mode was set


def set_muted(muted: bool) -> None:
    """While muted, ``log``, ``dump_tabular`` and ``save_itr_params`` write nothing (the
    tabular values are dropped): the non-zero ranks of a distributed run, whose rank 0
    alone writes logs and snapshots."""
    global _muted
    _muted = bool(muted)


def get_muted() -> bool:
    return _muted


# ----------------------------------------------------------------------------- text

def set_console_mode(mode: str) -> None:
    """What reaches stdout. ``"tables"`` (the logger's own default): every ``log`` line and
    every ``dump_tabular`` table. ``"lines"`` (``logger_context``'s default, and
    ``rlfast train`` without ``--verbose``): one summary line per ``dump_tabular`` (see
    ``rlfast.utils.logging.console``) and only the ``log`` lines marked ``console=True``;
    everything else still goes to the text outputs (``debug.log``)."""
    global _console_mode, _summary_count
    _console_mode = check_choice(mode, "console mode", CONSOLE_MODES)
    _summary_count = 0


def get_console_mode() -> str:
    return _console_mode


def _write_line(line: str, color: str | None = None, to_stdout: bool = True) -> None:
    """Print one finished line to stdout (colored if asked) and every text output."""
    if to_stdout:
        shown = f"\x1b[{_COLORS[color]}m{line}\x1b[0m" if color is not None else line
        print(shown, flush=True)
    for f in _text_files.values():
        f.write(line + "\n")
        f.flush()


def _format(s: Any, with_prefix: bool, with_timestamp: bool) -> str:
    out = str(s)
    if with_prefix and not _disable_prefix:
        out = _prefix_str + out
    if with_timestamp:
        stamp = datetime.datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
        out = f"{stamp} | {out}"
    return out


def log(s: Any, with_prefix: bool = True, with_timestamp: bool = True,
        color: str | None = None, console: bool = False) -> None:
    """Print ``s`` to stdout and append it to every text output (e.g. ``debug.log``).

    The current prefix (see ``push_prefix``) and a timestamp are prepended unless
    disabled. ``color`` (one of ``gray, red, green, yellow, blue, magenta, cyan, white,
    crimson``) colors only the terminal copy. Nothing is written while
    ``set_log_tabular_only(True)`` is in effect. In the ``"lines"`` console mode the line
    reaches stdout only with ``console=True`` (it always reaches the text outputs).
    """
    if color is not None:
        check_choice(color, "color", sorted(_COLORS))
    if _log_tabular_only or _muted:
        return
    _write_line(_format(s, with_prefix, with_timestamp), color,
                to_stdout=console or _console_mode == "tables")


def add_text_output(file_name: str | os.PathLike) -> None:
    """Append future ``log`` lines to ``file_name`` (opened in append mode; dirs created)."""
    path = os.path.abspath(os.fspath(file_name))
    if path in _text_files:
        return
    os.makedirs(os.path.dirname(path), exist_ok=True)
    _text_files[path] = open(path, "a", encoding="utf-8")


def remove_text_output(file_name: str | os.PathLike) -> None:
    """Stop writing to ``file_name`` and close it (no-op if it is not an output)."""
    f = _text_files.pop(os.path.abspath(os.fspath(file_name)), None)
    if f is not None:
        f.close()


def get_text_outputs() -> list[str]:
    """Absolute paths of the current text outputs."""
    return list(_text_files)


# -------------------------------------------------------------------------- prefixes

def push_prefix(prefix: str) -> None:
    """Prepend ``prefix`` (after earlier pushes) to every following ``log`` line."""
    global _prefix_str
    _prefixes.append(str(prefix))
    _prefix_str = "".join(_prefixes)


def pop_prefix() -> None:
    """Remove the most recently pushed log prefix."""
    global _prefix_str
    if not _prefixes:
        raise IndexError("pop_prefix() called with no log prefix pushed.")
    _prefixes.pop()
    _prefix_str = "".join(_prefixes)


@contextlib.contextmanager
def prefix(key: str) -> Iterator[None]:
    """Context manager: ``push_prefix(key)`` on entry, ``pop_prefix()`` on exit."""
    push_prefix(key)
    try:
        yield
    finally:
        pop_prefix()


def push_tabular_prefix(key: str) -> None:
    """Prepend ``key`` (after earlier pushes) to every following tabular key."""
    global _tabular_prefix_str
    _tabular_prefixes.append(str(key))
    _tabular_prefix_str = "".join(_tabular_prefixes)


def pop_tabular_prefix() -> None:
    """Remove the most recently pushed tabular prefix."""
    global _tabular_prefix_str
    if not _tabular_prefixes:
        raise IndexError("pop_tabular_prefix() called with no tabular prefix pushed.")
    _tabular_prefixes.pop()
    _tabular_prefix_str = "".join(_tabular_prefixes)


@contextlib.contextmanager
def tabular_prefix(key: str) -> Iterator[None]:
    """Context manager: ``push_tabular_prefix(key)`` on entry, pop on exit."""
    push_tabular_prefix(key)
    try:
        yield
    finally:
        pop_tabular_prefix()


def set_disable_prefix(disable: bool) -> None:
    """When True, ``log`` ignores the pushed prefixes."""
    global _disable_prefix
    _disable_prefix = bool(disable)


def get_disable_prefix() -> bool:
    return _disable_prefix


def set_log_tabular_only(log_tabular_only: bool) -> None:
    """When True, ``log`` is silent and only ``dump_tabular`` tables are shown/written."""
    global _log_tabular_only
    _log_tabular_only = bool(log_tabular_only)


def get_log_tabular_only() -> bool:
    return _log_tabular_only


# --------------------------------------------------------------------------- tabular

def record_tabular(key: str, val: Any) -> None:
    """Record diagnostic ``key`` (with the tabular prefix) for the next ``dump_tabular``.

    Recording the same key twice before a dump keeps the latest value.
    """
    _tabular[_tabular_prefix_str + str(key)] = val


def record_tabular_misc_stat(key: str, values: Any, placement: str = "back") -> None:
    """Record Average, Std, Median, Min and Max of ``values`` under ``key``.

    ``placement="back"`` gives keys like ``ReturnAverage``; ``"front"`` gives
    ``AverageReturn``. The statistics are NaN when ``values`` is empty. Std is the
    population standard deviation (numpy's default, ddof=0).
    """
    check_choice(placement, "placement", ("front", "back"))
    data = np.asarray(values, dtype=np.float64).reshape(-1)
    if data.size > 0:
        stats = dict(Average=np.mean(data), Std=np.std(data), Median=np.median(data),
                     Min=np.min(data), Max=np.max(data))
    else:
        stats = dict.fromkeys(("Average", "Std", "Median", "Min", "Max"), np.nan)
    for name, value in stats.items():
        full = name + key if placement == "front" else key + name
        record_tabular(full, float(value))


def add_tabular_output(file_name: str | os.PathLike, append: bool = False,
                       keep_row: Any = None) -> None:
    """Append one CSV row per ``dump_tabular`` to ``file_name``: a new file (truncated on
    open), or with ``append`` the rows already there continued (a resumed run; rows for
    which ``keep_row(row)`` is False are dropped first, see ``TabularCsvFile``)."""
    path = os.path.abspath(os.fspath(file_name))
    if path not in _tabular_files:
        _tabular_files[path] = TabularCsvFile(path, append=append, keep_row=keep_row)


def remove_tabular_output(file_name: str | os.PathLike) -> None:
    """Stop writing rows to ``file_name`` and close it (no-op if not an output)."""
    out = _tabular_files.pop(os.path.abspath(os.fspath(file_name)), None)
    if out is not None:
        out.close()


def get_tabular_outputs() -> list[str]:
    """Absolute paths of the current CSV outputs."""
    return list(_tabular_files)


def set_tf_summary_writer(writer: Any) -> None:
    """Also send numeric diagnostics to this TensorBoard ``SummaryWriter`` (None: stop)."""
    global _tf_summary_writer
    _tf_summary_writer = writer


def get_tf_summary_writer() -> Any:
    return _tf_summary_writer


def add_row_sink(sink: Callable[[dict], None]) -> None:
    """Give every row ``dump_tabular`` writes, as ``{key: value}``, to ``sink`` too."""
    _row_sinks.append(sink)


def remove_row_sink(sink: Callable[[dict], None]) -> None:
    """Stop giving rows to ``sink`` (added with :func:`add_row_sink`)."""
    if sink in _row_sinks:
        _row_sinks.remove(sink)


def _format_value(value: Any) -> str:
    value = to_cell(value)
    if isinstance(value, float):
        return f"{value:.6g}"
    return str(value)


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def dump_tabular(with_prefix: bool = True, with_timestamp: bool = True) -> None:
    """Write the recorded diagnostics and clear them.

    Prints a two-column table (to stdout and the text outputs, even when
    ``log_tabular_only`` is set), appends one row to every CSV output (flushed), and,
    when a summary writer is set, calls ``add_scalar(key, value, step)`` for every
    numeric value with ``step`` = the recorded ``Diagnostics/CumSteps`` or else the
    number of previous dumps. Does nothing if nothing was recorded.
    """
    global _dump_count, _summary_count
    if _muted:
        _tabular.clear()
        return
    if not _tabular:
        return
    rows = [(key, _format_value(val)) for key, val in _tabular.items()]
    key_w = max(len(k) for k, _ in rows)
    val_w = max(len(v) for _, v in rows)
    rule = "-" * key_w + "  " + "-" * val_w
    tables = _console_mode == "tables"
    for line in [rule] + [f"{k:<{key_w}}  {v:>{val_w}}" for k, v in rows] + [rule]:
        _write_line(_format(line, with_prefix, with_timestamp), to_stdout=tables)
    if not tables:
        if _summary_count % HEADER_EVERY == 0:
            print(summary_header(), flush=True)
        print(summary_line(_tabular), flush=True)
        _summary_count += 1
    for out in _tabular_files.values():
        out.write_row(_tabular)
    if _tf_summary_writer is not None:
        step = to_cell(_tabular.get("Diagnostics/CumSteps"))
        step = int(step) if _is_number(step) and np.isfinite(step) else _dump_count
        for key, val in _tabular.items():
            val = to_cell(val)
            if _is_number(val):
                _tf_summary_writer.add_scalar(key, val, step)
        _tf_summary_writer.flush()
    if _row_sinks:
        row = {key: to_cell(val) for key, val in _tabular.items()}
        for sink in list(_row_sinks):
            sink(dict(row))
    _tabular.clear()
    _dump_count += 1


# ------------------------------------------------------------------------- snapshots

def set_snapshot_dir(dir_name: str | os.PathLike | None) -> None:
    """Directory where ``save_itr_params`` writes; None disables saving."""
    global _snapshot_dir
    _snapshot_dir = None if dir_name is None else os.path.abspath(os.fspath(dir_name))


def get_snapshot_dir() -> str | None:
    return _snapshot_dir


def set_snapshot_mode(mode: str) -> None:
    """How ``save_itr_params`` saves: one of "none", "last", "all", "gap"."""
    global _snapshot_mode
    check_choice(mode, "snapshot mode", SNAPSHOT_MODES)
    _snapshot_mode = mode


def get_snapshot_mode() -> str:
    return _snapshot_mode


def set_snapshot_gap(gap: int) -> None:
    """In "gap" mode, save iterations where ``itr % gap == 0`` (gap a positive int)."""
    global _snapshot_gap
    _snapshot_gap = check_int(gap, "snapshot gap", minimum=1)


def get_snapshot_gap() -> int:
    return _snapshot_gap


def save_itr_params(itr: int, params: Mapping[str, Any],
                    sidecars: Mapping[str, Any] | None = None) -> str | None:
    """Save ``params`` (a dict, e.g. model and optimizer state) per the snapshot mode.

    Mode "last" overwrites ``params.pkl``; "all" writes ``itr_{itr}.pkl``; "gap" writes
    ``itr_{itr}.pkl`` when ``itr % gap == 0``; "none" (or no snapshot dir) saves
    nothing. Every save is atomic (temporary file, fsync, rename), so an interrupted
    save leaves the previous snapshot intact. The saved dict also holds
    ``SNAPSHOT_DIGEST_KEY``: the sha256 of its content, which :func:`load_snapshot` checks.
    A save that runs out of space raises ``NoSpaceError`` ("no space left on device while
    writing the snapshot <path> ..."); the previous snapshot stays intact, and the sidecars
    of the failed save are removed. A snapshot with a NaN or inf in any float tensor or
    array is not written:
    ``rlfast.utils.finite.NonFiniteError`` names the bad entries and the file on disk keeps
    its last good content. Returns the path written, or None.

    ``sidecars`` maps a file suffix (``"replay.npz"``) to a function writing into an open
    binary file: each is written atomically *before* the snapshot, as
    ``<snapshot file>.<itr>.<suffix>``, and the snapshot names it under ``sidecar_files``.
    Only once the snapshot itself is in place are older sidecars of that snapshot file
    deleted, so a save killed at any point leaves the previous snapshot with its own
    sidecars intact.
    """
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a dict of snapshot entries, got {type(params).__name__}.")
    if _snapshot_dir is None or _snapshot_mode == "none" or _muted:
        return None
    if _snapshot_mode == "last":
        file_name = "params.pkl"
    elif _snapshot_mode == "all" or (_snapshot_mode == "gap" and itr % _snapshot_gap == 0):
        file_name = f"itr_{itr}.pkl"
    else:
        return None
    if SNAPSHOT_DIGEST_KEY in params:
        raise ValueError(f"{SNAPSHOT_DIGEST_KEY!r} is reserved for the digest that "
                         f"save_itr_params adds; rename that snapshot entry")
    # Imported lazily: the logger itself needs no torch.
    import torch

    from rlfast.utils.finite import NonFiniteError, nonfinite_entries

    path = os.path.join(_snapshot_dir, file_name)
    snapshot = dict(params)
    bad = nonfinite_entries(snapshot)
    if bad:
        named = ", ".join(bad[:_MAX_NAMED_ENTRIES])
        more = f" and {len(bad) - _MAX_NAMED_ENTRIES} more" if len(bad) > _MAX_NAMED_ENTRIES else ""
        raise NonFiniteError(
            f"refusing to save snapshot {path} (iteration {itr}): NaN or inf in {named}{more}; "
            f"the snapshot file on disk keeps its last good content")
    written, result = _write_snapshot_files(itr, file_name, snapshot, sidecars or {},
                                            lambda obj, f: torch.save(obj, f))
    for suffix, side in written.items():
        _remove_old_sidecars(file_name, suffix, keep=side)
    return result


def _write_snapshot_files(itr: int, file_name: str, snapshot: dict,
                          sidecars: Mapping[str, Any], save: Callable[[Any, Any], None]
                          ) -> tuple[dict[str, str], str]:
    """Write the sidecars of ``snapshot`` (see :func:`save_itr_params`), then the snapshot
    itself with its digest through ``save(snapshot, file)``, each atomically; return ({suffix:
    sidecar name}, the snapshot's path). A save that runs out of space removes the sidecars
    it wrote (they belong to no snapshot) and raises ``NoSpaceError``."""
    hint = f"; free space, then continue from the previous snapshot: rlfast resume {_snapshot_dir}"
    written, new_files = {}, []
    try:
        for suffix, write in sidecars.items():
            side = f"{file_name}.{itr}.{suffix}"
            side_path = os.path.join(_snapshot_dir, side)
            if not os.path.exists(side_path):
                new_files.append(side_path)
            atomic_write(side_path, write, what=f"the {suffix} file of the snapshot", hint=hint)
            written[suffix] = side
        if written:
            snapshot["sidecar_files"] = written
        snapshot[SNAPSHOT_DIGEST_KEY] = snapshot_digest(snapshot)
        path = atomic_write(os.path.join(_snapshot_dir, file_name),
                            lambda f: save(snapshot, f), what="the snapshot", hint=hint)
    except NoSpaceError:  # raised before the rename: the new sidecars belong to no snapshot
        for side_path in new_files:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(side_path)
        raise
    return written, path


def _remove_old_sidecars(file_name: str, suffix: str, keep: str) -> None:
    """Delete ``<file_name>.<n>.<suffix>`` files other than ``keep`` (their snapshot was
    replaced)."""
    head, tail = f"{file_name}.", f".{suffix}"
    for name in os.listdir(_snapshot_dir):
        if name != keep and name.startswith(head) and name.endswith(tail) \
                and name[len(head):-len(tail)].isdigit():
            try:
                os.unlink(os.path.join(_snapshot_dir, name))
            except FileNotFoundError:
                pass


def log_parameters_lite(log_file: str | os.PathLike, params: Any) -> None:
    """Write ``params`` (a mapping or an object with ``__dict__``, e.g. an argparse
    Namespace) to ``log_file`` as indented JSON, made JSON-safe and written atomically."""
    if not isinstance(params, Mapping):
        if not hasattr(params, "__dict__"):
            raise TypeError(f"params must be a mapping or have __dict__, got {params!r}.")
        params = vars(params)
    text = json.dumps(json_safe(params), indent=2, sort_keys=True)
    atomic_write(log_file, lambda f: f.write(text + "\n"), binary=False)


# ----------------------------------------------------------------------------- reset

def reset() -> None:
    """Return the logger to its initial state: close all outputs, drop prefixes and
    pending diagnostics, no snapshot dir, mode "none", gap 1, no summary writer."""
    global _prefix_str, _tabular_prefix_str, _snapshot_dir, _snapshot_mode, _snapshot_gap
    global _log_tabular_only, _disable_prefix, _tf_summary_writer, _dump_count, _muted
    for path in list(_text_files):
        remove_text_output(path)
    for path in list(_tabular_files):
        remove_tabular_output(path)
    _prefixes.clear()
    _tabular_prefixes.clear()
    _tabular.clear()
    _prefix_str = _tabular_prefix_str = ""
    _snapshot_dir, _snapshot_mode, _snapshot_gap = None, "none", 1
    _log_tabular_only = _disable_prefix = False
    _tf_summary_writer = None
    _row_sinks.clear()
    _dump_count = 0
    _muted = False
    set_console_mode("tables")
