"""Tests for the Env base class and its EnvStep/EnvSpaces records."""
import numpy as np
import pytest

from rlfast.envs import Env, EnvSpaces, EnvStep
from rlfast.spaces import FloatBox, IntBox


class CountingEnv(Env):
    """Observation counts steps; the episode ends after three steps."""

    def __init__(self):
        self._observation_space = FloatBox(0.0, 10.0, shape=(1,))
        self._action_space = IntBox(0, 2)
        self._t = 0

    def step(self, action):
        self._t += 1
        obs = np.array([self._t], dtype=np.float32)
        return EnvStep(obs, float(action), self._t >= 3, None)

    def reset(self):
        self._t = 0
        return np.zeros(1, dtype=np.float32)


def test_env_base_interface():
    env = CountingEnv()
    assert isinstance(env.spaces, EnvSpaces)
    assert env.spaces.observation is env.observation_space
    assert env.spaces.action is env.action_space
    assert env.horizon is None
    env.seed(0)  # no-op in the base class
    env.reset()
    steps = [env.step(1) for _ in range(3)]
    assert [s.done for s in steps] == [False, False, True]
    assert steps[-1].observation[0] == 3.0 and steps[0].reward == 1.0
    assert EnvStep._fields == ("observation", "reward", "done", "env_info")
    assert EnvSpaces._fields == ("observation", "action")
    env.close()


def test_env_is_abstract():
    with pytest.raises(TypeError):
        Env()
