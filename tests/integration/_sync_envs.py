"""A gymnasium environment that faults on one rank of a multi-rank (SyncRl) run, for
test_sync_launch.py.

Importing this module registers ``RlfastSyncFault-v0``, so a ``rlfast train`` subprocess
(under torchrun or ``--world-size``) reaches it by the id
``tests.integration._sync_envs:RlfastSyncFault-v0`` (with the repository root on
``PYTHONPATH``): every rank imports the module and makes the same environment, and the
environment itself decides whether this rank faults.

The fault is chosen by environment variables, which every rank inherits:

- ``RLFAST_SYNC_FAULT``: ``raise`` (env.step raises ``RuntimeError`` with
  :data:`RAISE_MESSAGE`), ``hang`` (env.step sleeps forever), or ``stop-parent-raise``
  (env.step stops its parent process with SIGSTOP, has it continued
  ``RLFAST_SYNC_FAULT_STOP_S`` seconds later by a ``sleep; kill -CONT`` shell, then raises
  as ``raise`` does: under ``--world-size`` the parent is the process supervising the
  ranks, so this is that process descheduled, as on a loaded machine, while ranks fail);
  unset: no fault;
- ``RLFAST_SYNC_FAULT_RANK``: the rank that faults (default ``1``), compared with the
  ``RANK`` variable that torchrun sets in each worker and that rlfast exports in each rank
  it spawns before the rank's environments are made;
- ``RLFAST_SYNC_FAULT_STEP``: after how many steps of one training environment;
- ``RLFAST_SYNC_FAULT_MARKER``: a file created atomically (``O_EXCL``) at the fault; only
  the environment that creates it faults, so exactly one fault happens per run. The file
  holds ``time.monotonic()`` at the fault (CLOCK_MONOTONIC: one clock for every process of
  the machine), the pid and the rank.

Only training environments fault: evaluation environments are recognized by their seeds
(rlfast seeds them at ``EVAL_ENV_SEED_OFFSET`` and above).
"""
import os
import signal
import subprocess
import time

import gymnasium as gym
import numpy as np

from tests.integration._tiny_env import TinyEnv, claim_marker

ENV_ID = "tests.integration._sync_envs:RlfastSyncFault-v0"
RAISE_MESSAGE = "sync-fault-5d81: env.step raised on rank"


class SyncFaultEnv(TinyEnv):
    """4 float observations, 2 actions, reward 1 per step, episodes of 25 steps."""

    def __init__(self):
        super().__init__()
        self.fault = os.environ.get("RLFAST_SYNC_FAULT", "")
        self.fault_rank = os.environ.get("RLFAST_SYNC_FAULT_RANK", "1")
        self.fault_step = int(os.environ.get("RLFAST_SYNC_FAULT_STEP", "300"))
        self.marker = os.environ.get("RLFAST_SYNC_FAULT_MARKER", "")
        self.stop_s = float(os.environ.get("RLFAST_SYNC_FAULT_STOP_S", "3"))

    def _claim(self, rank: str) -> bool:
        return claim_marker(self.marker, f"{time.monotonic()} {os.getpid()} {rank}")

    def step(self, action):
        self.t += 1
        self.steps += 1
        rank = os.environ.get("RANK")
        if (self.fault and self.marker and self.training_env and rank == self.fault_rank
                and self.steps == self.fault_step and self._claim(rank)):
            if self.fault == "stop-parent-raise":
                parent = os.getppid()
                subprocess.Popen(["sh", "-c", f"sleep {self.stop_s}; kill -CONT {parent}"],
                                 stdin=subprocess.DEVNULL)
                os.kill(parent, signal.SIGSTOP)
            if self.fault in ("raise", "stop-parent-raise"):
                raise RuntimeError(f"{RAISE_MESSAGE} {rank} (pid {os.getpid()})")
            if self.fault == "hang":
                while True:
                    time.sleep(3600)
        obs = np.full(4, 0.1 * (self.t % 7), dtype=np.float32)
        return obs, float(action == self.t % 2), False, self.t >= 25, {}


if "RlfastSyncFault-v0" not in gym.registry:
    gym.register("RlfastSyncFault-v0", entry_point=SyncFaultEnv)
