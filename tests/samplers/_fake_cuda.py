"""A CPU stand-in for the action server's CUDA operations (``device_ops.CudaOps``' interface).

``FakeCudaOps`` drives the CUDA branch of ``DeviceGroup`` on a machine without a GPU: its
"device" is separate CPU memory (so a copy the server forgot leaves stale data there and shows
up in the served actions), copies and events are recorded, ``synchronize`` calls are counted,
and ``capture`` warms the function up like ``CudaOps.capture`` and then "captures" it under a
``HostSyncCounter``: a host read inside it fails the capture, as it does on CUDA, and so does
an injected ``capture_error``. The returned graph's ``replay`` runs the function again.
``ready_after`` makes each recorded event report "not done" to that many ``query`` calls
before "done", standing in for device work still under way.
"""
from __future__ import annotations

import contextlib

import torch

from rlfast.samplers.parallel.gpu.device_ops import CAPTURE_WARMUP_STEPS
from rlfast.utils.host_sync import HostSyncCounter


class FakeEvent:
    def __init__(self, ops: "FakeCudaOps"):
        self.ops = ops
        self._polls_left = 0

    def record(self) -> None:
        self.ops.log.append("record")
        self._polls_left = self.ops.ready_after

    def query(self) -> bool:
        if self._polls_left > 0:
            self._polls_left -= 1
            return False
        return True

    def synchronize(self) -> None:
        self.ops.log.append("synchronize")
        self.ops.syncs += 1
        self._polls_left = 0


class FakeGraph:
    def __init__(self, fn):
        self.fn = fn
        self.replays = 0

    def replay(self) -> None:
        self.replays += 1
        self.fn()


class FakeCudaOps:
    pins_host_memory = True

    def __init__(self, capture_error: Exception | None = None, ready_after: int = 0):
        self.device = torch.device("cpu")
        self.capture_error = capture_error
        self.ready_after = ready_after
        self.log: list = []
        self.blocks: list[torch.Tensor] = []
        self.copies: list[tuple[str, int]] = []  # (direction, nbytes)
        self.graphs: list[FakeGraph] = []
        self.syncs = 0
        self.capture_attempts = 0

    def stream_context(self):
        return contextlib.nullcontext()

    def follow_caller(self) -> None:
        self.log.append("follow_caller")

    def device_block(self, nbytes: int) -> torch.Tensor:
        block = torch.full((int(nbytes),), 0xAB, dtype=torch.uint8)  # garbage until copied
        self.blocks.append(block)
        return block

    def _on_device(self, tensor: torch.Tensor) -> bool:
        ptr = tensor.untyped_storage().data_ptr()
        return any(ptr == b.untyped_storage().data_ptr() for b in self.blocks)

    def copy(self, dst: torch.Tensor, src: torch.Tensor) -> None:
        direction = "to_device" if self._on_device(dst) else "from_device"
        self.copies.append((direction, dst.numel() * dst.element_size()))
        self.log.append(direction)
        dst.copy_(src)

    def new_event(self) -> FakeEvent:
        return FakeEvent(self)

    def capture(self, fn):
        self.capture_attempts += 1
        for _ in range(CAPTURE_WARMUP_STEPS):
            fn()
        with HostSyncCounter() as reads:
            fn()
        if reads.count:
            raise RuntimeError("operation not permitted when stream is capturing "
                               f"(host reads: {reads.report()})")
        if self.capture_error is not None:
            raise self.capture_error
        graph = FakeGraph(fn)
        self.graphs.append(graph)
        return graph


class FakeCudart:
    """Records ``cudaHostRegister`` / ``cudaHostUnregister`` calls; ``fail_with`` makes
    registering return that CUDA error code."""

    def __init__(self, fail_with: int = 0):
        self.fail_with = fail_with
        self.registered: list[tuple[int, int, int]] = []
        self.unregistered: list[int] = []

    def cudaHostRegister(self, ptr: int, nbytes: int, flags: int) -> int:  # noqa: N802
        self.registered.append((ptr, nbytes, flags))
        return self.fail_with

    def cudaHostUnregister(self, ptr: int) -> int:  # noqa: N802
        self.unregistered.append(ptr)
        return 0
