"""Non-finite (NaN / inf) detection: one vectorized pass, one error type, one message format.

Used at three boundaries: the sampler checks each ``[T, B]`` batch of observations and rewards
once (``check_batch_finite``), every algorithm checks its losses and gradient norms
(``check_scalars_finite``), and the logger refuses to save a snapshot whose tensors are not
all finite (``nonfinite_entries``). Integer arrays (uint8 frames, discrete actions) cannot hold
NaN or inf and are skipped without a pass over their data.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Iterable

import numpy as np
import torch

__all__ = ["NonFiniteError", "first_nonfinite", "check_batch_finite", "check_scalars_finite",
           "nonfinite_entries", "raise_if_inputs_nonfinite"]


class NonFiniteError(FloatingPointError):
    """A NaN or inf reached a place where it would silently corrupt a run."""


def _is_float(array: Any) -> bool:
    if isinstance(array, torch.Tensor):
        return array.is_floating_point() or array.is_complex()
    return np.issubdtype(np.asarray(array).dtype, np.inexact)


def first_nonfinite(array: Any) -> tuple[int, ...] | None:
    """Index of the first NaN / inf element of ``array`` (numpy array or tensor) in C order,
    or None when every element is finite (always None for integer and bool arrays)."""
    if not _is_float(array):
        return None
    if isinstance(array, torch.Tensor):
        array = array.detach()
        bad = ~torch.isfinite(array)
        if not bool(bad.any()):
            return None
        flat = int(torch.nonzero(bad.reshape(-1))[0, 0])
        return tuple(int(i) for i in np.unravel_index(flat, tuple(array.shape)))
    array = np.asarray(array)
    finite = np.isfinite(array)
    if finite.all():
        return None
    flat = int(np.argmin(finite.reshape(-1)))
    return tuple(int(i) for i in np.unravel_index(flat, array.shape))


def _leaves(prefix: str, value: Any) -> Iterable[tuple[str, Any]]:
    """(dotted name, array) for every array leaf of a namedarraytuple / namedtuple / array."""
    if value is None:
        return
    fields = getattr(value, "_fields", None)
    if fields is not None:
        for name, item in zip(fields, value):
            yield from _leaves(f"{prefix}.{name}" if prefix else name, item)
    else:
        yield prefix, value


def check_batch_finite(batch: Any, name: str, itr: int | None = None,
                       env_offset: int = 0) -> None:
    """Raise :class:`NonFiniteError` if any float leaf of ``batch`` (leading dims ``[T, B]``)
    holds a NaN or inf, naming the field, the time step, the environment index (plus
    ``env_offset``) and the iteration."""
    for field, array in _leaves(name, batch):
        where = first_nonfinite(array)
        if where is None:
            continue
        value = array[where]
        step = f"step {where[0]}" if len(where) > 0 else "the scalar"
        env = f", environment {where[1] + env_offset}" if len(where) > 1 else ""
        element = f", element {where[2:]}" if len(where) > 2 else ""
        of_itr = f" of iteration {itr}" if itr is not None else ""
        raise NonFiniteError(
            f"non-finite {field} ({float(value)}) at {step}{of_itr}{env}{element}: the "
            "environment returned NaN or inf. Fix the environment (or clip/normalize it); "
            "set sampler.check_finite=False to skip this check")


def check_scalars_finite(values: Mapping[str, Any], owner: str, itr: int | None = None) -> None:
    """Raise :class:`NonFiniteError` naming the first of ``values`` (loss, gradient norm, ...;
    floats or 0-d tensors) that is NaN or inf. Call it on values the algorithm already brought
    to the host for its diagnostics, so the check adds no device synchronization."""
    for key, value in values.items():
        v = float(value)
        if not math.isfinite(v):
            of_itr = f" at iteration {itr}" if itr is not None else ""
            raise NonFiniteError(
                f"{owner}: {key} is {v}{of_itr}; training stopped before the non-finite "
                "update could reach the weights or a snapshot (check the learning rate, "
                "reward scale and the observations)")


def nonfinite_entries(state: Any, prefix: str = "") -> list[str]:
    """Dotted names of every float tensor / array in ``state`` (nested dicts, lists, tuples)
    that holds a NaN or inf; empty when all are finite."""
    found: list[str] = []
    if isinstance(state, (torch.Tensor, np.ndarray)):
        if first_nonfinite(state) is not None:
            found.append(prefix or "<value>")
    elif isinstance(state, Mapping):
        for key, value in state.items():
            found.extend(nonfinite_entries(value, f"{prefix}.{key}" if prefix else str(key)))
    elif isinstance(state, (list, tuple)):
        for i, value in enumerate(state):
            found.extend(nonfinite_entries(value, f"{prefix}[{i}]"))
    elif isinstance(state, float) and not math.isfinite(state):
        found.append(prefix or "<value>")
    return found


def raise_if_inputs_nonfinite(error: BaseException, inputs: Mapping[str, Any],
                              itr: int | None = None, step: int | None = None,
                              env_ids: Any = None) -> None:
    """Explain an agent that raised while acting: if its ``[B, ...]`` ``inputs`` (name ->
    array or tensor, e.g. observation and previous reward) hold a NaN or inf, raise
    :class:`NonFiniteError` naming the field, the step and the environment (``env_ids[b]``
    when given), chained to ``error``; otherwise return, and the caller re-raises ``error``.

    Called only on the failure path, so acting costs nothing extra: the agent usually meets a
    non-finite observation before the end-of-batch check does (a categorical policy fails
    on NaN probabilities)."""
    for name, array in inputs.items():
        where = first_nonfinite(array)
        if where is None:
            continue
        b = where[0] if where else 0
        env = env_ids[b] if env_ids is not None else b
        at = f"step {step}" if step is not None else "a step"
        of_itr = f" of iteration {itr}" if itr is not None else ""
        raise NonFiniteError(
            f"non-finite {name} ({float(array[where])}) at {at}{of_itr}, environment {env}: "
            f"the environment returned NaN or inf, and the agent failed on it "
            f"({type(error).__name__}: {error}). Fix the environment (or clip/normalize it)"
        ) from error
