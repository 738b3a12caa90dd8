"""Register your own family of environments and train it with ``rlfast train``.

This file is a user's package in miniature: it defines a gymnasium environment outside
rlfast, registers the ids ``corridor:<length>`` with ``rlfast.register_env_family``, and
trains PPO on one through the command line. Run it as a script:

    python examples/custom_env_family.py            # trains ppo on corridor:12

or let the ``rlfast`` command load it as a plug-in, from the shell:

    PYTHONPATH=examples RLFAST_PLUGINS=custom_env_family rlfast train ppo corridor:12

An installed package would declare the plug-in instead, as an entry point in the
``rlfast.plugins`` group (``pyproject.toml``):

    [project.entry-points."rlfast.plugins"]
    corridor = "my_package.envs"

Every rlfast command then knows ``corridor:<length>``: train, resume, eval, watch and
tune, on every sampler (workers call ``make_corridor`` by name, so it must be importable).

The task: the agent starts at the left end of a corridor of ``length`` cells and sees its
position (one-hot). Moving right into the last cell pays +1 and ends the episode; every
step costs 0.01; an episode is cut after ``4 * length`` steps. The best return is
``1 - 0.01 * (length - 2)`` (0.90 for length 12); a policy that never reaches the end
scores ``-0.04 * length``, and a random walk usually does not reach it in time.
"""
from __future__ import annotations

import sys

import gymnasium
import numpy as np
from gymnasium import spaces

import rlfast


class Corridor(gymnasium.Env):
    """Walk right to the end of a corridor of ``length`` cells; actions 0 (left), 1 (right)."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 10}

    def __init__(self, length: int = 12, render_mode: str | None = None):
        self.length = int(length)
        self.render_mode = render_mode
        self.observation_space = spaces.Box(0.0, 1.0, (self.length,), np.float32)
        self.action_space = spaces.Discrete(2)
        self.position = 0

    def _observation(self) -> np.ndarray:
        obs = np.zeros(self.length, np.float32)
        obs[self.position] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self.position = 0
        return self._observation(), {}

    def step(self, action):
        move = 1 if int(action) == 1 else -1
        self.position = min(max(self.position + move, 0), self.length - 1)
        reached = self.position == self.length - 1
        reward = 1.0 if reached else -0.01
        return self._observation(), reward, reached, False, {}

    def render(self) -> np.ndarray:
        frame = np.full((16, 16 * self.length, 3), 255, np.uint8)
        frame[:, 16 * (self.length - 1):] = (40, 160, 40)  # the goal
        frame[4:12, 16 * self.position + 4:16 * self.position + 12] = (200, 40, 40)
        return frame


def make_corridor(name: str, **kwargs) -> gymnasium.Env:
    """The family's maker: ``corridor:<length>`` -> a time-limited ``Corridor``."""
    length = int(name)
    env = Corridor(length, **kwargs)
    return gymnasium.wrappers.TimeLimit(env, max_episode_steps=4 * length)


def check_corridor(name: str) -> None:
    """Refuse an id such as ``corridor:long`` before anything is built."""
    if not name.isdigit() or int(name) < 2:
        raise ValueError(f"corridor:<length> takes a whole length of 2 cells or more; got "
                         f"{name!r}")


rlfast.register_env_family("corridor", make_corridor, check_id=check_corridor,
                           description="a corridor to walk to the end of (corridor:12)",
                           replace=True)


def main(argv: list[str] | None = None) -> int:
    """Train PPO on ``corridor:12`` with the ``rlfast train`` command line; extra arguments
    are passed on (``--log-dir``, ``--steps``, ``--set ...``)."""
    from rlfast.cli import main as rlfast_main
    args = ["train", "ppo", "corridor:12", "--steps", "30000", "--no-progress",
            "--set", "runner.log_interval_steps=10240"]
    return rlfast_main(args + list(sys.argv[1:] if argv is None else argv))


if __name__ == "__main__":
    sys.exit(main())
