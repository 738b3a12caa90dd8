"""Partially observed MPE Spread for the recurrent multi-agent learning check
(``pz:tests.learning._pz_masked_spread``).

PettingZoo's ``mpe2.simple_spread_v3`` gives each agent ``[own velocity (2), own position
(2), landmarks relative to it (2 N), other agents relative to it (2 (N - 1)), communication
(2 (N - 1))]``. :class:`HideOthersWrapper` keeps only the first ``4 + 2 N`` entries: an agent
no longer sees where the other agents are (nor their silent channel), so it cannot tell which
landmark the others cover from one observation. The env's global ``state()`` (the centralised
critic's input) is left whole.
"""
from __future__ import annotations

import numpy as np
from gymnasium import spaces
from pettingzoo.utils.wrappers import BaseParallelWrapper


class HideOthersWrapper(BaseParallelWrapper):
    """Drops the other agents' relative positions and communication from each observation of
    an MPE Spread parallel env with ``n_landmarks`` landmarks."""

    def __init__(self, env, n_landmarks: int):
        super().__init__(env)
        self.keep = 4 + 2 * int(n_landmarks)
        self._spaces: dict = {}

    def observation_space(self, agent):
        if agent not in self._spaces:  # one space object per agent, as PettingZoo asks
            space = self.env.observation_space(agent)
            self._spaces[agent] = spaces.Box(space.low[:self.keep], space.high[:self.keep],
                                             dtype=space.dtype)
        return self._spaces[agent]

    @property
    def state_space(self):
        return self.env.state_space

    def _hide(self, obs: dict) -> dict:
        return {a: np.asarray(o)[:self.keep] for a, o in obs.items()}

    def reset(self, seed=None, options=None):
        obs, infos = self.env.reset(seed=seed, options=options)
        return self._hide(obs), infos

    def step(self, actions):
        obs, rewards, terms, truncs, infos = self.env.step(actions)
        return self._hide(obs), rewards, terms, truncs, infos


def parallel_env(N: int = 2, local_ratio: float = 0.5, max_cycles: int = 25,
                 continuous_actions: bool = False, render_mode: str | None = None):
    """Spread with ``N`` agents and landmarks, each agent blind to the others' positions."""
    from mpe2 import simple_spread_v3
    env = simple_spread_v3.parallel_env(N=N, local_ratio=local_ratio, max_cycles=max_cycles,
                                        continuous_actions=continuous_actions,
                                        render_mode=render_mode)
    return HideOthersWrapper(env, n_landmarks=N)
