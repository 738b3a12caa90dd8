"""Crash-safe file writing and JSON conversion used by the logger.

Snapshots and ``params.json`` must never be left half-written: a run killed in the
middle of a save should still have its previous file intact. ``atomic_write`` gets this
by writing to a temporary file in the destination directory, syncing it to disk and only
then renaming it over the final name (a rename within one directory is atomic on POSIX
and Windows). A kill in the middle of a save can still leave the temporary file behind; the
next ``atomic_write`` to the same destination removes such leftovers. A write that fails for
want of space (a full disk, a quota, a file-size limit) raises :class:`NoSpaceError`, which
names the file, also when the writer (``torch.save``) wrapped the OS error in its own.
``json_safe`` turns
arbitrary configuration objects (classes, numpy scalars, named tuples, dataclasses, ...)
into values that ``json.dump`` accepts, so that recording hyperparameters can never crash a
run.
"""
from __future__ import annotations

import dataclasses
import enum
import errno
import inspect
import os
import re
import secrets
import threading
from collections.abc import Callable
from typing import IO, Any

import numpy as np

__all__ = ["NoSpaceError", "NO_SPACE_ERRNOS", "atomic_write", "json_safe"]

# The errors of a write that ran out of room, and how messages name them.
NO_SPACE_ERRNOS = {errno.ENOSPC: "no space left on device",
                   errno.EDQUOT: "disk quota exceeded",
                   errno.EFBIG: "file size limit reached"}


class NoSpaceError(OSError):
    """A file could not be written for want of space (``errno`` ENOSPC, EDQUOT or EFBIG):
    the partial file was removed and the destination keeps its previous content."""

_TOKEN_BYTES = 6  # The temporary name carries 2 * _TOKEN_BYTES lowercase hex digits.
# Temporary files that this process is writing right now (absolute paths). A temporary file
# is registered before it is created and unregistered only once it has been renamed or
# removed, so the stale-file sweep of a concurrent save in another thread never takes it.
_writing: set[str] = set()
_writing_lock = threading.Lock()


def _temp_path(directory: str, base: str) -> str:
    return os.path.join(directory, f".{base}.{secrets.token_hex(_TOKEN_BYTES)}.tmp")


def _remove_stale_temps(directory: str, base: str) -> list[str]:
    """Delete leftover temporary files of destination ``base`` in ``directory``.

    Only names of the exact form ``atomic_write`` creates for this destination
    (``.<base>.<12 hex digits>.tmp``) are touched, and never one this process is writing at
    the moment. rlfast has one writer per run directory, so any other such file is the
    remnant of a save that was killed. Returns the names removed.
    """
    pattern = re.compile(r"\." + re.escape(base) + r"\.[0-9a-f]{%d}\.tmp\Z" % (2 * _TOKEN_BYTES))
    try:
        names = os.listdir(directory)
    except OSError:
        return []
    removed = []
    for name in names:
        if not pattern.match(name):
            continue
        full = os.path.join(directory, name)
        with _writing_lock:
            if full in _writing:
                continue
        try:
            os.unlink(full)
        except OSError:  # Already gone, or not a file: leave it.
            continue
        removed.append(name)
    return removed


def _fsync_directory(directory: str) -> None:
    """Flush a directory entry to disk so a completed rename survives a power loss."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    try:
        fd = os.open(directory, flags)
    except OSError:  # Platforms/filesystems that cannot open directories.
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(path: str | os.PathLike, write_fn: Callable[[IO], None],
                 binary: bool = True, *, what: str = "the file", hint: str = "") -> str:
    """Write a file so that readers only ever see the old or the complete new content.

    ``write_fn`` receives an open file object (binary unless ``binary=False``, in
    which case text in UTF-8) and writes the content. The data go to a hidden temporary
    file in the same directory, are flushed and fsync'ed, and the temporary file is then
    ``os.replace``-d onto ``path``. If anything raises (including KeyboardInterrupt),
    the temporary file is removed, ``path`` is untouched and the exception propagates;
    one that ran out of space (:data:`NO_SPACE_ERRNOS`, also when ``write_fn`` wrapped it,
    as ``torch.save`` does) becomes a :class:`NoSpaceError` naming ``what`` (e.g. "the
    snapshot") and ``path``, followed by ``hint``. Temporary files of ``path`` left by an
    earlier save that was killed (a process cannot clean up after SIGKILL) are deleted
    first; temporary files this process is writing right now, and every other file, are
    left alone. Returns the absolute destination path.
    """
    path = os.path.abspath(os.fspath(path))
    directory, base = os.path.split(path)
    os.makedirs(directory, exist_ok=True)
    tmp_path = _temp_path(directory, base)
    with _writing_lock:
        _writing.add(tmp_path)
    try:
        _remove_stale_temps(directory, base)
        full = _write_and_replace(tmp_path, path, write_fn, binary)
    finally:
        with _writing_lock:
            _writing.discard(tmp_path)
    if full is not None:
        error, cause = full
        reason = NO_SPACE_ERRNOS[error.errno]
        raise NoSpaceError(error.errno, f"{reason} while writing {what} {path}; nothing was "
                                        f"replaced: the partial file was removed and the files "
                                        f"already there are intact{hint}") from cause
    _fsync_directory(directory)
    return path


class _WriteErrors:
    """The open file ``write_fn`` writes to, keeping the first ``OSError`` its ``write``
    raised: ``torch.save`` reports a failed write as a ``RuntimeError`` of its own, which
    no longer says that the disk was full."""

    def __init__(self, f: IO) -> None:
        self._f = f
        self.error: OSError | None = None

    def write(self, data: Any) -> int:
        try:
            return self._f.write(data)
        except OSError as e:
            if self.error is None:
                self.error = e
            raise

    def __getattr__(self, name: str) -> Any:
        return getattr(self._f, name)


def _no_space(raised: BaseException, recorded: OSError | None) -> OSError | None:
    """The OS error behind a failed write when it ran out of space: ``raised`` itself, the
    error ``write`` raised first (``recorded``), or one in ``raised``'s chain of causes."""
    seen = [raised, recorded]
    link = raised
    while link is not None and len(seen) < 20:
        link = link.__cause__ or link.__context__
        seen.append(link)
    return next((e for e in seen if isinstance(e, OSError) and e.errno in NO_SPACE_ERRNOS),
                None)


def _write_and_replace(tmp_path: str, path: str, write_fn: Callable[[IO], None],
                       binary: bool) -> tuple[OSError, BaseException] | None:
    """Create ``tmp_path``, fill it with ``write_fn``, fsync it and rename it to ``path``;
    on any exception remove it and re-raise, except one that ran out of space: then return
    (the OS error, the exception raised), which the caller turns into a
    :class:`NoSpaceError` once the temporary file is gone."""
    # os.open with mode 0o666 lets the process umask decide the final permissions,
    # exactly as for a file created with open().
    fd = os.open(tmp_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0),
                 0o666)
    try:
        if binary:
            f = os.fdopen(fd, "wb")
        else:
            f = os.fdopen(fd, "w", encoding="utf-8", newline="")
    except BaseException:
        os.close(fd)
        os.unlink(tmp_path)
        raise
    recorder = _WriteErrors(f)
    try:
        with f:
            write_fn(recorder)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_path, path)
    except BaseException as raised:
        try:
            os.unlink(tmp_path)
        except FileNotFoundError:
            pass
        full = _no_space(raised, recorder.error) if isinstance(raised, Exception) else None
        if full is None:
            raise
        return full, raised
    return None


def _qualified_name(obj: Any) -> str:
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if qualname is None:
        return repr(obj)
    return f"{module}.{qualname}" if module else qualname


# Returned by the ``_json_safe_*`` helpers for an object of a kind they do not convert.
_UNCONVERTED = object()


def _json_safe_atom(obj: Any) -> Any:
    """Return the JSON form of an object converted without walking into it (a scalar, enum,
    class, function, module, path or numpy array), or ``_UNCONVERTED`` for any other kind;
    split out of ``json_safe`` so each part stays short."""
    if obj is None or isinstance(obj, (bool, int, float, str)):
        return obj
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, enum.Enum):
        return f"{type(obj).__qualname__}.{obj.name}"
    if inspect.isclass(obj) or inspect.isroutine(obj) or inspect.ismodule(obj):
        if inspect.ismodule(obj):
            return obj.__name__
        return _qualified_name(obj)
    if isinstance(obj, os.PathLike):
        return os.fspath(obj)
    if isinstance(obj, np.ndarray):
        return json_safe(obj.tolist())
    return _UNCONVERTED


def _json_safe_container(obj: Any, active: set[int]) -> Any:
    """Return the JSON form of a mapping, dataclass, named tuple, list, tuple or set, walking
    its items with ``active`` (the ids being converted) to cut cycles, or ``_UNCONVERTED``
    for any other kind; split out of ``json_safe`` so each part stays short."""
    if isinstance(obj, dict) or (hasattr(obj, "keys") and hasattr(obj, "__getitem__")):
        return {str(k): json_safe(obj[k], active) for k in obj.keys()}
    if dataclasses.is_dataclass(obj):
        return {f.name: json_safe(getattr(obj, f.name), active)
                for f in dataclasses.fields(obj)}
    if isinstance(obj, tuple) and hasattr(obj, "_asdict"):
        return {str(k): json_safe(v, active) for k, v in obj._asdict().items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        return [json_safe(v, active) for v in items]
    return _UNCONVERTED


def json_safe(obj: Any, _active: set[int] | None = None) -> Any:
    """Return a JSON-serializable version of ``obj`` (recursively).

    Mappings become dicts with string keys; lists, tuples and sets become lists (a named
    tuple or dataclass becomes a dict of its fields); classes, functions and modules
    become their qualified name (``module.QualName``); numpy scalars and arrays become
    Python numbers and lists; 0-d tensors and other objects with ``.item()`` use it;
    path-like objects become strings; enums become their qualified member name; anything
    else becomes its ``repr``. Reference cycles are cut with the string ``"<cycle>"``.
    """
    atom = _json_safe_atom(obj)
    if atom is not _UNCONVERTED:
        return atom
    _active = set() if _active is None else _active
    if id(obj) in _active:
        return "<cycle>"
    _active.add(id(obj))
    try:
        contained = _json_safe_container(obj, _active)
    finally:
        _active.discard(id(obj))
    if contained is not _UNCONVERTED:
        return contained
    item = getattr(obj, "item", None)
    if callable(item) and getattr(obj, "ndim", None) == 0:
        try:
            return json_safe(item())
        except (TypeError, ValueError, RuntimeError):
            pass
    return repr(obj)
