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


def test_trajectory_done_reads_traj_done_where_the_info_has_it():
    from collections import namedtuple

    from rlfast.envs.base import trajectory_done
    from rlfast.utils.collections import NamedTupleSchema

    with_field = NamedTupleSchema("Info", ("timeout", "traj_done"))
    without = NamedTupleSchema("Info", ("timeout",))
    plain = namedtuple("Plain", ["traj_done"])

    class Obj:
        traj_done = False

    # A lost life: done, trajectory goes on; and the end of the game.
    assert trajectory_done(with_field(False, False), True) is False
    assert trajectory_done(with_field(False, True), True) is True
    assert trajectory_done(without(False), True) is True
    assert trajectory_done(without(True), False) is False
    assert trajectory_done(plain(False), True) is False
    assert trajectory_done(Obj(), True) is False
    assert trajectory_done(None, True) is True
    assert trajectory_done(object(), False) is False


def test_traj_info_statistics_match_a_direct_computation():
    from rlfast.envs.traj_info import TrajInfo

    rng = np.random.default_rng(3)
    rewards = rng.integers(-2, 3, size=50).astype(float) * rng.random(50)
    rewards[::7] = 0.0
    info = TrajInfo(_discount=0.9)
    for r in rewards:
        info.step(None, None, np.float32(r), False, None, None)
    f32 = rewards.astype(np.float32).astype(float)
    assert info.Length == 50
    assert info.NonzeroRewards == int(np.count_nonzero(f32))
    assert info.Return == pytest.approx(f32.sum(), rel=1e-12)
    assert info.DiscountedReturn == pytest.approx((0.9 ** np.arange(50) * f32).sum(), rel=1e-12)
    assert set(info) >= {"Length", "Return", "NonzeroRewards", "DiscountedReturn"}
    assert isinstance(info.NonzeroRewards, int) and isinstance(info.Return, float)
