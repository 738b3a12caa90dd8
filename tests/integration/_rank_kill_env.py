"""A gymnasium environment whose rank kills itself once, for the torchrun restart test
(test_torchrun_restart.py). Importing this module registers it as ``RlfastRankKill-v0``, so
``rlfast train ppo tests.integration._rank_kill_env:RlfastRankKill-v0`` finds it on every
rank (gymnasium imports the module named before the ``:``).

The rank whose ``RANK`` is ``RLFAST_KILL_RANK`` SIGKILLs its own process, as a segfault or
the OOM killer would, on the rank group's first start only (``TORCHELASTIC_RESTART_COUNT``
0), at the first step of a training environment once the run's ``progress.csv``
(``RLFAST_KILL_PROGRESS``) holds ``RLFAST_KILL_ROWS`` rows. Counting rows, not steps (the
samplers step environments a random number of times before training), names an iteration:
the ranks pass each log row together, so with a row after every iteration and no
pre-training row, the rank dies sampling iteration ``RLFAST_KILL_ROWS``. The atomic marker
file ``RLFAST_KILL_MARKER`` (which records the rank, the restart count and the time) makes
it one kill per run.
"""
import os
import signal
import time

import gymnasium as gym
import numpy as np

from tests.integration._tiny_env import TinyEnv, claim_marker

ENV_ID = "RlfastRankKill-v0"
EPISODE_STEPS = 25


class RankKillEnv(TinyEnv):
    """4 float observations, 2 actions, reward 1 per step, episodes of 25 steps."""

    def __init__(self):
        super().__init__()
        first_start = os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0"
        doomed_rank = os.environ.get("RANK") == os.environ.get("RLFAST_KILL_RANK", "")
        self.marker = os.environ.get("RLFAST_KILL_MARKER", "")
        self.progress = os.environ.get("RLFAST_KILL_PROGRESS", "")
        self.kill_rows = int(os.environ.get("RLFAST_KILL_ROWS", "0"))
        self.armed = bool(first_start and doomed_rank and self.marker and self.progress
                          and self.kill_rows)

    def _rows_logged(self) -> int:
        """The rows in ``progress.csv`` so far (its header not counted)."""
        try:
            with open(self.progress, encoding="utf-8") as f:
                return max(sum(1 for _ in f) - 1, 0)
        except FileNotFoundError:
            return 0

    def step(self, action):
        self.t += 1
        self.steps += 1
        if (self.armed and self.training_env and self._rows_logged() >= self.kill_rows
                and claim_marker(self.marker, f"rank {os.environ['RANK']} restart "
                                              f"{os.environ['TORCHELASTIC_RESTART_COUNT']} "
                                              f"{time.time()}")):
            os.kill(os.getpid(), signal.SIGKILL)
        obs = np.full(4, 0.1 * (self.t % 7), dtype=np.float32)
        return obs, 1.0, False, self.t >= EPISODE_STEPS, {}


if ENV_ID not in gym.registry:
    gym.register(ENV_ID, entry_point=RankKillEnv)
