"""Frame-wise observation storage: keep one frame per step, rebuild stacks on replay.

Stacked image observations ``[C, H, W]`` (oldest frame first) share ``C - 1`` frames with the
previous step's, so storing only the newest frame cuts memory by about ``C``. Frames live in
``[T + C - 1, B, H, W]``: step ``t``'s newest frame is row ``t + C - 1``, and the first
``C - 1`` rows mirror the last steps of the ring (rows ``0 .. C-2`` hold steps
``T-C+1 .. T-1``; before those steps are first written they hold the history frames of the
very first observation). Step ``t``'s stack is then the contiguous rows ``t .. t+C-1`` with no
wrap-around arithmetic. On replay, frames from before an episode start (a ``done`` between the
frame's step and ``t``) are zeroed, as the environment does after a reset.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlfast.replays.ring import ring_slices

__all__ = ["FrameStore"]


class FrameStore:
    """Newest frame of every step of a ``[T, B]`` ring, plus the ``C - 1`` frames of history
    the oldest steps need (see the module docstring for the layout)."""

    def __init__(self, observation_example: Any, T: int, B: int):
        example = np.asarray(observation_example)
        if example.ndim < 1 or example.shape[0] < 1:
            raise ValueError("a frame buffer needs stacked observations [C, ...] with C >= 1 "
                             f"frames, oldest first; got an example of shape {example.shape}")
        self.n_frames = int(example.shape[0])
        self.frame_shape = tuple(example.shape[1:])
        self.T, self.B = int(T), int(B)
        self.frames = np.zeros((self.T + self.n_frames - 1, self.B) + self.frame_shape,
                               dtype=example.dtype)
        self._written = False

    @property
    def nbytes(self) -> int:
        return int(self.frames.nbytes)

    def write(self, start: int, observation: np.ndarray) -> None:
        """Store the newest frame of ``observation`` ([T_in, B, C, ...]) at steps
        ``start, start + 1, ...`` (wrapping); the first write also stores its history."""
        C, T = self.n_frames, self.T
        expected = (self.B, C) + self.frame_shape
        if observation.ndim < 2 or tuple(observation.shape[1:]) != expected:
            raise ValueError(f"observation must be [T_in, B, C, ...] = [T_in, {expected}]; got "
                             f"shape {tuple(observation.shape)}")
        if not self._written and C > 1:
            # History of the first observation: rows 0 .. C-2 hold the C-1 older frames.
            self.frames[start:start + C - 1] = np.swapaxes(observation[0, :, :C - 1], 0, 1)
        self._written = True
        newest = observation[:, :, C - 1]
        mirror_from = T - (C - 1)  # steps from here on are also kept in rows 0 .. C-2
        for rows, src in ring_slices(start, len(observation), T):
            self.frames[rows.start + C - 1:rows.stop + C - 1] = newest[src]
            lo = max(rows.start, mirror_from)
            if lo < rows.stop:
                src_lo = src.start + lo - rows.start
                self.frames[lo - mirror_from:rows.stop - mirror_from] = \
                    newest[src_lo:src.stop]

    def stacks(self, T_idxs: np.ndarray, B_idxs: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Observations ``[n, C, ...]`` of steps ``(T_idxs[i], B_idxs[i])``, oldest frame first,
        with frames from before the latest ``done`` ahead of each step zeroed. ``done`` is
        the ``[T, B]`` done array of the ring."""
        C = self.n_frames
        T_idxs = np.asarray(T_idxs)
        B_idxs = np.asarray(B_idxs)
        obs = self.frames[T_idxs[:, None] + np.arange(C), B_idxs[:, None]]
        if C > 1:
            # Column j-1 is done[t - j]; once any is true, frames at t-j and older are stale.
            back = (T_idxs[:, None] - np.arange(1, C)) % self.T
            stale = np.logical_or.accumulate(done[back, B_idxs[:, None]] != 0, axis=1)
            if stale.any():
                obs[:, :C - 1][stale[:, ::-1]] = 0
        return obs
