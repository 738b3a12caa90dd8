"""Where a replay learner keeps its replay: ``replay_device`` of the DQN family and DDPG/TD3/SAC.

- ``"host"``: numpy arrays in host memory (the buffers of :mod:`rlfast.replays`); each batch is
  sampled and gathered by the host and copied to the learner's device when it is used. The
  only choice on a CPU-only machine, and reproducible bit for bit with the serial sampler.
- ``"device"``: every array, the index sampling, n-step returns, frame stacking and the
  priority tree live on the learner's device (``make_replay_buffer(device=...)``): a batch
  costs a few kernels and no host work. Needs the replay to fit in device memory (a million
  Atari frames stored once are about 7 GB as uint8).
- ``"prefetch"``: the host replay, with a thread that samples and gathers the next batches
  into page-locked memory and copies them to the device ahead of use
  (:class:`~rlfast.replays.prefetch.PrefetchingReplay`), for GPUs whose memory is short.
  Priorities reach the tree a few batches late, and appends interleave with the thread's
  draws, so runs are not reproducible bit for bit.
- ``"auto"`` (default): ``"host"`` when the learner is on the CPU; on CUDA ``"device"`` when
  the replay takes at most :data:`DEVICE_REPLAY_FRACTION` of the device's free memory, else
  ``"prefetch"``.

An asynchronous run whose optimizer is the only process to append to and sample from replay
(``copier="optimizer"``, one optimizer rank: the default) builds its replay in the optimizer
process, on its device, with the same choices. One that shares a host replay between
processes (a copier process, or several optimizer ranks) refuses ``"device"``, and there
``"auto"`` means ``"prefetch"`` on CUDA (each optimizer process prefetches from the shared
buffer).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlfast.replays import PrefetchingReplay, make_replay_buffer
from rlfast.utils.checks import check_choice
from rlfast.utils.logging import logger

__all__ = ["REPLAY_DEVICES", "DEVICE_REPLAY_FRACTION", "estimate_replay_bytes",
           "resolve_replay_device", "takes_device_priorities", "build_replay_buffer",
           "prefetched", "replay_to_save", "close_replay"]

REPLAY_DEVICES = ("auto", "host", "device", "prefetch")
# Share of the free device memory a device replay may take under "auto": the rest is left to
# the networks, their optimizer state, activations and the allocator's cache.
DEVICE_REPLAY_FRACTION = 0.5


def _leaf_bytes(example: Any) -> int:
    if example is None:
        return 0
    if hasattr(example, "_fields"):
        return sum(_leaf_bytes(getattr(example, f)) for f in example._fields)
    return int(np.asarray(example).nbytes)


def estimate_replay_bytes(example: Any, size: int, frame_based: bool = False,
                          n_step_return: int = 1) -> int:
    """Bytes a replay of ``size`` steps of ``example`` takes (close to the buffer's own
    ``nbytes``, computed before anything is allocated): every field per step, the
    observation as one frame per step when ``frame_based``, plus n-step returns."""
    total = _leaf_bytes(example)
    if frame_based and hasattr(example, "observation"):
        observation = np.asarray(example.observation)
        total -= observation.nbytes
        total += observation.nbytes // max(1, observation.shape[0]) + 1  # newest frame + bits
    if n_step_return > 1:
        total += 4 + 1  # float32 return, done_n
    return int(total) * int(size)


def resolve_replay_device(setting: str, device: torch.device | str | None,
                          estimated_bytes: int = 0, shared: bool = False,
                          owner: str = "replay") -> str:
    """The replay choice (``"host"``, ``"device"`` or ``"prefetch"``) for ``setting`` (one of
    :data:`REPLAY_DEVICES`) with the learner on ``device``; see the module docstring.
    ``shared``: the replay must be shared between processes (an asynchronous runner's
    copier appends to it)."""
    setting = check_choice(setting, "replay_device", REPLAY_DEVICES, owner=owner)
    device = torch.device("cpu" if device is None else device)
    if shared and setting == "device":
        raise ValueError(f"{owner}: replay_device='device' keeps the replay in one process "
                         f"(the optimizer's), but this asynchronous run shares it with a copier "
                         f"process; use replay_device='prefetch' (or 'auto'), or the "
                         f"optimizer copier")
    if setting != "auto":
        return setting
    if device.type != "cuda":
        return "host"
    if shared:
        return "prefetch"
    free, _ = torch.cuda.mem_get_info(device)
    return "device" if estimated_bytes <= DEVICE_REPLAY_FRACTION * free else "prefetch"


def takes_device_priorities(replay_buffer: Any) -> bool:
    """Whether ``replay_buffer`` takes new priorities as a device tensor without reading them
    on the learner's thread (a device replay, or a prefetcher, which reads them on its own
    thread): both have a ``device``; host buffers have none."""
    return getattr(replay_buffer, "device", None) is not None


def mebibytes(n_bytes: int) -> str:
    """``n_bytes`` as a short human-readable size."""
    return f"{n_bytes / 2 ** 20:,.0f} MiB" if n_bytes < 2 ** 30 else \
        f"{n_bytes / 2 ** 30:,.1f} GiB"


def build_replay_buffer(choice: str, device: torch.device, batch_B: int, async_: bool = False,
                        **kwargs: Any) -> Any:
    """The replay buffer for a resolved ``choice``: ``make_replay_buffer(**kwargs)`` on the
    host (its shared-memory ``Async*`` variant with ``async_``), on ``device``, or on the host
    behind a prefetcher of ``batch_B`` batches to ``device``."""
    if choice == "device":
        return make_replay_buffer(device=device, **kwargs)
    buffer = make_replay_buffer(async_=async_, **kwargs)
    return prefetched(buffer, batch_B, device) if choice == "prefetch" else buffer


def prefetched(buffer: Any, batch_B: int, device: torch.device) -> Any:
    """``buffer`` behind a :class:`~rlfast.replays.prefetch.PrefetchingReplay` to ``device``
    (unchanged if it already is)."""
    if isinstance(buffer, PrefetchingReplay):
        return buffer
    return PrefetchingReplay(buffer, batch_B, device)


def make_learner_replay(setting: str, device: torch.device | str | None, batch_B: int,
                        async_: bool = False, owner: str = "replay",
                        **kwargs: Any) -> tuple[Any, str | None]:
    """``(buffer, choice)``: the replay a learner on ``device`` asked for with ``setting``
    (``kwargs`` go to :func:`~rlfast.replays.make_replay_buffer`: ``example``, ``size``,
    ``prioritized``, ``frames``, ...). With ``async_`` the shared host buffer is built and
    ``choice`` is None: the optimizer process decides later with :func:`finish_shared_replay`,
    once its device is known."""
    if async_:
        if setting == "device":
            resolve_replay_device(setting, device, shared=True, owner=owner)  # raises
        return make_replay_buffer(async_=True, **kwargs), None
    estimate = estimate_replay_bytes(kwargs["example"], kwargs["size"],
                                     bool(kwargs.get("frames")),
                                     int(kwargs.get("n_step_return", 1)))
    choice = resolve_replay_device(setting, device, estimate, owner=owner)
    buffer = build_replay_buffer(choice, torch.device(device or "cpu"), batch_B, **kwargs)
    where = {"host": "host memory", "device": f"{device}",
             "prefetch": f"host memory, prefetched to {device}"}[choice]
    logger.log(f"{owner}: replay of {kwargs['size']:,} steps ({mebibytes(estimate)}) in "
               f"{where} (replay_device={setting!r})")
    return buffer, choice


def finish_shared_replay(buffer: Any, setting: str, device: torch.device | str | None,
                         batch_B: int, owner: str = "replay") -> tuple[Any, str]:
    """In an asynchronous run's optimizer process: the shared host ``buffer``, behind a
    prefetcher to ``device`` where ``setting`` resolves to ``"prefetch"``; and the choice."""
    choice = resolve_replay_device(setting, device, shared=True, owner=owner)
    if choice == "prefetch":
        return prefetched(buffer, batch_B, torch.device(device or "cpu")), choice
    return buffer, choice


def replay_to_save(buffer: Any) -> Any:
    """The buffer whose arrays a snapshot saves and a resume loads: the host buffer behind a
    prefetcher, once the priorities handed to it are in its tree (the prefetcher's thread
    writes nothing more until the learner hands it more); any other buffer itself."""
    if isinstance(buffer, PrefetchingReplay):
        buffer.flush()
        return buffer.buffer
    return buffer


def close_replay(algo: Any) -> None:
    """Stop the prefetching thread of ``algo``'s replay, if it has one (a runner's shutdown,
    on every exit path); other buffers hold no thread."""
    buffer = getattr(algo, "replay_buffer", None)
    if isinstance(buffer, PrefetchingReplay):
        buffer.close()
