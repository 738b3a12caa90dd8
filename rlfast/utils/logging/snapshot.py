"""Snapshot integrity: a sha256 digest stored inside every snapshot, checked on load.

``torch.load`` happily returns a snapshot whose tensor bytes were damaged on disk (a flipped
bit in a weight is still a valid float), and a run resumed or evaluated from it goes wrong
without a word. So ``logger.save_itr_params`` stores ``snapshot_digest(params)`` under the
key ``SNAPSHOT_DIGEST_KEY`` and :func:`load_snapshot` recomputes it after loading.

The digest covers every tensor and numpy array (its name in the nested dicts, dtype, shape
and raw bytes; CUDA tensors are copied to the host for hashing) and the plain values beside
them (ints, floats, strings, ...), visiting dict entries in sorted order, so that it depends
only on the content and not on the device the tensors were loaded to. ``load_snapshot``
loads with ``weights_only=True`` (no arbitrary code runs while unpickling; numpy arrays
are allowed), and raises :class:`SnapshotCorruptError` for a file that is truncated,
unreadable or whose digest differs. Snapshots written before digests existed load with a
warning.
"""
from __future__ import annotations

import codecs
import errno
import hashlib
import os
import re
import warnings
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

__all__ = ["SNAPSHOT_DIGEST_KEY", "SnapshotCorruptError", "snapshot_digest", "load_snapshot"]

SNAPSHOT_DIGEST_KEY = "snapshot_sha256"


class SnapshotCorruptError(ValueError):
    """A snapshot file is truncated, unreadable, or its content no longer matches the
    digest stored when it was saved."""


def _feed(h: Any, data: bytes | str) -> None:
    """Hash one length-prefixed field, so that adjacent fields can never run together."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    h.update(len(data).to_bytes(8, "little"))
    h.update(data)


def _feed_array_bytes(h: Any, raw: np.ndarray) -> None:
    """Hash the bytes of a contiguous uint8 array, length-prefixed, without copying it."""
    h.update(int(raw.nbytes).to_bytes(8, "little"))
    h.update(raw.data)


def _hash_tensor(h: Any, path: str, tensor: torch.Tensor) -> None:
    import torch

    t = tensor.detach()
    if t.layout != torch.strided:
        t = t.to_dense()
    t = t.resolve_conj().resolve_neg().cpu().contiguous()
    _feed(h, "tensor")
    _feed(h, path)
    _feed(h, str(t.dtype))
    _feed(h, repr(tuple(t.shape)))
    _feed_array_bytes(h, t.reshape(-1).view(torch.uint8).numpy())


def _hash_array(h: Any, path: str, array: np.ndarray, kind: str) -> None:
    array = np.ascontiguousarray(array)
    _feed(h, kind)
    _feed(h, path)
    _feed(h, array.dtype.str)
    _feed(h, repr(array.shape))
    if array.dtype.hasobject:  # Pointers, not data: hash the elements themselves.
        for i, item in enumerate(array.reshape(-1).tolist()):
            _hash_value(h, f"{path}.flat[{i}]", item)
    else:
        _feed_array_bytes(h, array.reshape(-1).view(np.uint8))


def _hash_value(h: Any, path: str, value: Any) -> None:
    """Hash ``value`` (found at ``path``) and, for containers, everything inside it."""
    import torch

    if isinstance(value, torch.Tensor):
        _hash_tensor(h, path, value)
    elif isinstance(value, np.ndarray):
        _hash_array(h, path, value, "ndarray")
    elif isinstance(value, np.generic):
        _hash_array(h, path, np.asarray(value), "numpy-scalar")
    elif isinstance(value, Mapping):
        _feed(h, "mapping")
        _feed(h, path)
        _feed(h, str(len(value)))
        for key, item in sorted(value.items(), key=lambda kv: repr(kv[0])):
            _hash_value(h, f"{path}[{key!r}]", item)
    elif isinstance(value, (list, tuple)):
        _feed(h, type(value).__name__ if type(value) in (list, tuple) else "sequence")
        _feed(h, path)
        _feed(h, str(len(value)))
        for i, item in enumerate(value):
            _hash_value(h, f"{path}[{i}]", item)
    elif isinstance(value, (set, frozenset)):
        _feed(h, "set")
        _feed(h, path)
        for i, item in enumerate(sorted(value, key=repr)):
            _hash_value(h, f"{path}{{{i}}}", item)
    elif value is None or isinstance(value, (bool, int, float, complex, str, bytes,
                                             torch.dtype, torch.device, torch.layout,
                                             torch.memory_format)):
        _feed(h, type(value).__name__)
        _feed(h, path)
        _feed(h, value if isinstance(value, bytes) else repr(value))
    else:  # An object without a stable byte form: only its type is covered.
        _feed(h, "object")
        _feed(h, path)
        _feed(h, f"{type(value).__module__}.{type(value).__qualname__}")


def snapshot_digest(snapshot: Mapping[str, Any]) -> str:
    """Hex sha256 of a snapshot dict's content (the ``SNAPSHOT_DIGEST_KEY`` entry excluded).

    Every tensor and numpy array contributes its dotted name, dtype, shape and raw bytes
    (CUDA tensors are copied to the host); ints, floats, strings, bools and None contribute
    their value; dict entries are visited in sorted key order. Equal content gives the same
    digest whatever device the tensors live on and in whatever order the dict was built.
    """
    if not isinstance(snapshot, Mapping):
        raise TypeError(f"a snapshot is a dict of entries, got {type(snapshot).__name__}")
    h = hashlib.sha256()
    _hash_value(h, "", {k: v for k, v in snapshot.items() if k != SNAPSHOT_DIGEST_KEY})
    return h.hexdigest()


def _numpy_safe_globals() -> list[Any]:
    """The numpy reconstructors ``weights_only`` loading needs for arrays and numpy scalars
    (data only: no callable beyond array construction is allowed), and ``_codecs.encode``,
    through which pickle protocol 2 (``torch.save``'s) writes the bytes inside them: torch
    2.5+ allows it by default, 2.4 does not."""
    core = getattr(np, "_core", None) or np.core
    names = [codecs.encode, core.multiarray._reconstruct, core.multiarray.scalar, np.ndarray,
             np.dtype]
    return names + [type(np.dtype(code)) for code in "?bBhHiIlLqQefdgFDGSUV"]


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _reason(error: BaseException) -> str:
    """The informative part of a ``torch.load`` error, as one short line.

    torch's messages run to paragraphs of advice meant for its own users (re-run with
    ``weights_only=False``, "Please file an issue", ...): of a weights-only unpickler error
    only what follows ``WeightsUnpickler error:`` is kept (e.g. ``Unsupported operand 144``
    or ``Unsupported global: GLOBAL print was not an allowed global by default``), and of
    any other error the first sentence of its first line, after the exception's name."""
    text = _ANSI.sub("", str(error))
    marker = "WeightsUnpickler error:"
    if marker in text:
        after = [line.strip() for line in text.split(marker, 1)[1].splitlines()]
        detail = next((line for line in after if line), "")
        return detail.split(". ")[0].rstrip(".") or "unsupported content"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    first = lines[0].split(". ")[0].rstrip(".") if lines else ""
    return f"{type(error).__name__}: {first}" if first else type(error).__name__


def load_snapshot(path: str | os.PathLike,
                  map_location: str | torch.device | Callable[..., Any] | dict | None = "cpu"
                  ) -> dict[str, Any]:
    """Load a snapshot written by ``logger.save_itr_params`` and verify its digest.

    Loads with ``torch.load(path, map_location=map_location, weights_only=True)`` (tensors,
    numpy arrays, containers and plain values only; no code runs while unpickling), then
    recomputes :func:`snapshot_digest` and compares it with the one stored at save time.
    Returns the snapshot dict without the digest entry. Raises
    :class:`SnapshotCorruptError` naming the file when it is truncated or cannot be
    unpickled, is not a snapshot dict, or its content differs from what was saved; a missing
    file raises ``FileNotFoundError``. A snapshot without a stored digest (saved by an older
    rlfast) loads with a ``UserWarning``, unverified.
    """
    import torch

    from rlfast.utils.torch_compat import safe_globals

    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(errno.ENOENT, "no snapshot file", path)
    try:
        with safe_globals(_numpy_safe_globals()), warnings.catch_warnings():
            # A pickle that torch.save did not write (protocol 4 or 5) draws a warning
            # before it fails or loads: the error below, or the digest check, says more.
            warnings.filterwarnings("ignore", message="Detected pickle protocol",
                                    category=UserWarning)
            snapshot = torch.load(path, map_location=map_location, weights_only=True)
    except (FileNotFoundError, IsADirectoryError, PermissionError):
        raise
    except Exception as e:  # A damaged file surfaces as RuntimeError, OSError or pickle errors.
        raise SnapshotCorruptError(
            f"{path} is not a valid rlfast snapshot: it is truncated, corrupt, or holds "
            f"content that does not load safely (weights_only=True): {_reason(e)}. Use an "
            f"intact snapshot (an earlier itr_<n>.pkl, or rerun the training)") from e
    if not isinstance(snapshot, dict):
        raise SnapshotCorruptError(f"snapshot {path} holds a {type(snapshot).__name__}, not "
                                   f"the dict of entries that save_itr_params writes")
    stored = snapshot.pop(SNAPSHOT_DIGEST_KEY, None)
    if stored is None:
        warnings.warn(f"snapshot {path} has no {SNAPSHOT_DIGEST_KEY!r} entry (saved before "
                      f"rlfast stored digests); loading it without an integrity check",
                      UserWarning, stacklevel=2)
        return snapshot
    actual = snapshot_digest(snapshot)
    if not isinstance(stored, str) or stored != actual:
        raise SnapshotCorruptError(
            f"snapshot {path} is corrupt: the sha256 of its content ({actual[:16]}...) differs "
            f"from the one stored when it was saved ({str(stored)[:16]}...), so the file was "
            f"damaged or altered on disk. Use an intact snapshot (an earlier itr_<n>.pkl, or "
            f"rerun the training)")
    return snapshot
