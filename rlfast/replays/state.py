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

Device buffers (:mod:`rlfast.replays.device_buffers`) are walked the same way: their torch
tensors are saved as numpy arrays (``.cpu().numpy()``) and loaded by copying into the device
tensors in place. A part with ``state_dict()`` / ``load_state_dict()`` (the device sampling
schemes, whose generators and host cursors live there) is saved through them instead, under
``state:<path>.<key>``, and restored by its own ``load_state_dict`` once every entry checked.
"""
from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO, Any

import numpy as np
import torch

__all__ = ["replay_arrays", "load_replay_arrays", "save_replay_file", "load_replay_file"]

_SCALAR = "scalar:"  # key prefix of Python scalars stored as 0-d arrays
_STATE = "state:"  # key prefix of the entries of a part saved through its state_dict()
# The lock of an async buffer, and the last batch's tree leaves (drawn again after a resume).
_SKIPPED = frozenset({"rw_lock", "_last_leaves"})


class _StatePart:
    """A part saved through its ``state_dict()`` / ``load_state_dict()`` (not walked)."""

    def __init__(self, part: Any):
        self.part = part


def _has_state_dict(value: Any) -> bool:
    return callable(getattr(value, "state_dict", None)) \
        and callable(getattr(value, "load_state_dict", None))


def _parts(obj: Any, prefix: str, seen: set) -> Iterator[tuple[str, Any, Any, str]]:
    """(path, owner, value, attribute) for every array, tensor, scalar and state-dict part in
    the buffer's parts."""
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
        elif isinstance(value, torch.Tensor):
            yield path, obj, value, name
        elif hasattr(value, "_fields"):  # a namedarraytuple of arrays (possibly nested)
            yield from _tuple_arrays(value, path)
        elif isinstance(value, (bool, int, float)) and name.startswith("_"):
            # Private scalars are state (e.g. tree rows started); public ones are the
            # buffer's settings (discount, alpha, ...), which the rebuilt buffer keeps.
            yield path, obj, value, name
        elif type(value).__module__.startswith("rlfast.replays"):
            if _has_state_dict(value):
                if id(value) not in seen:
                    seen.add(id(value))
                    yield path, obj, _StatePart(value), name
            else:
                yield from _parts(value, path + ".", seen)


def _tuple_arrays(value: Any, path: str) -> Iterator[tuple[str, Any, Any, str]]:
    for field in value._fields:
        item = getattr(value, field)
        if isinstance(item, (np.ndarray, torch.Tensor)):
            yield f"{path}.{field}", None, item, field
        elif hasattr(item, "_fields"):
            yield from _tuple_arrays(item, f"{path}.{field}")


def _is_array(value: Any) -> bool:
    return isinstance(value, (np.ndarray, torch.Tensor))


def _as_numpy(value: Any) -> np.ndarray:
    """A tensor's values as a numpy array (a CPU tensor's own memory); arrays as they are."""
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    if isinstance(value, np.ndarray):
        return value  # the array itself (shared-memory subclasses included)
    return np.asarray(value)


def _numpy_dtype(value: Any) -> np.dtype:
    if isinstance(value, torch.Tensor):
        return torch.empty(0, dtype=value.dtype).numpy().dtype
    return value.dtype


def _state_entries(state: Any, path: str) -> Iterator[tuple[str, Any]]:
    """``(key, leaf)`` of a (nested) state dict, keys ``state:<path>.<key>...``."""
    for key, value in state.items():
        if isinstance(value, dict):
            yield from _state_entries(value, f"{path}.{key}")
        else:
            yield f"{_STATE}{path}.{key}", value


def _entries(parts: list) -> Iterator[tuple[str, Any]]:
    """``(key, live value)`` of everything :func:`replay_arrays` saves."""
    for path, _, value, _ in parts:
        if isinstance(value, _StatePart):
            yield from _state_entries(value.part.state_dict(), path)
        elif _is_array(value):
            yield path, value
        else:
            yield _SCALAR + path, value


def replay_arrays(buffer: Any) -> dict[str, np.ndarray]:
    """Every array and scalar of ``buffer``'s parts, by attribute path (scalars as 0-d
    arrays under ``scalar:<path>``, the entries of state-dict parts under
    ``state:<path>.<key>``). Numpy arrays and CPU tensors are the buffer's own memory (no
    copy); device tensors are copied to the host."""
    return {key: _as_numpy(value) for key, value in _entries(list(_parts(buffer, "", set())))}


def load_replay_arrays(buffer: Any, arrays: Any, where: str = "replay file") -> None:
    """Copy :func:`replay_arrays`'s output (a dict or an open ``.npz``) into ``buffer``,
    which must have been built with the same sizes; a missing or misshapen entry is refused
    by name before anything is written. Device tensors are written in place."""
    parts = list(_parts(buffer, "", set()))
    live = dict(_entries(parts))
    keys = set(arrays.keys() if hasattr(arrays, "keys") else arrays.files)
    missing = sorted(set(live) - keys)
    if missing:
        raise ValueError(f"{where} lacks {', '.join(missing[:5])}"
                         f"{' and more' if len(missing) > 5 else ''}: it was saved from a "
                         f"replay buffer of another kind")
    loaded = {}
    for key, value in live.items():
        saved = np.asarray(arrays[key])
        if _is_array(value) and (saved.shape != tuple(value.shape)
                                 or saved.dtype != _numpy_dtype(value)):
            raise ValueError(f"{where}: {key} has shape {saved.shape} and dtype {saved.dtype}, "
                             f"the buffer's {tuple(value.shape)} {_numpy_dtype(value)}: resume "
                             f"with the run's replay_size, batch_B and observation settings")
        loaded[key] = saved
    for path, owner, value, name in parts:
        if isinstance(value, _StatePart):
            value.part.load_state_dict(_rebuilt_state(value.part.state_dict(), path, loaded))
        elif isinstance(value, torch.Tensor):
            value.copy_(_to_tensor(loaded[path]))
        elif isinstance(value, np.ndarray):
            value[...] = loaded[path]
        else:
            setattr(owner, name, type(value)(loaded[_SCALAR + path].item()))


def _to_tensor(saved: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(saved if saved.flags.writeable else saved.copy())


def _rebuilt_state(template: dict, path: str, loaded: dict) -> dict:
    """A state dict shaped like ``template`` holding the loaded values (tensors for tensors,
    arrays for arrays, Python scalars of the template's type for scalars)."""
    state = {}
    for key, value in template.items():
        if isinstance(value, dict):
            state[key] = _rebuilt_state(value, f"{path}.{key}", loaded)
            continue
        saved = loaded[f"{_STATE}{path}.{key}"]
        if isinstance(value, torch.Tensor):
            state[key] = _to_tensor(saved)
        elif isinstance(value, np.ndarray):
            state[key] = saved
        else:
            state[key] = type(value)(saved.item())
    return state


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
