"""The velocity-masked CartPole used by the recurrent learning test."""
from __future__ import annotations

import gymnasium
import numpy as np
import pytest

from rlfast.envs import GymEnvWrapper
from tests.learning.masked_envs import MaskVelocityWrapper, make_masked_cartpole


def test_masked_cartpole_keeps_position_and_angle_only():
    env = make_masked_cartpole(seed=3)
    full = gymnasium.make("CartPole-v1")
    assert isinstance(env, GymEnvWrapper)
    assert env.observation_space.shape == (2,)
    full_obs, _ = full.reset(seed=3)
    obs = env.reset()
    np.testing.assert_allclose(obs, full_obs[[0, 2]], rtol=0, atol=1e-7)
    for action in [0, 1, 1, 0, 1]:
        full_obs, reward, terminated, truncated, _ = full.step(action)
        step = env.step(np.int64(action))
        np.testing.assert_allclose(step.observation, full_obs[[0, 2]], rtol=0, atol=1e-7)
        assert step.reward == reward
        assert step.done == (terminated or truncated)
    # The bounds follow the kept entries of the original space.
    space = full.observation_space
    np.testing.assert_allclose(env.observation_space.high, space.high[[0, 2]])
    env.close()
    full.close()


def test_masked_cartpole_seed_makes_resets_reproducible():
    a, b = make_masked_cartpole(seed=11), make_masked_cartpole(seed=11)
    np.testing.assert_array_equal(a.reset(), b.reset())
    c = make_masked_cartpole(seed=12)
    assert not np.array_equal(make_masked_cartpole(seed=11).reset(), c.reset())


def test_mask_wrapper_rejects_bad_indices():
    with pytest.raises(ValueError, match="keep indices"):
        MaskVelocityWrapper(gymnasium.make("CartPole-v1"), keep=[0, 4])
