"""Small gymnasium environments with the action and observation spaces the presets must tell
apart, registered under the ``rlfast_test/`` namespace so the presets and the command line can
make them by id. Importing this module registers them (once).

- ``MatchTarget``: MultiDiscrete actions. Every step shows, for each action dimension ``d``, a
  random context ``c_d`` (one-hot, so the observation is ``sum(nvec)`` floats); the target of
  dimension ``d`` is ``(c_d + d + 1) % nvec[d]``, and the reward is the number of dimensions
  whose action hits its target. ``episode_len`` steps per episode, so the best return is
  ``episode_len * len(nvec)`` and a uniformly random policy gets ``episode_len * sum(1 / n)``.
- ``DictObs``: Dict observations (a Box and a Discrete entry, given in unsorted key order),
  Discrete actions; reward 1 when the action equals the Discrete entry.
- ``TupleObs``: the same task with a Tuple observation.
- ``MultiBinaryAct``, ``DictAct``, ``BoxAct``: one step of a trivial task with MultiBinary,
  Dict and 1-D float Box actions.
"""
from __future__ import annotations

import gymnasium
import numpy as np
from gymnasium import spaces


class MatchTargetEnv(gymnasium.Env):
    """MultiDiscrete contextual task; see the module docstring."""

    def __init__(self, nvec=(3, 4, 2), episode_len: int = 16, start=None):
        self.nvec = np.asarray(nvec, dtype=np.int64)
        self.start = np.zeros_like(self.nvec) if start is None else np.asarray(start, np.int64)
        self.episode_len = int(episode_len)
        self.action_space = spaces.MultiDiscrete(self.nvec, start=self.start)
        self.observation_space = spaces.Box(0.0, 1.0, (int(self.nvec.sum()),), np.float32)
        self._offsets = np.concatenate([[0], np.cumsum(self.nvec)[:-1]])
        self.t = 0
        self.context = np.zeros(len(self.nvec), dtype=np.int64)

    def _observe(self):
        self.context = self.np_random.integers(0, self.nvec)
        obs = np.zeros(self.observation_space.shape, np.float32)
        obs[self._offsets + self.context] = 1.0
        return obs

    def target(self) -> np.ndarray:
        """The action that scores every dimension for the current observation."""
        return (self.context + np.arange(len(self.nvec)) + 1) % self.nvec + self.start

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        action = np.asarray(action)
        if not self.action_space.contains(action):
            raise ValueError(f"MatchTargetEnv got invalid action {action!r}")
        reward = float(np.sum(action == self.target()))
        self.t += 1
        return self._observe(), reward, False, self.t >= self.episode_len, {}


class DictObsEnv(gymnasium.Env):
    """Dict observations, Discrete actions; see the module docstring."""

    def __init__(self, tuple_obs: bool = False, episode_len: int = 8):
        entries = {"position": spaces.Box(-1.0, 1.0, (2,), np.float32), "cue": spaces.Discrete(3)}
        self.tuple_obs = tuple_obs
        self.observation_space = (spaces.Tuple((entries["position"], entries["cue"])) if tuple_obs
                                  else spaces.Dict(entries))
        self.action_space = spaces.Discrete(3)
        self.episode_len = episode_len
        self.t = 0
        self.cue = 0
        self.position = np.zeros(2, np.float32)

    def _observe(self):
        self.cue = int(self.np_random.integers(3))
        self.position = self.np_random.uniform(-1, 1, 2).astype(np.float32)
        if self.tuple_obs:
            return (self.position, self.cue)
        return {"position": self.position, "cue": self.cue}

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return self._observe(), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"DictObsEnv got invalid action {action!r}")
        reward = float(int(action) == self.cue)
        self.t += 1
        return self._observe(), reward, False, self.t >= self.episode_len, {}


class OneStepEnv(gymnasium.Env):
    """A one-step episode with any action space; reward 0."""

    def __init__(self, action_space: str = "multibinary"):
        self.observation_space = spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = {
            "multibinary": spaces.MultiBinary(3),
            "dict": spaces.Dict({"move": spaces.Discrete(2), "force": spaces.Box(-1, 1, (1,))}),
            "box": spaces.Box(-1.0, 1.0, (2,), np.float32),
            "multidiscrete2d": spaces.MultiDiscrete([[2, 2], [3, 3]]),
        }[action_space]

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return np.zeros(2, np.float32), {}

    def step(self, action):
        if not self.action_space.contains(action):
            raise ValueError(f"OneStepEnv got invalid action {action!r}")
        return np.zeros(2, np.float32), 0.0, True, False, {}


def _register(env_id: str, entry_point, **kwargs) -> None:
    if env_id not in gymnasium.registry:
        gymnasium.register(env_id, entry_point=entry_point, kwargs=kwargs)


_register("rlfast_test/MatchTarget-v0", MatchTargetEnv)
_register("rlfast_test/DictObs-v0", DictObsEnv)
_register("rlfast_test/TupleObs-v0", DictObsEnv, tuple_obs=True)
_register("rlfast_test/MultiBinaryAct-v0", OneStepEnv, action_space="multibinary")
_register("rlfast_test/DictAct-v0", OneStepEnv, action_space="dict")
_register("rlfast_test/BoxAct-v0", OneStepEnv, action_space="box")
_register("rlfast_test/MultiDiscrete2dAct-v0", OneStepEnv, action_space="multidiscrete2d")
