"""Frame-wise observation storage: keep one frame per step, rebuild stacks on replay.

Stacked image observations ``[C, H, W]`` (oldest frame first) share ``C - 1`` frames with the
previous step's, so storing only the newest frame cuts memory by about ``C``. Frames live in
``[T + C - 1, B, H, W]``: step ``t``'s newest frame is row ``t + C - 1``, and the first
``C - 1`` rows mirror the last steps of the ring (rows ``0 .. C-2`` hold steps
``T-C+1 .. T-1``; before those steps are first written they hold the history frames of the
very first observation). Step ``t``'s stack is then the contiguous rows ``t .. t+C-1`` with no
wrap-around arithmetic.

Which history frames belong to the current episode is read from the data, not from ``done``
flags: at append time each history slot of each observation is compared with the stored frame
it would be rebuilt from, and one bit per slot records whether they matched; on replay,
unmatched slots come back as zeros. Environments zero the history on reset (rlfast's
AtariEnv does), so stacks are rebuilt exactly as the agent saw them: zeros after a reset, and
the real frames after a ``done`` that keeps the game going (a lost life with episodic lives)
or after a reset that no ``done`` flags (a wait-reset collector resets only at batch ends).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlfast.replays.cells import cell_array, cell_property
from rlfast.replays.ring import ring_slices
from rlfast.utils.buffer import np_mp_array

__all__ = ["FrameStore", "frame_layout", "check_observation", "write_newest"]


# What follows is shared with the device twin (rlfast.replays.device_frames): the layout
# arithmetic, on numpy arrays or torch tensors alike.

def frame_layout(example: np.ndarray) -> tuple[int, tuple, type, np.ndarray]:
    """``(n_frames C, frame_shape, bits dtype, uint64 bit values)`` of a stacked observation
    example ``[C, ...]`` (one history bit per slot but the newest)."""
    if example.ndim < 1 or not 1 <= example.shape[0] <= 65:
        raise ValueError("a frame buffer needs stacked observations [C, ...] with 1 <= C "
                         f"<= 65 frames, oldest first; got an example of shape "
                         f"{example.shape}")
    n_bits = int(example.shape[0]) - 1
    bits_dtype = next(d for d in (np.uint8, np.uint16, np.uint32, np.uint64)
                      if np.dtype(d).itemsize * 8 >= n_bits)
    bit_values = 1 << np.arange(n_bits, dtype=np.uint64)
    return int(example.shape[0]), tuple(example.shape[1:]), bits_dtype, bit_values


def check_observation(observation: Any, B: int, C: int, frame_shape: tuple) -> None:
    """``observation`` (array or tensor) must be ``[T_in, B, C, *frame_shape]``."""
    expected = (B, C) + frame_shape
    if observation.ndim < 2 or tuple(observation.shape[1:]) != expected:
        raise ValueError(f"observation must be [T_in, B, C, ...] = [T_in, {expected}]; got "
                         f"shape {tuple(observation.shape)}")


def write_newest(frames: Any, newest: Any, pieces: list, T: int, C: int) -> None:
    """Write ``newest`` (``[T_in, B, ...]``) into rows ``t + C - 1`` of ``frames`` for the
    ring pieces of the write, and mirror steps ``T - C + 1 ..`` into rows ``0 .. C - 2``."""
    mirror_from = T - (C - 1)  # steps from here on are also kept in rows 0 .. C-2
    for rows, src in pieces:
        frames[rows.start + C - 1:rows.stop + C - 1] = newest[src]
        lo = max(rows.start, mirror_from)
        if lo < rows.stop:
            src_lo = src.start + lo - rows.start
            frames[lo - mirror_from:rows.stop - mirror_from] = newest[src_lo:src.stop]


class FrameStore:
    """Newest frame of every step of a ``[T, B]`` ring, plus the ``C - 1`` frames of history
    the oldest steps need, plus per-step bits of which history frames to replay (see the
    module docstring). With ``share_memory`` the frames, the bits and the written flag live on
    OS shared memory (seen and written by forked children)."""

    _written = cell_property("_cells", 0, bool, "Whether any frame was written yet.")

    def __init__(self, observation_example: Any, T: int, B: int, share_memory: bool = False):
        example = np.asarray(observation_example)
        self.n_frames, self.frame_shape, bits_dtype, bit_values = frame_layout(example)
        self.T, self.B = int(T), int(B)
        self.share_memory = bool(share_memory)
        zeros = np_mp_array if self.share_memory else np.zeros
        self.frames = zeros((self.T + self.n_frames - 1, self.B) + self.frame_shape,
                            example.dtype)
        self._bit_values = bit_values.astype(bits_dtype)
        # Bit k of history_ok[t, b]: history slot k of step t matched the stored frame.
        self.history_ok = zeros((self.T, self.B), bits_dtype)
        self._cells = cell_array(1, np.int64, self.share_memory)
        self._written = False

    @property
    def nbytes(self) -> int:
        """Bytes of the frames and the history bits."""
        return int(self.frames.nbytes + self.history_ok.nbytes)

    def write(self, start: int, observation: np.ndarray) -> None:
        """Store the newest frame of ``observation`` ([T_in, B, C, ...]) at steps
        ``start, start + 1, ...`` (wrapping), and which of its history frames match the stored
        ones; the first write also stores its history."""
        C, T = self.n_frames, self.T
        check_observation(observation, self.B, C, self.frame_shape)
        if not self._written and C > 1:
            # History of the first observation: rows 0 .. C-2 hold the C-1 older frames.
            self.frames[start:start + C - 1] = np.swapaxes(observation[0, :, :C - 1], 0, 1)
        self._written = True
        pieces = ring_slices(start, len(observation), T)
        write_newest(self.frames, observation[:, :, C - 1], pieces, T, C)
        if C > 1:
            # Slot k of step t is rebuilt from row t + k: compare it with what was given.
            for rows, src in pieces:
                ok = np.zeros((rows.stop - rows.start, self.B), dtype=self.history_ok.dtype)
                for k in range(C - 1):
                    same = _frames_equal(self.frames[rows.start + k:rows.stop + k],
                                         observation[src, :, k])
                    ok |= same * self._bit_values[k]
                self.history_ok[rows] = ok

    def stacks(self, T_idxs: np.ndarray, B_idxs: np.ndarray) -> np.ndarray:
        """Observations ``[n, C, ...]`` of steps ``(T_idxs[i], B_idxs[i])``, oldest frame first;
        history frames that did not match at append time are zeros."""
        C = self.n_frames
        T_idxs = np.asarray(T_idxs)
        B_idxs = np.asarray(B_idxs)
        obs = self.frames[T_idxs[:, None] + np.arange(C), B_idxs[:, None]]
        if C > 1:
            bits = self.history_ok[T_idxs, B_idxs]
            missing = (bits[:, None] & self._bit_values) == 0  # [n, C-1]
            if missing.any():
                obs[:, :C - 1][missing] = 0
        return obs


def _frames_equal(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``[n, B]`` booleans: whether frames ``a[i, j]`` and ``b[i, j]`` are identical."""
    lead = a.shape[:2]
    a = a.reshape(lead + (-1,))
    b = b.reshape(lead + (-1,))
    if a.shape[-1] * a.dtype.itemsize % 8 == 0 and a.strides[-1] == a.itemsize \
            and b.strides[-1] == b.itemsize:
        a, b = a.view(np.uint64), b.view(np.uint64)  # compare 8 bytes at a time
    return (a == b).all(axis=-1)
