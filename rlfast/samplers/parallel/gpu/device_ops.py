"""The CUDA calls the action server makes, behind one small interface.

:class:`~rlfast.samplers.parallel.gpu.inference.DeviceGroup` stages a worker group's inputs on
the device, runs the agent there and copies the actions back through an object with this
interface, so the same staging, capture and synchronisation logic runs on the CPU in tests with
a recording stand-in (``tests/samplers/_fake_cuda.py``), and on CUDA with :class:`CudaOps`:

- ``device``: where the staged tensors live; ``pins_host_memory``: whether the shared step
  buffer should be page-locked for it;
- ``stream_context()``: the context every staged operation runs in (the server's own stream);
- ``follow_caller()``: once per batch, make the server's stream wait for work the caller's
  stream already queued (parameter updates), without blocking the host;
- ``device_block(nbytes)``: a uint8 device tensor (the device mirror of a group's block);
- ``copy(dst, src)``: one asynchronous copy (``non_blocking``; a DMA from page-locked memory);
- ``new_event()``: an event with ``record()`` (on the server's stream), ``query()`` (done yet?,
  never blocks) and ``synchronize()`` (the one host synchronisation per served step);
- ``capture(fn)``: warm ``fn`` up and capture it into a CUDA graph; returns an object whose
  ``replay()`` re-runs the captured work; raises when ``fn`` cannot be captured.
"""
from __future__ import annotations

import contextlib
from typing import Any, Callable

import torch

__all__ = ["CudaOps", "CAPTURE_WARMUP_STEPS"]

CAPTURE_WARMUP_STEPS = 3  # eager runs on the capture stream before capturing (lazy inits)


class _CudaEvent:
    """A CUDA event recorded on the server's stream."""

    def __init__(self, stream: torch.cuda.Stream):
        self._stream = stream
        self._event = torch.cuda.Event()

    def record(self) -> None:
        """Mark the point of the server's stream reached by the work queued so far."""
        self._event.record(self._stream)

    def query(self) -> bool:
        """Whether the device has passed the mark (never blocks)."""
        return self._event.query()

    def synchronize(self) -> None:
        """Block the host until the device has passed the mark."""
        self._event.synchronize()


class CudaOps:
    """:mod:`torch.cuda` behind the interface above, on one stream of its own.

    The server's stream keeps its copies and graph replays from queueing behind a learner's
    work on the default stream (the overlapped runner trains while it samples).
    ``warmup_steps`` eager runs on a side stream precede each capture (lazy initialisation
    such as cuBLAS handles and cuDNN plans must not happen while capturing), and warm-up and
    capture share that side stream, as torch's CUDA-graph notes recommend.
    """

    pins_host_memory = True

    def __init__(self, device: torch.device, warmup_steps: int = CAPTURE_WARMUP_STEPS):
        self.device = torch.device(device)
        self.stream = torch.cuda.Stream(self.device)
        self.warmup_steps = int(warmup_steps)

    def stream_context(self) -> contextlib.AbstractContextManager:
        """Make the server's stream the current one."""
        return torch.cuda.stream(self.stream)

    def follow_caller(self) -> None:
        """Order the server's stream after the work the caller's stream queued so far."""
        self.stream.wait_stream(torch.cuda.current_stream(self.device))

    def device_block(self, nbytes: int) -> torch.Tensor:
        """A zeroed uint8 tensor of ``nbytes`` on the device."""
        return torch.zeros(int(nbytes), dtype=torch.uint8, device=self.device)

    @staticmethod
    def copy(dst: torch.Tensor, src: torch.Tensor) -> None:
        """Queue ``dst.copy_(src)`` without waiting for it."""
        dst.copy_(src, non_blocking=True)

    def new_event(self) -> _CudaEvent:
        """An event on the server's stream."""
        return _CudaEvent(self.stream)

    def capture(self, fn: Callable[[], Any]) -> torch.cuda.CUDAGraph:
        """``fn`` warmed up on a side stream, then captured; raises when it cannot be."""
        side = torch.cuda.Stream(self.device)
        side.wait_stream(self.stream)
        caller_stream = torch.cuda.current_stream(self.device)
        try:
            with torch.cuda.stream(side):
                for _ in range(self.warmup_steps):
                    fn()
            graph = torch.cuda.CUDAGraph()
            # thread_local: another thread's CUDA calls (a learner training meanwhile) are
            # not errors of this capture.
            with torch.cuda.graph(graph, stream=side, capture_error_mode="thread_local"):
                fn()
        except BaseException:
            # A failed capture_end leaves torch.cuda.graph's stream context entered.
            torch.cuda.set_stream(caller_stream)
            raise
        finally:
            self.stream.wait_stream(side)
        return graph
