"""A gymnasium environment that injects one fault, for the fault matrix (test_faults.py).

The fault is chosen by environment variables, so that a ``rlfast train`` subprocess can be
told what to do without any rlfast option:

- ``RLFAST_FAULT``: ``raise`` (env.step raises), ``sigkill`` / ``sigstop`` (the process
  running the env kills / stops itself), ``nan`` (the observation becomes NaN), or ``mark``
  (nothing: the test itself then signals the master);
- ``RLFAST_FAULT_STEP``: after how many steps of one training environment;
- ``RLFAST_FAULT_MARKER``: a file created atomically (``O_EXCL``) at the fault; only the
  environment that creates it injects the fault, so exactly one fault happens per run, and
  the file holds the time of the fault.

Only training environments fault: evaluation and example environments are recognized by
their seeds (rlfast seeds them at ``EVAL_ENV_SEED_OFFSET`` and above).
"""
import os
import signal
import time

import numpy as np

from tests.integration._tiny_env import TinyEnv, claim_marker


class FaultEnv(TinyEnv):
    """4 float observations, 2 actions, reward 1 per step, episodes of 25 steps."""

    def __init__(self):
        super().__init__()
        self.fault = os.environ.get("RLFAST_FAULT", "")
        self.fault_step = int(os.environ.get("RLFAST_FAULT_STEP", "300"))
        self.marker = os.environ.get("RLFAST_FAULT_MARKER", "")

    def _claim(self) -> bool:
        return claim_marker(self.marker, f"{time.time()} {os.getpid()}")

    def step(self, action):
        self.t += 1
        self.steps += 1
        obs = np.full(4, 0.1 * (self.t % 7), dtype=np.float32)
        if (self.fault and self.marker and self.training_env
                and self.steps == self.fault_step and self._claim()):
            if self.fault == "raise":
                raise RuntimeError("injected fault: env.step raised")
            if self.fault == "sigkill":
                os.kill(os.getpid(), signal.SIGKILL)
            if self.fault == "sigstop":
                os.kill(os.getpid(), signal.SIGSTOP)
            if self.fault == "nan":
                obs[2] = np.nan
        return obs, 1.0, False, self.t >= 25, {}
