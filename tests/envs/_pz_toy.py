"""Tiny PettingZoo parallel environments for the multi-agent tests (``pz:tests.envs._pz_toy``).

``parallel_env(leave_at=2, length=5)``: agents ``a``, ``b`` and ``c`` observe
``[t, agent index, 1]``; agent ``b`` terminates at step ``leave_at`` and is then removed,
while ``a`` and ``c`` go on until step ``length`` (truncation). Each agent's reward is
``10 * (index + 1) + action``. The env fails loudly if it is given an action for an agent
that has left, and records every action dict it received in ``history``.
"""
from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo import ParallelEnv

NAMES = ["a", "b", "c"]


class LeavingEnv(ParallelEnv):
    metadata = {"name": "leaving_v0", "render_modes": ["rgb_array"]}

    def __init__(self, leave_at: int = 2, length: int = 5, render_mode: str | None = None):
        self.leave_at, self.length = int(leave_at), int(length)
        self.render_mode = render_mode
        self.possible_agents = list(NAMES)
        self.agents = []
        self.t = 0
        self.history: list[dict] = []

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(3)

    def _obs(self):
        return {a: np.array([self.t, NAMES.index(a), 1.0], np.float32) for a in self.agents}

    def reset(self, seed=None, options=None):
        self.agents = list(NAMES)
        self.t = 0
        return self._obs(), {a: {} for a in self.agents}

    def step(self, actions):
        if set(actions) != set(self.agents):
            raise AssertionError(f"actions for {sorted(actions)}, live agents {self.agents}")
        self.history.append(dict(actions))
        self.t += 1
        rewards = {a: 10.0 * (NAMES.index(a) + 1) + int(actions[a]) for a in self.agents}
        term = {a: a == "b" and self.t == self.leave_at for a in self.agents}
        trunc = {a: self.t >= self.length for a in self.agents}
        obs = self._obs()
        infos = {a: {} for a in self.agents}
        self.agents = [a for a in self.agents if not (term[a] or trunc[a])]
        return obs, rewards, term, trunc, infos

    def state(self):
        return np.array([self.t, len(self.agents)], np.float32)

    @property
    def state_space(self):
        return spaces.Box(-np.inf, np.inf, (2,), np.float32)

    def render(self):
        frame = np.zeros((8, 8, 3), np.uint8)
        frame[:, : self.t] = 255
        return frame


class MixedEnv(LeavingEnv):
    """Agent ``c`` observes 5 numbers and acts in Discrete(4); the others 3 and Discrete(3)."""

    def observation_space(self, agent):
        return spaces.Box(-np.inf, np.inf, (5 if agent == "c" else 3,), np.float32)

    def action_space(self, agent):
        return spaces.Discrete(4 if agent == "c" else 3)

    def _obs(self):
        return {a: np.full(5 if a == "c" else 3, self.t, np.float32) for a in self.agents}


def parallel_env(**kwargs):
    return LeavingEnv(**kwargs)
