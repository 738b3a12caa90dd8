"""A fake environment stream and global-time reference computations for replay tests.

Everything here is indexed by *global* time ``g`` (the g-th step ever appended), never by ring
row, so it is independent of the buffers' ring arithmetic. Actions are unique ids
``g * B + b + 1`` (never 0, which is the null action), so a replayed action tells which step
it came from.
"""
from __future__ import annotations

from collections import namedtuple

import numpy as np

SamplesToBuffer = namedtuple("SamplesToBuffer", ["observation", "action", "reward", "done"])
SamplesToBufferRnn = namedtuple("SamplesToBufferRnn",
                                ["observation", "action", "reward", "done", "prev_rnn_state"])


class Stream:
    """Steps of ``B`` environments with random rewards and episode ends.

    ``frames[g, b]`` is the newest frame of step ``g``; stacked observations are built by hand
    in :meth:`stack`: oldest to newest, frames from before the latest reset zeroed (a done
    without reset, like a lost life with episodic lives, keeps the frames), and
    for the first steps the frames before ``g = 0`` come from ``pre_frames`` (the stream starts
    mid-episode).
    """

    def __init__(self, total: int, B: int, n_frames: int = 1, frame_shape=(3, 2),
                 p_done: float = 0.15, seed: int = 0, life_loss_fraction: float = 0.0,
                 p_silent_reset: float = 0.0):
        rng = np.random.RandomState(seed)
        self.total, self.B, self.C = total, B, n_frames
        self.frames = rng.randint(1, 256, size=(total, B) + tuple(frame_shape)).astype(np.uint8)
        self.pre_frames = rng.randint(1, 256, size=(max(n_frames - 1, 0), B)
                                      + tuple(frame_shape)).astype(np.uint8)
        self.reward = rng.randn(total, B).astype(np.float32)
        self.done = rng.rand(total, B) < p_done
        # A lost life (Atari episodic lives) is a done after which the env keeps its frames.
        self.reset = self.done & (rng.rand(total, B) >= life_loss_fraction)
        # A reset no done flags (a wait-reset collector resets after idle steps).
        self.reset |= rng.rand(total, B) < p_silent_reset
        self.action = (np.arange(total)[:, None] * B + np.arange(B)[None, :] + 1).astype(np.int64)
        self.observation = np.stack([[self.stack(g, b) for b in range(B)] for g in range(total)])

    def frame(self, g: int, b: int) -> np.ndarray:
        return self.frames[g, b] if g >= 0 else self.pre_frames[g + self.C - 1, b]

    def stack(self, g: int, b: int) -> np.ndarray:
        out = np.zeros((self.C,) + self.frames.shape[2:], dtype=np.uint8)
        for k in range(self.C):
            src = g - (self.C - 1 - k)
            # Zero if the env reset after any step from src up to g - 1.
            if any(self.reset[j, b] for j in range(max(src, 0), g)):
                continue
            out[k] = self.frame(src, b)
        return out

    def chunk(self, start: int, stop: int, with_rnn: bool = False):
        obs = self.observation[start:stop]
        args = (obs, self.action[start:stop], self.reward[start:stop], self.done[start:stop])
        if with_rnn:
            g = np.arange(start, stop)[:, None] + np.zeros((1, self.B))
            b = np.zeros((stop - start, 1)) + np.arange(self.B)[None, :]
            state = np.stack([g, b], axis=-1).astype(np.float32)  # [T, B, 2] = (g, b)
            return SamplesToBufferRnn(*args, prev_rnn_state=state)
        return SamplesToBuffer(*args)

    def example(self, with_rnn: bool = False):
        if with_rnn:
            return SamplesToBufferRnn(self.observation[0, 0], self.action[0, 0],
                                      self.reward[0, 0], self.done[0, 0],
                                      np.zeros(2, np.float32))
        return SamplesToBuffer(self.observation[0, 0], self.action[0, 0], self.reward[0, 0],
                               self.done[0, 0])

    # ------------------------------------------------------------ references
    def global_step(self, action_id) -> tuple[np.ndarray, np.ndarray]:
        a = np.asarray(action_id) - 1
        return a // self.B, a % self.B

    def n_step(self, g: int, b: int, n: int, discount: float) -> tuple[float, bool]:
        ret = 0.0
        for k in range(n):
            ret += discount ** k * float(self.reward[g + k, b])
            if self.done[g + k, b]:
                return ret, True
        return ret, False

    def prev(self, g: int, b: int) -> tuple[int, float]:
        if g == 0 or self.done[g - 1, b]:
            return 0, 0.0
        return int(self.action[g - 1, b]), float(self.reward[g - 1, b])


def valid_start(g: int, n_appended: int, T: int, need_after: int, off_forward: int,
                stride: int = 1) -> bool:
    """Global-time validity: ``need_after`` later steps are written, the ``off_forward``
    earlier steps are still in the buffer, and ``g`` is a multiple of ``stride``."""
    return (g >= 0 and g + need_after <= n_appended - 1 and g - off_forward >= n_appended - T
            and g % stride == 0)


def global_of_row(row: int, n_appended: int, T: int) -> int:
    """Global time of the data now in ring row ``row`` (-1 if never written)."""
    if row > n_appended - 1:
        return -1
    return row + T * ((n_appended - 1 - row) // T)


# ------------------------------------------------------------ time-limit streams
Tl = namedtuple("Tl", ["observation", "action", "reward", "done", "timeout", "final_observation"])
TlNoFinal = namedtuple("TlNoFinal", ["observation", "action", "reward", "done", "timeout"])


class TlStream:
    """Random transitions with time-limit fields: a ``done`` with probability ``p_done``,
    half of them time-limit ends; the final observation is zeros except at dones."""

    def __init__(self, total: int, B: int, seed: int, p_done: float = 0.2):
        rng = np.random.RandomState(seed)
        self.observation = rng.randn(total, B, 3).astype(np.float32)
        self.action = rng.randn(total, B, 1).astype(np.float32)
        self.reward = rng.randn(total, B).astype(np.float32)
        self.done = rng.rand(total, B) < p_done
        self.timeout = self.done & (rng.rand(total, B) < 0.5)
        self.final_observation = np.where(self.done[..., None], rng.randn(total, B, 3),
                                          0).astype(np.float32)

    def chunk(self, start: int, stop: int, final: bool = True):
        s = slice(start, stop)
        fields = (self.observation[s], self.action[s], self.reward[s], self.done[s],
                  self.timeout[s])
        return Tl(*fields, self.final_observation[s]) if final else TlNoFinal(*fields)

    def example(self, final: bool = True):
        chunk = self.chunk(0, 1, final)
        return type(chunk)(*(x[0, 0] for x in chunk))


def tl_id_fields(total: int, B: int, seed: int = 0) -> tuple:
    """``Tl`` fields ``[total, B, ...]`` whose observation starts with ``(g, b)`` and whose
    action is the id ``g * B + b + 1``; final observations ``-observation - 1000`` at dones."""
    rng = np.random.RandomState(seed)
    g, b = np.meshgrid(np.arange(total), np.arange(B), indexing="ij")
    observation = np.stack([g, b, rng.randn(total, B)], -1).astype(np.float32)
    done = rng.rand(total, B) < 0.2
    timeout = done & (rng.rand(total, B) < 0.5)
    final = np.where(done[..., None], -observation - 1000, 0).astype(np.float32)
    reward = rng.randn(total, B).astype(np.float32)
    action = (g * B + b + 1).astype(np.float32)[..., None]
    return observation, action, reward, done, timeout, final
