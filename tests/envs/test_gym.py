"""Tests for GymEnvWrapper, EnvInfoWrapper and make on gymnasium environments."""
import pickle
import warnings

import gymnasium
import numpy as np
import pytest
from gymnasium import spaces as gs

from rlfast.envs import EnvInfoWrapper, EnvSpaces, EnvStep, GymEnvWrapper, make
from rlfast.spaces import Composite, FloatBox, GymSpaceWrapper, IntBox
import tests.envs._space_envs  # noqa: F401  (registers the rlfast_test/ ids)


class ScriptedInfoEnv(gymnasium.Env):
    """Never terminates; step t returns infos[t] (the last one repeated)."""

    observation_space = gs.Box(-1.0, 1.0, (2,), np.float64)
    action_space = gs.Discrete(2)

    def __init__(self, infos):
        self.infos = infos
        self.t = 0
        self.actions = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2), {}

    def step(self, action):
        self.actions.append(action)
        info = self.infos[min(self.t, len(self.infos) - 1)]
        self.t += 1
        return np.full(2, 0.5), 1, False, False, dict(info)


def run_steps(env, n):
    env.reset()
    return [env.step(0) for _ in range(n)]


def test_cartpole_spaces_and_steps():
    env = GymEnvWrapper(gymnasium.make("CartPole-v1"))
    assert isinstance(env.spaces, EnvSpaces)
    assert isinstance(env.action_space, GymSpaceWrapper) and env.action_space.n == 2
    assert env.observation_space.dtype == np.float32 and env.horizon == 500
    env.seed(0)
    obs = env.reset()
    assert obs.dtype == np.float32 and obs.shape == (4,)
    done, n = False, 0
    while not done:
        step = env.step(env.action_space.sample())
        assert isinstance(step, EnvStep)
        assert isinstance(step.reward, float) and step.observation.dtype == np.float32
        assert step.env_info._fields == ("timeout",)
        done = step.done
        n += 1
    assert n < 500  # random actions make the pole fall: terminated, not cut by the time limit
    assert step.env_info.timeout is False
    env.close()


def test_time_limit_gives_timeout():
    env = GymEnvWrapper(gymnasium.make("CartPole-v1", max_episode_steps=5))
    assert env.horizon == 5
    env.seed(1)
    env.reset()
    steps = [env.step(t % 2) for t in range(5)]  # alternate so the pole does not fall
    assert [s.done for s in steps] == [False] * 4 + [True]
    assert [bool(s.env_info.timeout) for s in steps] == [False] * 4 + [True]


class EndingEnv(ScriptedInfoEnv):
    """Returns the scripted (terminated, truncated) flags."""

    def __init__(self, terminated, truncated):
        super().__init__([{}])
        self.flags = (terminated, truncated)

    def step(self, action):
        obs, reward, _, _, info = super().step(action)
        return obs, reward, *self.flags, info


@pytest.mark.parametrize("terminated, truncated, done, timeout", [
    (False, False, False, False),
    (True, False, True, False),
    (False, True, True, True),
    (True, True, True, False),  # terminated at the time limit: a real end, not a timeout
])
def test_done_and_timeout_semantics(terminated, truncated, done, timeout):
    env = GymEnvWrapper(EndingEnv(terminated, truncated))
    env.reset()
    step = env.step(0)
    assert step.done is done and step.env_info.timeout is timeout


def test_same_seed_same_observations():
    def rollout(seed):
        env = make("CartPole-v1", seed=seed)
        observations = [env.reset()]
        observations += [env.step(t % 2).observation for t in range(10)]
        return np.stack(observations)

    np.testing.assert_array_equal(rollout(3), rollout(3))
    assert not np.array_equal(rollout(3), rollout(4))


def test_seed_applies_to_next_reset_only():
    env = make("CartPole-v1")
    env.seed(5)
    first = env.reset()
    second = env.reset()  # continues the seeded RNG stream, not re-seeded
    env.seed(5)
    np.testing.assert_array_equal(env.reset(), first)
    assert not np.array_equal(first, second)


class BoxActionEnv(ScriptedInfoEnv):
    """Records each action it is given; actions in [-1, 2] x [-3, 3]."""

    action_space = gs.Box(np.array([-1.0, -3.0], np.float32), np.array([2.0, 3.0], np.float32))


def test_box_actions_are_clipped_for_the_env_and_left_as_drawn():
    inner = BoxActionEnv([{}])
    env = GymEnvWrapper(inner)
    env.reset()
    drawn = np.array([5.0, -7.5], np.float32)
    env.step(drawn)
    env.step(np.array([0.25, -2.0], np.float32))
    np.testing.assert_array_equal(inner.actions[0], [2.0, -3.0])  # each dim to its own bound
    np.testing.assert_array_equal(inner.actions[1], [0.25, -2.0])
    np.testing.assert_array_equal(drawn, [5.0, -7.5])  # the sampler's copy is not touched
    assert inner.actions[0] is not inner.actions[1]
    raw = GymEnvWrapper(BoxActionEnv([{}]), clip_action=False)
    raw.reset()
    raw.step(drawn)
    np.testing.assert_array_equal(raw.env.actions[0], [5.0, -7.5])


def test_discrete_action_reaches_env_as_int():
    inner = ScriptedInfoEnv([{}])
    env = GymEnvWrapper(inner)
    env.reset()
    env.step(np.array(1, dtype=np.int64))
    env.step(np.int32(0))
    assert inner.actions == [1, 0] and all(type(a) is int for a in inner.actions)


def test_env_info_layout_fixed_at_first_step():
    infos = [
        {"score": 1.5, "steps": 2, "vec": np.ones(3, np.float32), "episode": {"r": 1.0, "l": 3},
         "name": "level-1", "_score": True, "final_info": {}},
        {"score": 2.5, "vec": np.zeros(3, np.float64), "episode": {"r": 2.0, "l": 4}},
    ]
    env = GymEnvWrapper(ScriptedInfoEnv(infos))
    env.reset()
    with pytest.warns(UserWarning, match="'name'"):
        first = env.step(0)
    info = first.env_info
    assert info._fields == ("score", "steps", "vec", "episode", "timeout")
    assert info.score == 1.5 and isinstance(info.score, np.floating)
    assert info.episode.l == 3 and info.episode._fields == ("r", "l")
    with pytest.warns(UserWarning, match=r"'steps' of ScriptedInfoEnv.*missing.*zeros.*"
                                         r"EnvInfoWrapper\(env, info_example=\{'steps'"):
        second = env.step(0).env_info
    assert second.steps == 0 and second.steps.dtype == info.steps.dtype  # missing -> zero
    assert second.vec.dtype == np.float32  # cast to the first step's dtype
    assert second.episode.r == 2.0 and second.timeout is False
    back = pickle.loads(pickle.dumps(second))
    assert back._fields == second._fields and back.episode.l == 4
    np.testing.assert_array_equal(back.vec, second.vec)


def test_new_key_warns_once_and_is_dropped():
    infos = [{"a": 1.0}, {"a": 2.0, "late": 5.0}, {"a": 3.0, "late": 6.0}]
    env = GymEnvWrapper(ScriptedInfoEnv(infos))
    env.reset()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        steps = [env.step(0) for _ in range(6)]
    messages = [str(w.message) for w in caught]
    assert len([m for m in messages if "'late'" in m]) == 1, messages
    assert len(messages) == 1
    assert "of ScriptedInfoEnv" in messages[0] and "rlfast.envs.EnvInfoWrapper" in messages[0]
    assert all(s.env_info._fields == ("a", "timeout") for s in steps)
    assert steps[-1].env_info.a == 3.0


def test_shape_change_raises_naming_key():
    infos = [{"pos": np.zeros(2)}, {"pos": np.zeros(3)}]
    env = GymEnvWrapper(ScriptedInfoEnv(infos))
    env.reset()
    env.step(0)
    with pytest.raises(ValueError, match=r"'pos' of ScriptedInfoEnv.*\(2,\).*\(3,\).*"
                                         r"EnvInfoWrapper.*drop_other_keys=True"):
        env.step(0)


def test_env_info_wrapper_can_drop_other_keys():
    infos = [{"pos": np.zeros(2), "a": 1.0}, {"pos": np.zeros(3), "a": 2.0}]
    env = GymEnvWrapper(EnvInfoWrapper(ScriptedInfoEnv(infos), {"a": 0.0, "b": 0},
                                       drop_other_keys=True))
    steps = run_steps(env, 3)
    assert all(s.env_info._fields == ("a", "b", "timeout") for s in steps)
    assert steps[-1].env_info.a == 2.0 and steps[-1].env_info.b == 0


def test_dtype_kind_change_raises():
    env = GymEnvWrapper(ScriptedInfoEnv([{"lives": 3}, {"lives": 2.5}]))
    env.reset()
    env.step(0)
    with pytest.raises(ValueError, match="'lives'"):
        env.step(0)


def test_env_info_wrapper_infills():
    infos = [{"a": 1.0}, {"a": 2.0, "success": True, "stats": {"x": 4}}]
    base = ScriptedInfoEnv(infos)
    wrapped = EnvInfoWrapper(base, {"success": False, "stats": {"x": 0, "y": 0.0}})
    _, reset_info = wrapped.reset()
    assert reset_info == {"success": False, "stats": {"x": 0, "y": 0.0}}
    first = wrapped.step(0)[4]
    assert first == {"a": 1.0, "success": False, "stats": {"x": 0, "y": 0.0}}
    second = wrapped.step(0)[4]
    assert second == {"a": 2.0, "success": True, "stats": {"x": 4, "y": 0.0}}
    # Through GymEnvWrapper the late keys now have buffer space from the first step.
    env = GymEnvWrapper(EnvInfoWrapper(ScriptedInfoEnv(infos), {"success": False,
                                                                "stats": {"x": 0}}))
    env.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        steps = [env.step(0).env_info for _ in range(2)]
    assert bool(steps[0].success) is False and bool(steps[1].success) is True
    assert steps[1].stats.x == 4


def test_make_with_info_example_and_unknown_id():
    env = make("CartPole-v1", info_example={"bonus": 0.0}, max_episode_steps=3)
    env.reset()
    assert env.step(0).env_info._fields == ("bonus", "timeout")
    assert env.horizon == 3
    with pytest.raises(gymnasium.error.Error, match="NoSuchEnv-v0"):
        make("NoSuchEnv-v0")


class DictEnv(gymnasium.Env):
    """Dict observations and Dict actions; echoes the action into the observation."""

    observation_space = gs.Dict({"pos": gs.Box(-5.0, 5.0, (2,), np.float64),
                                 "mode": gs.Discrete(3)})
    action_space = gs.Dict({"move": gs.Box(-1.0, 1.0, (2,), np.float64),
                            "mode": gs.Discrete(3)})

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return {"pos": np.zeros(2), "mode": 0}, {}

    def step(self, action):
        assert isinstance(action, dict) and type(action["mode"]) is int
        assert action["move"].dtype == np.float64
        return {"pos": action["move"], "mode": action["mode"]}, 0.0, True, False, {}


def test_dict_spaces_convert_and_revert():
    env = GymEnvWrapper(DictEnv())
    assert isinstance(env.observation_space.space, Composite)
    assert isinstance(env.action_space.space, Composite)
    obs = env.reset()
    assert obs._fields == ("mode", "pos") and obs.pos.dtype == np.float32
    action = env.action_space.sample()
    step = env.step(action)
    np.testing.assert_allclose(step.observation.pos, action.move)
    assert int(step.observation.mode) == int(action.mode)
    assert step.done and step.env_info.timeout is False
    assert isinstance(env.action_space.spaces[0], IntBox)
    assert isinstance(env.observation_space.spaces[1], FloatBox)


def test_flatten_observation_dict_follows_the_dict_space_key_order():
    from tests.envs._space_envs import DictObsEnv
    inner = DictObsEnv()
    env = GymEnvWrapper(inner, flatten_observation=True)
    space = env.observation_space
    assert isinstance(space.space, FloatBox) and space.shape == (5,) and space.dtype == np.float32
    # gymnasium's Dict sorts its keys ("cue" before "position"); Discrete entries are one-hot.
    np.testing.assert_array_equal(space.low, [0, 0, 0, -1, -1])
    obs = env.reset()
    expected = np.concatenate([np.eye(3)[inner.cue], inner.position])
    np.testing.assert_array_equal(obs, expected.astype(np.float32))
    step = env.step(inner.cue)
    assert step.observation.shape == (5,) and step.reward == 1.0
    assert obs.dtype == np.float32 and space.contains(obs)


def test_flatten_observation_tuple_and_make():
    env = make("rlfast_test/TupleObs-v0", flatten_observation=True)
    assert env.observation_space.shape == (5,)  # Box(2) then one-hot Discrete(3), tuple order
    obs = env.reset()
    assert obs.shape == (5,) and obs[2:].sum() == 1.0 and np.all(np.abs(obs[:2]) <= 1)
    # Without flattening a Tuple observation cannot be wrapped, and the error names the cure.
    with pytest.raises(TypeError, match="flatten_observation=True"):
        make("rlfast_test/TupleObs-v0")
    back = pickle.loads(pickle.dumps(env.observation_space))
    np.testing.assert_array_equal(back.convert((np.zeros(2, np.float32), 1)), [0, 0, 0, 1, 0])


def test_env_name_is_the_gymnasium_id():
    assert make("CartPole-v1").name == "CartPole-v1"
    assert GymEnvWrapper(ScriptedInfoEnv([{}])).name == "ScriptedInfoEnv"
