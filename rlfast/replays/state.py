"""A replay buffer's whole content as named numpy arrays, saved beside a snapshot and loaded
back into a freshly built buffer of the same shape (``--snapshot-replay``).

A buffer is composed of parts (storage, sampling scheme, sum tree, frame store, time-limit
windows), each holding numpy arrays (the ring of samples, the tree, the shared cells that
back cursors such as ``t`` and ``full``) and a few Python scalars. :func:`replay_arrays`
walks that composition and names every array and private scalar (state such as the rows
a priority tree has started; public scalars are settings, which the rebuilt buffer keeps) by
its attribute path
(``storage.samples.observation``, ``scheme.tree.tree``, ...); :func:`load_replay_arrays`
copies them back *in place*, so a buffer on shared memory stays shared. Saving is
``numpy.savez`` into a file written atomically; loading uses ``numpy.load`` with
``allow_pickle=False``, so a replay file can carry data only, never code.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO, Any

import numpy as np

__all__ = ["replay_arrays", "load_replay_arrays", "save_replay_file", "load_replay_file"]

_SCALAR = "scalar:"  # key prefix of Python scalars stored as 0-d arrays
# The lock of an async buffer, and the last batch's tree leaves (drawn again after a resume).
_SKIPPED = frozenset({"rw_lock", "_last_leaves"})


def _parts(obj: Any, prefix: str, seen: set) -> Iterator[tuple[str, Any, Any, str]]:
    """(path, owner, value, attribute) for every array and scalar in the buffer's parts."""
    if id(obj) in seen:
        return
    seen.add(id(obj))
    for name, value in vars(obj).items():
        if name in _SKIPPED:
            continue
        path = f"{prefix}{name}"
        if isinstance(value, np.ndarray):
            if not value.dtype.hasobject:
                yield path, obj, value, name
        elif hasattr(value, "_fields"):  # a namedarraytuple of arrays (possibly nested)
            yield from _tuple_arrays(value, path)
        elif isinstance(value, (bool, int, float)) and name.startswith("_"):
            # Private scalars are state (e.g. tree rows started); public ones are the
            # buffer's settings (discount, alpha, ...), which the rebuilt buffer keeps.
            yield path, obj, value, name
        elif type(value).__module__.startswith("rlfast.replays"):
            yield from _parts(value, path + ".", seen)


def _tuple_arrays(value: Any, path: str) -> Iterator[tuple[str, Any, Any, str]]:
    for field in value._fields:
        item = getattr(value, field)
        if isinstance(item, np.ndarray):
            yield f"{path}.{field}", None, item, field
        elif hasattr(item, "_fields"):
            yield from _tuple_arrays(item, f"{path}.{field}")


def replay_arrays(buffer: Any) -> dict[str, np.ndarray]:
    """Every array and scalar of ``buffer``'s parts, by attribute path (scalars as 0-d
    arrays under ``scalar:<path>``). The arrays are the buffer's own (no copy)."""
    arrays = {}
    for path, _, value, _ in _parts(buffer, "", set()):
        if isinstance(value, np.ndarray):
            arrays[path] = value
        else:
            arrays[_SCALAR + path] = np.asarray(value)
    return arrays


def load_replay_arrays(buffer: Any, arrays: Any, where: str = "replay file") -> None:
    """Copy :func:`replay_arrays`'s output (a dict or an open ``.npz``) into ``buffer``,
    which must have been built with the same sizes; a missing or misshapen entry is refused
    by name before anything is written."""
    parts = list(_parts(buffer, "", set()))
    keys = set(arrays.keys() if hasattr(arrays, "keys") else arrays.files)
    expected = {(path if isinstance(value, np.ndarray) else _SCALAR + path)
                for path, _, value, _ in parts}
    missing = sorted(expected - keys)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing[:5])}"
                         f"{' and more' if len(missing) > 5 else ''}: it was saved from a "
                         f"replay buffer of another kind")
    loaded = {}
    for path, owner, value, name in parts:
        key = path if isinstance(value, np.ndarray) else _SCALAR + path
        saved = np.asarray(arrays[key])
        if isinstance(value, np.ndarray) and (saved.shape != value.shape
                                              or saved.dtype != value.dtype):
            raise ValueError(f"{where}: {path} has shape {saved.shape} and dtype {saved.dtype}, "
                             f"the buffer's {value.shape} {value.dtype}: resume with the run's "
                             f"replay_size, batch_B and observation settings")
        loaded[key] = saved
    for path, owner, value, name in parts:
        if isinstance(value, np.ndarray):
            value[...] = loaded[path]
        else:
            setattr(owner, name, type(value)(loaded[_SCALAR + path].item()))


def save_replay_file(buffer: Any, file: IO[bytes]) -> None:
    """Write the buffer's arrays as an (uncompressed) ``.npz`` into an open binary file."""
    np.savez(file, **replay_arrays(buffer))


def load_replay_file(buffer: Any, path: str | os.PathLike) -> None:
    """Load a file written by :func:`save_replay_file` into ``buffer`` (no pickles allowed).
    A damaged file (its zip checksums fail) raises ``ValueError`` naming it."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as npz:
            load_replay_arrays(buffer, {k: npz[k] for k in npz.files}, where=path)
    except (OSError, EOFError, KeyError) as e:
        raise ValueError(f"replay file {path} is damaged or not a replay file: {e}") from e
    except ValueError as e:
        if path in str(e):
            raise
        raise ValueError(f"replay file {path} is not a replay file numpy can load without "
                         f"pickles (it was damaged or replaced): {str(e).split('.')[0]}") from e
    except Exception as e:
        if type(e).__name__ == "BadZipFile":
            raise ValueError(f"replay file {path} is damaged: {e}") from e
        raise
