"""Frame-wise observation storage on a device: the twin of
:class:`~rlfast.replays.frames.FrameStore`.

The layout is the numpy store's (see :mod:`rlfast.replays.frames`): newest frames in
``[T + C - 1, B, ...]`` with the first ``C - 1`` rows mirroring the last steps of the ring,
and per step one bit per history slot recording whether that slot matched the stored frame
it is rebuilt from. Here the frames, the bits and the comparisons that set them are torch
tensors and ops on one device, and :meth:`DeviceFrameStore.stacks` rebuilds stacks with a
gather and a masked fill, so replaying frames reads nothing on the host. Frames keep their
dtype (uint8 images stay uint8).
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlfast.replays.cells import cell_array, cell_property
from rlfast.replays.frames import check_observation, frame_layout, write_newest
from rlfast.replays.ring import ring_slices

__all__ = ["DeviceFrameStore", "torch_dtype", "as_device"]


def torch_dtype(dtype: Any) -> torch.dtype:
    """The torch dtype of a numpy dtype (``uint8`` stays ``uint8``, ``bool`` stays ``bool``)."""
    try:
        return torch.from_numpy(np.zeros(0, dtype=np.dtype(dtype))).dtype
    except TypeError:
        raise TypeError(f"replay cannot store numpy dtype {np.dtype(dtype)} in a torch "
                        f"tensor; use a numeric or bool dtype") from None


def as_device(src: Any, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``src`` (numpy, a list, or a tensor anywhere) as a ``dtype`` tensor on ``device``;
    a CPU source for a CPU device is viewed, not copied, when the dtype already matches."""
    if not isinstance(src, torch.Tensor):
        array = np.asarray(src)
        if not array.flags.writeable:
            array = array.copy()  # torch.from_numpy warns on read-only arrays
        src = torch.from_numpy(array)
    return src.to(device=device, dtype=dtype)


class DeviceFrameStore:
    """Newest frame of every step of a ``[T, B]`` ring on ``device``, with the ``C - 1``
    history frames the oldest steps need and per-step bits of which history frames to
    replay (as :class:`~rlfast.replays.frames.FrameStore`, same shapes and dtypes)."""

    _written = cell_property("_cells", 0, bool, "Whether any frame was written yet.")

    def __init__(self, observation_example: Any, T: int, B: int,
                 device: str | torch.device = "cpu"):
        example = np.asarray(observation_example.detach().cpu()
                             if isinstance(observation_example, torch.Tensor)
                             else observation_example)
        self.n_frames, self.frame_shape, bits_dtype, bit_values = frame_layout(example)
        self.device = torch.device(device)
        self.T, self.B = int(T), int(B)
        self.frames = torch.zeros((self.T + self.n_frames - 1, self.B) + self.frame_shape,
                                  dtype=torch_dtype(example.dtype), device=self.device)
        # Bit k of history_ok[t, b]: history slot k of step t matched the stored frame.
        self.history_ok = torch.zeros((self.T, self.B), dtype=torch_dtype(bits_dtype),
                                      device=self.device)
        # Bit values as int64 (the bit arithmetic runs in int64 on every device).
        self._bit_values = torch.from_numpy(bit_values.view(np.int64).copy()).to(self.device)
        self._slots = torch.arange(self.n_frames, device=self.device)
        self._cells = cell_array(1, np.int64)
        self._written = False

    @property
    def nbytes(self) -> int:
        """Bytes of the frames and the history bits."""
        return int(self.frames.nbytes + self.history_ok.nbytes)

    def write(self, start: int, observation: torch.Tensor) -> None:
        """Store the newest frame of ``observation`` (``[T_in, B, C, ...]`` on the device) at
        steps ``start, start + 1, ...`` (wrapping), and which of its history frames match the
        stored ones, compared on the device; the first write also stores its history."""
        C, T = self.n_frames, self.T
        check_observation(observation, self.B, C, self.frame_shape)
        frames = self.frames
        if not self._written and C > 1:
            # History of the first observation: rows 0 .. C-2 hold the C-1 older frames.
            frames[start:start + C - 1] = observation[0, :, :C - 1].transpose(0, 1)
        self._written = True
        pieces = ring_slices(start, int(observation.shape[0]), T)
        write_newest(frames, observation[:, :, C - 1], pieces, T, C)
        if C > 1:
            # Slot k of step t is rebuilt from row t + k: compare it with what was given.
            for rows, src in pieces:
                ok = torch.zeros((rows.stop - rows.start, self.B), dtype=torch.int64,
                                 device=self.device)
                for k in range(C - 1):
                    stored = frames[rows.start + k:rows.stop + k]
                    same = (stored == observation[src, :, k]).reshape(
                        stored.shape[0], self.B, -1).all(dim=2)
                    ok |= same * self._bit_values[k]
                self.history_ok[rows] = ok.to(self.history_ok.dtype)

    def stacks(self, T_idxs: torch.Tensor, B_idxs: torch.Tensor) -> torch.Tensor:
        """Observations ``[n, C, ...]`` of steps ``(T_idxs[i], B_idxs[i])`` (int64 device
        tensors), oldest frame first; history frames that did not match at append time are
        zeros. One gather and one masked fill: no host read."""
        C = self.n_frames
        obs = self.frames[T_idxs[:, None] + self._slots, B_idxs[:, None]]
        if C > 1:
            bits = self.history_ok[T_idxs, B_idxs].to(torch.int64)
            missing = (bits[:, None] & self._bit_values) == 0  # [n, C-1]
            history = obs[:, :C - 1]
            history.masked_fill_(missing.view(missing.shape + (1,) * len(self.frame_shape)), 0)
        return obs
