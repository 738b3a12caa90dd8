"""Count the places where Python reads a value out of a tensor: host synchronisations.

On a GPU every such read (``.item()``, ``float(t)``, ``bool(t)``, ``if t:``, ``.tolist()``,
``.cpu()``, ``.numpy()``, a data-dependent shape such as ``nonzero`` or boolean-mask
indexing) stalls the host until the device has drained its queue, so a learner that does it
inside its update loop leaves the GPU idle between kernels. On the CPU the same calls cost
nothing, but they are the same calls: :class:`HostSyncCounter` intercepts them with a
``TorchFunctionMode``, so a test on a CPU-only machine can bound what the learner will do on
a GPU.

Usage::

    with HostSyncCounter() as syncs:
        algo.optimize_agent(itr, samples)
    assert syncs.count <= 2, syncs.report()

What is counted is a *call site* that needs a host value, whatever the tensor's device:
``.cpu()`` of a tensor already on the CPU counts (on the GPU it would be a device-to-host
copy). ``.to("cpu")`` and ``.to(device)`` do not count: on the GPU the learner's inputs move
*to* the device that way, which is asynchronous. Calls made by torch itself from C++ are not
seen; calls made by torch's Python code are (for example ``Tensor.item`` inside a
non-capturable optimizer step), which is what a Python-level read on the GPU would cost.
"""
from __future__ import annotations

import traceback
from collections import Counter
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["HostSyncCounter", "SYNC_FUNCTIONS"]

# Reads that need the tensor's value on the host, or a shape that depends on its values.
_SYNC_METHODS = ("item", "tolist", "cpu", "numpy", "__bool__", "__float__", "__int__",
                 "__index__", "__complex__", "nonzero", "masked_select", "unique",
                 "unique_consecutive", "__array__", "equal", "allclose", "is_nonzero")
SYNC_FUNCTIONS: frozenset = frozenset(
    f for f in [getattr(torch.Tensor, name, None) for name in _SYNC_METHODS]
    + [torch.nonzero, torch.masked_select, torch.unique, torch.unique_consecutive,
       torch.equal, torch.allclose, torch.is_nonzero, torch.argwhere, torch.where]
    if f is not None)


def _is_boolean_mask_index(func: Any, args: tuple) -> bool:
    """``x[mask]`` with a bool tensor: the result's size depends on the mask's values."""
    if func is not torch.Tensor.__getitem__ or len(args) < 2:
        return False
    index = args[1]
    items = index if isinstance(index, tuple) else (index,)
    return any(isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in items)


class HostSyncCounter(TorchFunctionMode):
    """A ``TorchFunctionMode`` that counts host synchronisations (see the module docstring).

    ``count`` is the number seen; ``sites`` counts them by the innermost frame outside torch
    that made them (``file:line function``), and :meth:`report` lists those, so a failing
    bound says where the reads are. ``torch.where`` counts only in its one-argument form
    (which is ``nonzero``).
    """

    def __init__(self) -> None:
        super().__init__()
        self.count = 0
        self.sites: Counter = Counter()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if self._is_sync(func, args, kwargs):
            self.count += 1
            self.sites[self._site()] += 1
        return func(*args, **kwargs)

    @staticmethod
    def _is_sync(func: Any, args: tuple, kwargs: dict) -> bool:
        if func is torch.where:
            return len(args) + len(kwargs) == 1
        return func in SYNC_FUNCTIONS or _is_boolean_mask_index(func, args)

    @staticmethod
    def _site() -> str:
        frames = traceback.extract_stack()[:-2]
        torch_dir = torch.__file__.rsplit("/", 1)[0]
        for frame in reversed(frames):
            if not frame.filename.startswith(torch_dir) and frame.filename != __file__:
                return f"{frame.filename}:{frame.lineno} {frame.name}"
        return "<torch>"

    def report(self) -> str:
        """The sites, most frequent first: ``count  file:line function`` per line."""
        return "\n".join(f"{n:5d}  {site}" for site, n in self.sites.most_common())
