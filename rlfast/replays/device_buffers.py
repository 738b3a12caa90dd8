"""Transition replay buffers whose whole state lives on a device (DQN / SAC on a GPU).

The device twins of :mod:`rlfast.replays.non_sequence`: each buffer *has* a
:class:`~rlfast.replays.device_storage.DeviceReplayStorage` and a device sampling scheme
(:class:`DeviceUniformSampling` here, or
:class:`~rlfast.replays.device_tree.DevicePrioritizedSampling`), and its ``extract_batch``
gathers the batch with device ops. ``sample_batch`` and ``update_batch_priorities`` read no
value on the host, so a learner on a GPU samples and trains without a host synchronisation;
only ``append_samples`` moves data, host to device. Batches are the same namedarraytuples as
the numpy buffers' (``SamplesFromReplay``, ``SamplesFromReplayPri``), holding device tensors.
The time-limit twins are in :mod:`rlfast.replays.device_time_limit`, the sequence twins in
:mod:`rlfast.replays.device_sequence`.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.replays.base import ReplayBufferBase
from rlfast.replays.collections import SamplesFromReplay
from rlfast.replays.device_storage import DeviceReplayStorage, check_device
from rlfast.replays.device_tree import DevicePrioritizedSampling
from rlfast.replays.draw_alarm import PriorityAlarm
from rlfast.replays.non_sequence import transitions_at
from rlfast.replays.ring import valid_age_range
from rlfast.replays.sampling import UniformSampling, _not_enough, check_starts
from rlfast.utils.checks import check_int

__all__ = ["DeviceUniformSampling", "DeviceUniformReplayBuffer", "DeviceUniformReplayFrameBuffer",
           "DevicePrioritizedReplayBuffer", "DevicePrioritizedReplayFrameBuffer",
           "extract_device_transitions", "device_scheme", "priority_alarm"]

_SEED_OFFSET = 0x5EED_0F5  # the uniform scheme's generator: torch.initial_seed() + this


class DeviceUniformSampling:
    """Start steps drawn uniformly among the allowed ones, environment index uniform, on a
    device: the twin of :class:`~rlfast.replays.sampling.UniformSampling`.

    The allowed starts are the ages ``lo .. hi`` (host integers from the cursor, see
    :mod:`rlfast.replays.ring`) whose row is a multiple of ``stride``; as ``stride`` divides
    ``T`` those ages are every ``stride``-th one, so a draw is one ``torch.randint`` on the
    device and arithmetic on host integers. Draws come from the scheme's own ``generator``
    on the device, seeded from ``torch.initial_seed()`` plus a fixed offset (saved by
    :meth:`state_dict`, so a resumed run draws what the uninterrupted one would have).
    """

    def __init__(self, storage: DeviceReplayStorage, off_backward: int, stride: int = 1,
                 device: str | torch.device | None = None):
        self.storage = storage
        self.off_backward, self.stride = check_starts(storage, off_backward, stride)
        self.device = storage.device if device is None else check_device(device)
        if self.device != storage.device:
            raise ValueError(f"the sampling scheme's device {self.device} must be the storage's "
                             f"({storage.device}), where its indexes are used; leave device "
                             f"out to use the storage's")
        self.generator = torch.Generator(device=self.device)
        self.generator.manual_seed((torch.initial_seed() + _SEED_OFFSET) % 2 ** 64)

    advance = UniformSampling.advance  # nothing to track; input priorities are refused

    def sample(self, n: int, ages: Any = None, B_idxs: Any = None
               ) -> tuple[torch.Tensor, torch.Tensor, None]:
        """``(T_idxs, B_idxs, None)``: int64 device tensors of ``n`` starts (with replacement).

        ``ages`` (``[n]`` ages of allowed starts: 0 is the newest row) and ``B_idxs`` replace
        the scheme's own draws when given (tests feed a numpy scheme's draws this way); they
        are used as given, not checked against the allowed range (that would read them).
        """
        n = check_int(n, "n", minimum=1)
        s = self.storage
        lo, hi = valid_age_range(s.t, s.full, s.T, self.off_backward, s.off_forward)
        first = lo + (s.t - 1 - lo) % self.stride  # the first age whose row is a start
        count = (hi - first) // self.stride + 1 if first <= hi else 0
        if count <= 0:
            raise RuntimeError(_not_enough(s, self.off_backward))
        if ages is None:
            ages = first + self.stride * torch.randint(count, (n,), generator=self.generator,
                                                       device=self.device)
        else:
            ages = self._injected(ages, n, "ages")
        if B_idxs is None:
            B_idxs = torch.randint(s.B, (n,), generator=self.generator, device=self.device)
        else:
            B_idxs = self._injected(B_idxs, n, "B_idxs")
        return (s.t - 1 - ages) % s.T, B_idxs, None

    def _injected(self, draws: Any, n: int, name: str) -> torch.Tensor:
        draws = torch.as_tensor(draws, device=self.device)
        if tuple(draws.shape) != (n,) or draws.dtype.is_floating_point or draws.dtype == \
                torch.bool:
            raise ValueError(f"{name} must be [n]=[{n}] integers; got shape "
                             f"{tuple(draws.shape)} and dtype {draws.dtype}")
        return draws.to(torch.int64)

    def state_dict(self) -> dict[str, Any]:
        """The scheme's state: its generator's (a uint8 CPU tensor)."""
        return {"generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a :meth:`state_dict`."""
        if "generator" not in state:
            raise ValueError(f"state lacks key 'generator'; got keys {sorted(state)}")
        self.generator.set_state(torch.as_tensor(state["generator"], dtype=torch.uint8))


def device_scheme(buffer: Any, what: str) -> DevicePrioritizedSampling:
    """The prioritized scheme of a device buffer (its ``_prioritized``), or TypeError."""
    if not isinstance(buffer.scheme, DevicePrioritizedSampling):
        raise TypeError(f"{type(buffer).__name__} is not prioritized: it has no {what}; use "
                        f"a DevicePrioritized* replay buffer")
    return buffer.scheme


def priority_alarm(buffer: Any) -> PriorityAlarm | None:
    """The :class:`~rlfast.replays.draw_alarm.PriorityAlarm` of a prioritized device replay
    (any ``Device*Prioritized*`` buffer), naming it in its error; None for every other buffer
    (uniform, host, prefetching), whose draws need no alarm or raise on the host. A learner
    passes it to its call's guard, which reads the flag with the call's one read."""
    scheme = getattr(buffer, "scheme", None)
    if not isinstance(scheme, DevicePrioritizedSampling):
        return None
    return PriorityAlarm(scheme.tree, type(buffer).__name__)


def extract_device_transitions(storage: DeviceReplayStorage, T_idxs: torch.Tensor,
                               B_idxs: torch.Tensor) -> SamplesFromReplay:
    """``SamplesFromReplay`` of device tensors: the transitions at ``(T_idxs[i], B_idxs[i])``
    (int64 device tensors), as :func:`~rlfast.replays.non_sequence.extract_transitions`
    gathers them from numpy, with no host read."""
    return transitions_at(storage, T_idxs, B_idxs, torch.cat)


class DeviceUniformReplayBuffer(ReplayBufferBase):
    """:class:`~rlfast.replays.UniformReplayBuffer` with its whole state on ``device``.

    Same arguments (no ``share_memory``: a device replay lives in the optimizer's process)
    plus ``device``. ``append_samples`` takes ``[T_in, B]`` numpy arrays or torch tensors;
    ``sample_batch(batch_B)`` returns ``SamplesFromReplay`` of tensors on ``device``, drawn
    and gathered there with no host read; ``sample_idxs`` returns int64 device tensors.
    """

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, device: str | torch.device = "cpu"):
        storage = DeviceReplayStorage(example, size, B, discount, n_step_return,
                                      frame_based=self.frame_based, device=device)
        super().__init__(storage, DeviceUniformSampling(storage, off_backward=n_step_return))

    device = property(lambda self: self.storage.device, doc="Where every tensor lives.")

    def extract_batch(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> SamplesFromReplay:
        """The transitions at these steps, as device tensors (see
        :func:`extract_device_transitions`)."""
        return extract_device_transitions(self.storage, T_idxs, B_idxs)


class DeviceUniformReplayFrameBuffer(DeviceUniformReplayBuffer):
    """:class:`DeviceUniformReplayBuffer` storing one frame per step of stacked image
    observations ``[C, H, W]`` (uint8 on the device) and rebuilding the stacks there."""

    frame_based = True


class DevicePrioritizedReplayBuffer(ReplayBufferBase):
    """:class:`~rlfast.replays.PrioritizedReplayBuffer` with its whole state, sum tree
    included, on ``device``.

    Same arguments (no ``share_memory``) plus ``device``. ``sample_batch`` returns
    ``SamplesFromReplayPri`` with float32 ``is_weights``, drawn by priority on the device;
    ``update_batch_priorities`` takes the new raw priorities as a device tensor (e.g.
    ``|TD error|``) and reads none of them on the host (negative or non-finite values leave
    their leaf unchanged instead of raising, see :mod:`rlfast.replays.device_tree`).
    """

    def __init__(self, example: Any, size: int, B: int, discount: float = 1,
                 n_step_return: int = 1, alpha: float = 0.6, beta: float = 0.4,
                 default_priority: float = 1, unique: bool = False,
                 input_priorities: bool = False, input_priority_shift: int = 0,
                 device: str | torch.device = "cpu"):
        storage = DeviceReplayStorage(example, size, B, discount, n_step_return,
                                      frame_based=self.frame_based, device=device)
        scheme = DevicePrioritizedSampling(
            storage, off_backward=n_step_return, stride=1, alpha=alpha, beta=beta,
            default_priority=default_priority, unique=unique,
            input_priorities=input_priorities, input_priority_shift=input_priority_shift,
            device=storage.device)
        super().__init__(storage, scheme)

    device = property(lambda self: self.storage.device, doc="Where every tensor lives.")
    _prioritized = device_scheme

    def extract_batch(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> SamplesFromReplay:
        """The transitions at these steps, as device tensors (see
        :func:`extract_device_transitions`)."""
        return extract_device_transitions(self.storage, T_idxs, B_idxs)


class DevicePrioritizedReplayFrameBuffer(DevicePrioritizedReplayBuffer):
    """:class:`DevicePrioritizedReplayBuffer` with frame-wise observation storage."""

    frame_based = True
