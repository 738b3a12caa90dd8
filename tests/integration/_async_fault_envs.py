"""An environment for the asynchronous-runner fault tests (test_async_faults.py).

``make_async_fault_env(...)`` is a sampler ``EnvCls``: a tiny gymnasium environment (4 float
observations, 2 actions, reward 1 per step, episodes of 25 steps) wrapped as an rlfast env,
whose options are plain keyword arguments (they reach the sampler's worker processes through
``env_kwargs``):

- ``mark_at`` / ``marker``: the first training environment to reach its ``mark_at``-th step
  creates ``marker`` (atomically, ``O_EXCL``) holding ``"<time> <pid>"``: the test then knows
  the run is under way and when;
- ``raise_at``: a training environment's ``step`` raises ``RuntimeError("injected async
  fault ...")`` at its ``raise_at``-th step; with a ``marker``, only the one environment that
  creates it (at ``raise_at``) raises, so exactly one fault happens, in a known process;
- ``pid_dir``: every environment writes an empty file named after its process's pid there
  when it is built, so a test knows every process that ran environments (the sampler's
  workers included) even if it never saw them alive.

Training environments are told apart from evaluation ones by their seeds (rlfast seeds
evaluation environments at ``EVAL_ENV_SEED_OFFSET`` and above).
"""
from __future__ import annotations

import os
import time

import numpy as np

from rlfast.envs import GymEnvWrapper
from tests.integration._tiny_env import TinyEnv, claim_marker


class AsyncFaultEnv(TinyEnv):
    """See the module docstring."""

    def __init__(self, raise_at: int | None = None, mark_at: int | None = None,
                 marker: str | None = None, pid_dir: str | None = None):
        super().__init__()
        self.raise_at, self.mark_at, self.marker = raise_at, mark_at, marker
        if pid_dir:
            open(os.path.join(pid_dir, str(os.getpid())), "a").close()

    def _mark(self) -> bool:
        """Create the marker; False if another environment already did."""
        return claim_marker(self.marker, f"{time.time()} {os.getpid()}")

    def step(self, action):
        self.t += 1
        if self.training_env:
            self.steps += 1
            marked = bool(self.marker) and self.steps in (self.mark_at, self.raise_at) \
                and self._mark()
            if self.steps == self.raise_at and (marked or not self.marker):
                raise RuntimeError(f"injected async fault: env.step raised at step "
                                   f"{self.steps} in pid {os.getpid()}")
        obs = np.full(4, 0.1 * (self.t % 7), dtype=np.float32)
        return obs, 1.0, False, self.t >= 25, {}


def make_async_fault_env(seed: int | None = None, **kwargs) -> GymEnvWrapper:
    """The sampler's ``EnvCls``: ``AsyncFaultEnv(**kwargs)`` as an rlfast env, seeded with
    ``seed`` at its first reset."""
    env = GymEnvWrapper(AsyncFaultEnv(**kwargs))
    if seed is not None:
        env.seed(seed)
    return env


def read_marker(path: str) -> tuple[float, int]:
    """(time, pid) written by the environment that created ``path``."""
    with open(path) as f:
        when, pid = f.read().split()
    return float(when), int(pid)


def wait_for_marker(path: str, timeout: float, alive=lambda: True) -> tuple[float, int]:
    """Wait until ``path`` exists (whole) and return its (time, pid); TimeoutError after
    ``timeout`` s, RuntimeError as soon as ``alive()`` is false."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            try:
                return read_marker(path)
            except ValueError:
                pass  # being written
        if not alive():
            raise RuntimeError(f"the run ended before {path} was written")
        time.sleep(0.02)
    raise TimeoutError(f"no {path} within {timeout} s")
