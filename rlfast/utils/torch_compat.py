"""The torch APIs that changed inside the releases rlfast supports (``setup.py``'s floor up
to the newest 2.x), each chosen by what the installed torch offers, never by its version
string: a cluster image's build, a nightly or a backport reports a version that says little
about its keywords. Every other torch API rlfast calls exists at the floor (2.4), checked by
``scripts/check_torch_floor.sh``: fused Adam/AdamW on the CPU (new in 2.4),
``torch._foreach_lerp_``/``_foreach_copy_``, ``torch.autocast`` on "cpu" and "cuda" with
bfloat16, ``weights_only`` loading, ``torch.backends.cpu.get_cpu_capability`` and the
``torch.distributed`` calls of ``rlfast.utils.distributed``; rlfast calls no
``torch.compile``.

- :func:`wrap_ddp`: ``DistributedDataParallel`` without a buffer broadcast at every forward.
  torch 2.13 spells it ``forward_sync_buffers=False`` (and deprecates ``broadcast_buffers``);
  earlier releases know only ``broadcast_buffers=False``, which also skips the buffers'
  broadcast at construction, so that broadcast is made here instead.
- :func:`safe_globals`: the allow-list for ``torch.load(weights_only=True)``, a context
  manager from torch 2.5 (``torch.serialization.safe_globals``), a process-wide list in 2.4
  (``add_safe_globals``).
"""
from __future__ import annotations

import contextlib
import functools
import inspect
from collections.abc import Iterator, Sequence
from typing import Any

import torch

__all__ = ["ddp_keywords", "wrap_ddp", "safe_globals"]


@functools.lru_cache(maxsize=None)
def _keywords_of(cls: type) -> frozenset[str]:
    return frozenset(inspect.signature(cls.__init__).parameters)


def ddp_keywords() -> frozenset[str]:
    """The keyword arguments the installed ``DistributedDataParallel`` constructor takes
    (looked up at each call, so a patched class is seen)."""
    return _keywords_of(torch.nn.parallel.DistributedDataParallel)


def _broadcast_buffers_once(module: torch.nn.Module, src: int = 0) -> None:
    """Every buffer of ``module`` from rank ``src`` to the others, once (what DDP does at
    construction with ``forward_sync_buffers=False``)."""
    import torch.distributed as dist

    for buffer in module.buffers():
        dist.broadcast(buffer.data, src=src)


def wrap_ddp(module: torch.nn.Module, device: torch.device) -> torch.nn.Module:
    """``module`` in ``DistributedDataParallel`` on ``device`` (torch.distributed must be
    initialized). Parameters and buffers are synchronized from rank 0 at wrapping; buffers
    are not broadcast again at each forward (rlfast's only buffers are running observation
    statistics, which every rank updates alike from pooled moments).

    The keyword that turns the per-forward broadcast off is picked by what the installed
    constructor accepts: ``forward_sync_buffers`` (torch >= 2.13), else ``broadcast_buffers``
    followed by one explicit broadcast of the buffers, so both give the same behaviour.
    """
    DDP = torch.nn.parallel.DistributedDataParallel
    placement: dict[str, Any] = {}
    if device.type != "cpu":
        placement = dict(device_ids=[device.index], output_device=device.index)
    keywords = ddp_keywords()
    if "forward_sync_buffers" in keywords:
        return DDP(module, forward_sync_buffers=False, **placement)
    if "broadcast_buffers" not in keywords:
        raise TypeError("this torch's DistributedDataParallel takes neither "
                        "forward_sync_buffers nor broadcast_buffers; rlfast cannot turn off "
                        f"its per-forward buffer broadcast (torch {torch.__version__})")
    wrapped = DDP(module, broadcast_buffers=False, **placement)
    _broadcast_buffers_once(module)
    return wrapped


@contextlib.contextmanager
def safe_globals(allowed: Sequence[Any]) -> Iterator[None]:
    """Allow ``allowed`` while ``torch.load(weights_only=True)`` unpickles inside the block:
    scoped where torch has ``torch.serialization.safe_globals`` (2.5+), registered for the
    process where it has only ``add_safe_globals`` (2.4; the list is data constructors
    only, so keeping it registered widens nothing that matters)."""
    serialization = torch.serialization
    if hasattr(serialization, "safe_globals"):
        with serialization.safe_globals(list(allowed)):
            yield
        return
    serialization.add_safe_globals(list(allowed))
    yield

