"""GymEnvWrapper(final_observation=True): env_info.final_observation is the observation a done
step returned (the state a time limit cut the episode in), zeros on other steps."""
import gymnasium
import numpy as np
import pytest

from rlfast.envs import GymEnvWrapper, make


def _run(env, actions):
    """Step through ``actions`` after a reset, resetting on done like a sampler does."""
    steps = []
    env.reset()
    for a in actions:
        step = env.step(a)
        steps.append(step)
        if step.done:
            env.reset()
    return steps


def test_time_limit_end_reports_final_observation():
    env = make("Pendulum-v1", final_observation=True, max_episode_steps=5, seed=0)
    steps = _run(env, [np.zeros(1, np.float32)] * 12)
    assert steps[0].env_info._fields == ("timeout", "final_observation")
    for t, step in enumerate(steps):
        info = step.env_info
        assert info._fields == ("timeout", "final_observation")  # fixed layout every step
        assert info.final_observation.shape == (3,)
        assert info.final_observation.dtype == step.observation.dtype == np.float32
        if t in (4, 9):  # the 5th step of each episode is cut by the time limit
            assert step.done and bool(info.timeout)
            assert np.array_equal(info.final_observation, step.observation)
            assert np.any(info.final_observation != 0)
        else:
            assert not step.done and not bool(info.timeout)
            assert np.array_equal(info.final_observation, np.zeros(3, np.float32))


def test_true_termination_reports_final_observation_without_timeout():
    env = make("CartPole-v1", final_observation=True, seed=3)
    steps = _run(env, [1] * 60)  # always push right: the pole falls within a few dozen steps
    ends = [s for s in steps if s.done]
    assert ends, "CartPole should terminate when always pushed one way"
    for s in ends:
        assert not bool(s.env_info.timeout)
        assert np.array_equal(s.env_info.final_observation, s.observation)
    for s in steps:
        if not s.done:
            assert not np.any(s.env_info.final_observation)


def test_final_observation_matches_gym_directly():
    gym_env = gymnasium.make("Pendulum-v1", max_episode_steps=3)
    env = GymEnvWrapper(gymnasium.make("Pendulum-v1", max_episode_steps=3),
                        final_observation=True)
    env.seed(7)
    gym_obs, _ = gym_env.reset(seed=7)
    assert np.allclose(env.reset(), gym_obs)
    for _ in range(3):
        action = np.array([0.5], np.float32)
        gym_obs, _, terminated, truncated, _ = gym_env.step(action)
        step = env.step(action)
    assert truncated and not terminated
    assert np.allclose(step.env_info.final_observation, gym_obs)


class _EndsAt(gymnasium.Env):
    """Counts steps; terminates at step ``end`` (observation = [count, 1])."""

    observation_space = gymnasium.spaces.Box(-100.0, 100.0, (2,), np.float32)
    action_space = gymnasium.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def __init__(self, end):
        self.end, self.count = end, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.count = 0
        return np.array([0.0, 1.0], np.float32), {}

    def step(self, action):
        self.count += 1
        obs = np.array([self.count, 1.0], np.float32)
        return obs, 1.0, self.count >= self.end, False, {}


@pytest.mark.parametrize("end,limit,timeout", [(3, 3, False), (5, 3, True), (2, 3, False)])
def test_termination_on_the_time_limit_step_is_not_a_timeout(end, limit, timeout):
    env = GymEnvWrapper(gymnasium.wrappers.TimeLimit(_EndsAt(end), limit),
                        final_observation=True)
    steps = _run(env, [np.zeros(1, np.float32)] * min(end, limit))
    last = steps[-1]
    assert last.done
    assert bool(last.env_info.timeout) is timeout  # terminated wins over truncated
    assert np.array_equal(last.env_info.final_observation, [min(end, limit), 1.0])
    assert all(not s.done and not np.any(s.env_info.final_observation) for s in steps[:-1])


def test_final_observation_off_by_default():
    env = make("Pendulum-v1", max_episode_steps=2)
    steps = _run(env, [np.zeros(1, np.float32)] * 2)
    assert steps[-1].env_info._fields == ("timeout",)
    assert bool(steps[-1].env_info.timeout)


def test_final_observation_needs_array_observations():
    env = gymnasium.make("Pendulum-v1")
    env.observation_space = gymnasium.spaces.Dict(
        {"a": gymnasium.spaces.Box(-1, 1, (2,)), "b": gymnasium.spaces.Discrete(3)})
    with pytest.raises(ValueError, match="final_observation"):
        GymEnvWrapper(env, final_observation=True)
