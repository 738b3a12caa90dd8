"""Page-locking host memory in place, so host-device copies from and to it run asynchronously.

A copy between the GPU and ordinary (pageable) host memory goes through a driver staging
buffer and blocks the host; from page-locked ("pinned") memory it is a direct DMA that a
``non_blocking`` copy only enqueues. ``torch.empty(..., pin_memory=True)`` allocates new pinned
memory, which forked sampler workers cannot see; memory that already exists, such as the OS
shared-memory step buffer the workers write, is page-locked where it lies with the CUDA
runtime's ``cudaHostRegister`` (reached through ``torch.cuda.cudart()``, as torch's own
``torch.cuda._pin_memory_utils`` does for shared-memory tensors) and must be unregistered
before the memory is freed.

:class:`HostMemoryRegistration` does that bookkeeping: it registers whole arrays (a page-aligned
block from ``rlfast.utils.buffer.np_block`` is one region no other allocation shares a page
with), keeps each array alive while it is registered, and unregisters everything at
:meth:`~HostMemoryRegistration.close` or when it is dropped (not at interpreter exit, when the
CUDA context may already be gone and the process's memory goes with it anyway).
"""
from __future__ import annotations

import weakref
from typing import Any

import numpy as np

__all__ = ["HostMemoryRegistration", "HostRegisterError"]

HOST_REGISTER_DEFAULT = 0  # cudaHostRegisterDefault


class HostRegisterError(RuntimeError):
    """``cudaHostRegister`` refused a region (the message names it and the CUDA error code)."""


def _cuda_runtime() -> Any:
    import torch  # the CUDA runtime module is only reached when something is registered

    return torch.cuda.cudart()


def _unregister(cudart: Any, entries: dict) -> None:
    for ptr in list(entries):
        cudart.cudaHostUnregister(ptr)
        del entries[ptr]


class HostMemoryRegistration:
    """Page-locks numpy arrays in place with ``cudaHostRegister`` and unregisters them.

    ``cudart``: the CUDA runtime module (default ``torch.cuda.cudart()``, looked up at the
    first registration); tests pass a stand-in that records the calls. ``registered`` lists
    ``(pointer, nbytes)`` of what is registered now.
    """

    def __init__(self, cudart: Any = None, flags: int = HOST_REGISTER_DEFAULT):
        self._cudart = cudart
        self.flags = int(flags)
        self._entries: dict[int, tuple[int, np.ndarray]] = {}
        self._finalizer: weakref.finalize | None = None

    @property
    def registered(self) -> list[tuple[int, int]]:
        """``(pointer, nbytes)`` of every region registered now, in registration order."""
        return [(ptr, nbytes) for ptr, (nbytes, _) in self._entries.items()]

    def register(self, array: np.ndarray) -> None:
        """Page-lock the memory of ``array`` (C-contiguous, non-empty) in place; raises
        :class:`HostRegisterError` when the runtime refuses. Registering the same memory twice
        is a no-op."""
        if not isinstance(array, np.ndarray) or not array.flags["C_CONTIGUOUS"]:
            raise ValueError("HostMemoryRegistration.register needs a C-contiguous numpy "
                             f"array; got {type(array).__name__}")
        ptr, nbytes = int(array.__array_interface__["data"][0]), int(array.nbytes)
        if nbytes == 0:
            raise ValueError("HostMemoryRegistration.register: the array is empty")
        if ptr in self._entries:
            return
        if self._cudart is None:
            self._cudart = _cuda_runtime()
        code = int(self._cudart.cudaHostRegister(ptr, nbytes, self.flags))
        if code != 0:
            raise HostRegisterError(f"cudaHostRegister({ptr:#x}, {nbytes} bytes, flags "
                                    f"{self.flags}) failed with cudaError {code}")
        self._entries[ptr] = (nbytes, array)
        if self._finalizer is None:
            self._finalizer = weakref.finalize(self, _unregister, self._cudart, self._entries)
            self._finalizer.atexit = False

    def close(self) -> None:
        """Unregister every region (idempotent)."""
        if self._finalizer is not None:
            self._finalizer()  # calls _unregister once, then detaches
            self._finalizer = None
