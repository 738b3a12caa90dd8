"""Frame-wise observation storage: keep one frame per step, rebuild stacks on replay.

Stacked image observations ``[C, H, W]`` (oldest frame first) share ``C - 1`` frames with the
previous step's, so storing only the newest frame cuts memory by about ``C``. Frames live in
``[T + C - 1, B, H, W]``: step ``t``'s newest frame is row ``t + C - 1``, and the first
``C - 1`` rows mirror the last steps of the ring (rows ``0 .. C-2`` hold steps
``T-C+1 .. T-1``; before those steps are first written they hold the history frames of the
very first observation). Step ``t``'s stack is then the contiguous rows ``t .. t+C-1`` with no
wrap-around arithmetic. On replay, frames from before an episode start (a ``done`` between the
frame's step and ``t``) are zeroed, as the environment does after a reset -- unless the
observation appended at ``t`` showed that very frame: an environment that reports ``done`` but
keeps its frame history (Atari with episodic lives, on a lost life) is thus replayed exactly as
the agent saw it. That check runs at append time and only for steps with a ``done`` among their
``C - 1`` predecessors, so it costs next to nothing.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from rlfast.replays.ring import ring_rows, ring_slices

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
        # [t, b, k]: history slot k of step t was seen unchanged across a done (keep it).
        self.kept = np.zeros((self.T, self.B, max(self.n_frames - 1, 0)), dtype=bool)
        self._written = False

    @property
    def nbytes(self) -> int:
        return int(self.frames.nbytes + self.kept.nbytes)

    def write(self, start: int, observation: np.ndarray, done: np.ndarray) -> None:
        """Store the newest frame of ``observation`` ([T_in, B, C, ...]) at steps
        ``start, start + 1, ...`` (wrapping); the first write also stores its history.
        ``done`` is the ring's ``[T, B]`` done array, already holding these steps."""
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
        if C > 1:
            self._check_history(start, observation, done)

    def _check_history(self, start: int, observation: np.ndarray, done: np.ndarray) -> None:
        """Mark history frames that the appended observations kept across a ``done``."""
        C = self.n_frames
        steps = ring_rows(start, len(observation), self.T)
        self.kept[steps] = False
        stale = self._stale(steps, done)  # [T_in, C-1, B], slot order
        i, b = np.nonzero(stale.any(axis=1))
        if i.size == 0:
            return
        stored = self.frames[steps[i][:, None] + np.arange(C - 1), b[:, None]]
        given = observation[i, b, :C - 1]
        same = (stored == given).reshape(i.size, C - 1, -1).all(axis=2)
        self.kept[steps[i], b] = same & stale[i, :, b]

    def _stale(self, steps: np.ndarray, done: np.ndarray) -> np.ndarray:
        """``[n, C-1, B]``: history slot ``k`` of each step has a done at or after its frame."""
        C = self.n_frames
        back = (steps[:, None] - np.arange(1, C)) % self.T  # column j-1: step t - j
        stale = np.logical_or.accumulate(done[back] != 0, axis=1)
        return stale[:, ::-1]

    def stacks(self, T_idxs: np.ndarray, B_idxs: np.ndarray, done: np.ndarray) -> np.ndarray:
        """Observations ``[n, C, ...]`` of steps ``(T_idxs[i], B_idxs[i])``, oldest frame first,
        with frames from before the latest ``done`` ahead of each step zeroed (unless the
        appended observation kept them). ``done`` is the ``[T, B]`` done array of the ring."""
        C = self.n_frames
        T_idxs = np.asarray(T_idxs)
        B_idxs = np.asarray(B_idxs)
        obs = self.frames[T_idxs[:, None] + np.arange(C), B_idxs[:, None]]
        if C > 1:
            # Column j-1 is done[t - j]; once any is true, frames at t-j and older are stale.
            back = (T_idxs[:, None] - np.arange(1, C)) % self.T
            stale = np.logical_or.accumulate(done[back, B_idxs[:, None]] != 0, axis=1)
            if stale.any():
                zero = stale[:, ::-1] & ~self.kept[T_idxs, B_idxs]
                obs[:, :C - 1][zero] = 0
        return obs
