"""Gradient steps that refuse non-finite updates without stalling the host on every step.

A replay learner takes many small gradient steps per ``optimize_agent`` call (DQN on Atari:
8 per sampler iteration, SAC on MuJoCo: one per environment step). Reading the loss and the
gradient norm on the host before each step, to refuse a NaN / inf one, costs a device
synchronisation apiece on a GPU: the host waits for the step's kernels to finish before it
can queue the next step's. :class:`GuardedSteps` keeps the guard and drops the waits:

- With an optimizer that can refuse a step on the device (a fused Adam / AdamW / SGD, whose
  kernel skips the update while its ``found_inf`` tensor is nonzero, the mechanism
  ``torch.amp.GradScaler`` drives), each step's finiteness is computed on the device and
  fed to ``found_inf``; the flag is sticky over the call, so from the first bad step on every
  step is refused, and the weights stay as they were before it. Each step's diagnostics stay
  on the device as one row, and :meth:`GuardedSteps.end` reads every row of the call at once
  and raises ``NonFiniteError`` naming the first bad step's value.
- Otherwise, or when the caller needs host values right after the step anyway (the new
  priorities of a host-side prioritized replay), the step's row, finite flag and those values
  come back in ONE read before the step, which is checked on the host as before.

Either way a gradient step reads the host at most once, and a call whose steps all go the
first way reads it once in all. An ``alarm`` given to :meth:`GuardedSteps.begin` (a device
flag that the call's work may raise, e.g. a device replay's failed draw) rides along with
every read of the call and raises its own error before any non-finite one.
"""
from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["GuardedSteps", "skips_on_device", "StepRecord", "stack_scalars", "step_unless_failed",
           "as_row"]


def skips_on_device(optimizer: torch.optim.Optimizer) -> bool:
    """Whether ``optimizer`` can refuse a non-finite step on the device: a fused optimizer
    (Adam, AdamW, SGD with ``fused=True``) that takes ``found_inf`` from a ``GradScaler``."""
    return bool(getattr(optimizer, "_step_supports_amp_scaling", False)) and all(
        group.get("fused") for group in optimizer.param_groups)


def step_unless_failed(optimizer: torch.optim.Optimizer, failed: torch.Tensor,
                       finite: torch.Tensor, found_inf: torch.Tensor | None = None) -> None:
    """One step of a fused ``optimizer`` that its kernel refuses once any step of the call was
    not finite: ``failed`` (a 0-d bool device tensor, sticky over the call) takes ``~finite``
    in place and feeds the optimizer's ``found_inf`` (``found_inf``: a static float32 tensor
    to copy it into, for a captured graph; else a new one). Nothing is read on the host."""
    torch.logical_or(failed, ~finite, out=failed)
    if found_inf is None:
        found_inf = failed.to(torch.float32)
    else:
        found_inf.copy_(failed)
    optimizer.found_inf = found_inf
    try:
        optimizer.step()
    finally:
        del optimizer.found_inf


@torch.no_grad()
def stack_scalars(values: Any) -> torch.Tensor:
    """0-d (or one-element) tensors as one float64 row, outside autograd: one stack, which
    promotes mixed dtypes, and one conversion."""
    values = [v if v.dim() == 0 else v.reshape(()) for v in values]
    return torch.stack(values).to(torch.float64)


def as_row(extra: Any) -> torch.Tensor:
    """Further diagnostics (a tensor, or a sequence of 0-d tensors) as a float64 row."""
    if isinstance(extra, torch.Tensor):
        return extra.detach().reshape(-1).to(torch.float64)
    return stack_scalars(extra)


class StepRecord:
    """One gradient step's host values after :meth:`GuardedSteps.end`: ``scalars`` (name ->
    float, in the order given) and ``extra`` (a float64 array, empty when none was given)."""

    __slots__ = ("scalars", "extra")

    def __init__(self, scalars: dict[str, float], extra: np.ndarray):
        self.scalars = scalars
        self.extra = extra


class _Lazy:
    """A step kept on the device: its scalars' tensors (``n_tail`` of them further
    diagnostics), its finite flag, and a further diagnostics tensor (or None)."""

    __slots__ = ("names", "values", "n_tail", "finite", "extra")

    def __init__(self, names: tuple, values: list, n_tail: int, finite: torch.Tensor,
                 extra: torch.Tensor | None):
        self.names, self.values, self.n_tail = names, values, n_tail
        self.finite, self.extra = finite, extra


class _Offsets:
    """Walks the one array :meth:`GuardedSteps.end` read: the program rows first, then every
    lazy step's scalars, their finite flags, and their extra tensors, in step order."""

    def __init__(self, flat: np.ndarray | None, rows: list, lazy: list):
        self.flat = flat
        self.row_at = 0
        self.scalar_at = sum(row.numel() for _, row, _ in rows)
        self.finite_at = self.scalar_at + sum(len(p.values) for p in lazy)
        self.extra_at = self.finite_at + len(lazy)

    def next_row(self, item: Any) -> tuple[tuple, np.ndarray, int]:
        """``(names, values, n_extra)`` of the next step, values laid out as a row (scalars,
        finite flag, extra diagnostics)."""
        flat = self.flat
        if isinstance(item, tuple):
            names, row, n_extra = item
            values = flat[self.row_at:self.row_at + row.numel()]
            self.row_at += row.numel()
            return names, values, n_extra
        n_named = len(item.values) - item.n_tail
        scalars = flat[self.scalar_at:self.scalar_at + len(item.values)]
        self.scalar_at += len(item.values)
        finite = flat[self.finite_at:self.finite_at + 1]
        self.finite_at += 1
        n_extra = item.n_tail
        tail = scalars[n_named:]
        if item.extra is not None:
            n_extra = item.extra.numel()
            tail = flat[self.extra_at:self.extra_at + n_extra]
            self.extra_at += n_extra
        return item.names, np.concatenate([scalars[:n_named], finite, tail]), n_extra


def _kept_value(item: Any, name: str) -> torch.Tensor:
    """The device tensor of the scalar ``name`` of a step kept on the device (a lazy step, or
    a program's ``(names, row, n_extra)``)."""
    if isinstance(item, tuple):
        names, row, _ = item
        return row[names.index(name)]
    return item.values[item.names.index(name)]


class GuardedSteps:
    """The guarded gradient steps of one ``optimize_agent`` call (see the module docstring).

    ``check_finite(itr, values)`` raises ``NonFiniteError`` naming the first non-finite of
    ``values`` (the algorithm's :meth:`~rlfast.algos.base.RLAlgorithm.check_finite`). Use::

        guard.begin()
        for each update:
            ... backward, clip ...
            host = guard.step(itr, scalars, checked, extra=..., read_now=...)
        records = guard.end(itr)
    """

    def __init__(self, optimizer: torch.optim.Optimizer,
                 check_finite: Callable[[int, Mapping[str, Any]], None]):
        self.optimizer = optimizer
        self.check_finite = check_finite
        self._pending: list = []
        self._failed: torch.Tensor | None = None
        self._also: dict[str, torch.Tensor] = {}
        self.also_values: dict[str, float] | None = None
        self._alarm: Any = None
        self._alarm_value = 0.0
        self.steps_applied = 0  # after end(): steps before the first non-finite one
        self._slices: dict = {}

    @property
    def skips_on_device(self) -> bool:
        """Whether steps are refused on the device (see :func:`skips_on_device`)."""
        return skips_on_device(self.optimizer)

    def begin(self, failed: torch.Tensor | None = None,
              also: Mapping[str, torch.Tensor] | None = None, alarm: Any = None) -> None:
        """Start a call: no step recorded, none failed. ``failed``: a 0-d bool device flag
        to share (a :class:`~rlfast.algos.graph_step.GraphStep`'s, so that its steps and the
        eager ones of the same call stop together), else one is made at the first step.
        ``also``: further named 0-d diagnostics of the whole call, read with its first host
        read (a host-checked step's, or :meth:`end`'s) into :attr:`also_values` (name ->
        float). ``alarm``: an object with ``flag`` (a 0-d device tensor that the call's work
        may set, zeroed here) and ``check(value)`` (raises for a non-zero read of it); the
        flag joins every host read of the call, and ``check`` runs before a non-finite step
        raises (e.g. :func:`~rlfast.replays.device_buffers.priority_alarm`)."""
        self._pending = []
        self._failed = failed
        self._also = dict(also or {})
        self.also_values = None
        self._alarm, self._alarm_value = alarm, 0.0
        if alarm is not None:
            alarm.flag.zero_()

    @property
    def _also_unread(self) -> bool:
        """Whether ``also`` diagnostics wait for their first read."""
        return bool(self._also) and self.also_values is None

    def _also_part(self, device: torch.device) -> list[torch.Tensor]:
        """The ``also`` diagnostics while unread, then the alarm's flag, as float64 rows for
        the next host read."""
        parts = [stack_scalars(self._also.values()).to(device)] if self._also_unread else []
        if self._alarm is not None:
            parts.append(self._alarm.flag.detach().reshape(1).to(device=device,
                                                                 dtype=torch.float64))
        return parts

    def _take_also(self, values: np.ndarray, parts: list) -> np.ndarray:
        """Split the ``also`` values and the alarm's flag off the end of a read that carried
        them (the flag's value is kept for :meth:`_sound_alarm`)."""
        if parts and self._alarm is not None:
            self._alarm_value, values, parts = float(values[-1]), values[:-1], parts[:-1]
        if not parts:
            return values
        n = len(self._also)
        self.also_values = dict(zip(self._also, values[len(values) - n:].tolist()))
        return values[:len(values) - n]

    def _sound_alarm(self) -> None:
        """Let the alarm raise if its flag was read non-zero."""
        if self._alarm is not None and self._alarm_value:
            self._alarm.check(self._alarm_value)

    def mean_of_last(self, name: str, n: int) -> float:
        """The mean of the scalar ``name`` over the last ``n`` steps recorded in this call:
        one host read, none when every one of them was read already (host-checked steps)."""
        items = self._pending[-n:]
        if all(isinstance(item, StepRecord) for item in items):
            return float(np.mean([item.scalars[name] for item in items]))
        kept = [_kept_value(item, name) for item in items if not isinstance(item, StepRecord)]
        values = [torch.tensor(item.scalars[name], dtype=torch.float64, device=kept[0].device)
                  if isinstance(item, StepRecord) else _kept_value(item, name) for item in items]
        return float(stack_scalars(values).mean())

    def step(self, itr: int, scalars: Mapping[str, torch.Tensor], checked: Sequence[str],
             extra: torch.Tensor | None = None,
             read_now: torch.Tensor | None = None) -> np.ndarray | None:
        """Take one optimizer step unless ``scalars[name]`` for a name in ``checked`` (the
        loss, the gradient norms) is NaN or inf.

        ``scalars``: the step's named 0-d diagnostics (device tensors); ``extra``: a tensor
        of further diagnostics kept with them (e.g. a subsample of TD errors); ``read_now``:
        a tensor whose host values the caller needs right after this step, returned as a
        float64 array (the step then reads the host once, before stepping, and raises at
        once if it was not finite). Without ``read_now``, and with an optimizer that
        :attr:`skips_on_device`, nothing is read: None is returned and the values wait for
        :meth:`end`.
        """
        names = tuple(scalars)
        if read_now is not None or not self.skips_on_device:
            head = stack_scalars(scalars.values())
            finite = torch.isfinite(head[self._checked_slice(names, tuple(checked))].sum())
            parts = [head, finite.to(torch.float64).reshape(1)]
            n_extra = 0
            if extra is not None:
                parts.append(as_row(extra))
                n_extra = parts[-1].numel()
            if read_now is not None:
                parts.append(read_now.detach().reshape(-1).to(device=head.device,
                                                              dtype=torch.float64))
            also = self._also_part(head.device)
            values = np.asarray(torch.cat(parts + also).tolist(), dtype=np.float64)  # one read
            values = self._take_also(values, also)
            self._sound_alarm()
            record = self._record(names, values[:len(names) + 1 + n_extra], n_extra)
            if values[len(names)] != 1.0:
                self.check_finite(itr, record.scalars)
            self.optimizer.step()
            self._pending.append(record)
            return values[len(names) + 1 + n_extra:] if read_now is not None else None
        # On the device: as few operations as a step allows; the rows are built at end()
        # (stacked outside autograd, so the tensors are kept as given).
        values = list(scalars.values())
        checked_values = [values[i] for i in self._checked_positions(names, tuple(checked))]
        with torch.no_grad():
            finite = torch.isfinite(sum(checked_values[1:], checked_values[0]))
        if self._failed is None:
            self._failed = torch.zeros((), dtype=torch.bool, device=finite.device)
        step_unless_failed(self.optimizer, self._failed, finite)
        if extra is None or isinstance(extra, torch.Tensor):
            self._pending.append(_Lazy(names, values, 0, finite, extra))
        else:  # 0-d diagnostics join the scalars' stack
            extra = list(extra)
            self._pending.append(_Lazy(names, values + extra, len(extra), finite, None))
        return None

    def record(self, itr: int, names: tuple, row: torch.Tensor, n_extra: int,
               read_now: torch.Tensor | None = None) -> np.ndarray | None:
        """Keep the row of a step a :class:`~rlfast.algos.graph_step.GraphStep` took (refused
        inside its program when not finite): ``row`` holds the scalars named ``names``, the
        finite flag and ``n_extra`` further values. ``read_now`` as in :meth:`step`: then the
        row comes back with it in one read, and a non-finite step raises at once."""
        if read_now is None:
            self._pending.append((names, row, n_extra))
            return None
        also = self._also_part(row.device)
        values = np.asarray(torch.cat([row, read_now.detach().reshape(-1).to(
            device=row.device, dtype=torch.float64)] + also).tolist(), dtype=np.float64)
        values = self._take_also(values, also)
        self._sound_alarm()
        record = self._record(names, values[:row.numel()], n_extra)
        if values[len(names)] != 1.0:
            self.check_finite(itr, record.scalars)
        self._pending.append(record)
        return values[row.numel():]

    def _checked_positions(self, names: tuple, checked: tuple) -> list[int]:
        """Where the ``checked`` scalars sit among ``names``."""
        found = self._checked_slice(names, checked)
        return list(range(found.start, found.stop)) if isinstance(found, slice) else found

    def _checked_slice(self, names: tuple, checked: tuple) -> Any:
        """Where the ``checked`` scalars sit in the row: a slice when they are contiguous (a
        sum over it is non-finite exactly when one of them is), else their positions."""
        key = (names, checked)
        found = self._slices.get(key)
        if found is None:
            missing = [name for name in checked if name not in names]
            if missing:
                raise KeyError(f"checked names {missing} are not among the scalars {names}")
            positions = [names.index(name) for name in checked]
            contiguous = positions == list(range(positions[0], positions[0] + len(positions)))
            found = slice(positions[0], positions[-1] + 1) if contiguous else positions
            self._slices[key] = found
        return found

    def _also_device(self) -> torch.device:
        return next(iter(self._also.values())).device if self._also else torch.device("cpu")

    @staticmethod
    def _record(names: tuple, values: np.ndarray, n_extra: int) -> StepRecord:
        scalars = dict(zip(names, values[:len(names)].tolist()))
        return StepRecord(scalars, values[len(names) + 1:len(names) + 1 + n_extra])

    def end(self, itr: int) -> list[StepRecord]:
        """The host values of every step of the call, in order, after one read of those kept
        on the device; raises ``NonFiniteError`` for the first step that was not finite (the
        optimizer refused it and every later one)."""
        pending, self._pending = self._pending, []
        self.steps_applied = len(pending)
        rows = [p for p in pending if isinstance(p, tuple)]
        lazy = [p for p in pending if isinstance(p, _Lazy)]
        parts = [row for _, row, _ in rows]
        if lazy:  # every kept scalar in one stack, the flags in another, the extras joined
            parts.append(stack_scalars([v for p in lazy for v in p.values]))
            parts.append(torch.stack([p.finite for p in lazy]).to(torch.float64))
            extras = [as_row(p.extra) for p in lazy if p.extra is not None]
            parts.extend(extras)
        also = self._also_part(parts[0].device if parts else self._also_device()) \
            if parts or self._also_unread else []  # no step: nothing drawn, nothing to read
        flat = None
        if parts or also:
            flat = self._take_also(np.asarray(torch.cat(parts + also).tolist(),
                                              dtype=np.float64), also)
        offsets = _Offsets(flat, rows, lazy)
        records = []
        for item in pending:
            if isinstance(item, StepRecord):
                records.append(item)
                continue
            names, values, n_extra = offsets.next_row(item)
            record = self._record(names, values, n_extra)
            if values[len(names)] != 1.0:
                self.steps_applied = len(records)
                self._sound_alarm()
                self.check_finite(itr, record.scalars)
            records.append(record)
        self._sound_alarm()
        return records

    def end_counted(self, itr: int, algo: Any, counter_at_begin: int) -> list[StepRecord]:
        """:meth:`end`, and on a non-finite step set ``algo.update_counter`` back to the
        steps the optimizer really applied (``counter_at_begin`` plus those before it) before
        the error propagates."""
        try:
            return self.end(itr)
        except Exception:
            algo.update_counter = counter_at_begin + self.steps_applied
            raise
