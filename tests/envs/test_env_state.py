"""Saving and restoring environment state for resumed runs: rlfast.envs.state, the
get_state/set_state of GymEnvWrapper and AtariEnv, the Env default, and render().

The reference for a restored environment is the environment the state was captured from:
after set_state both must produce the same observations, rewards and dones, step for step,
across episode ends. Each check first makes sure the two environments differ without the
restore (different seeds), so the equality cannot hold by accident."""
import collections

import gymnasium
import numpy as np
import pytest
import torch
from gymnasium import spaces as gs

from rlfast.envs.atari.atari_env import AtariEnv
from rlfast.envs.base import Env, EnvStep
from rlfast.envs.gym import EnvInfoWrapper, GymEnvWrapper, make
from rlfast.envs.state import gym_env_state, is_plain, set_gym_env_state
from rlfast.spaces import FloatBox, IntBox
from rlfast.utils.logging import load_snapshot, logger
from rlfast.utils.logging.snapshot import _numpy_safe_globals

try:  # MuJoCo's renderer imports glfw, whose import runs a version-check subprocess: import
    # it at collection, not inside a test that tests/_parallel.py's in-process guard watches
    # (alone, that test failed; in the suite another module had imported it first).
    import gymnasium.envs.mujoco.mujoco_env  # noqa: F401
except (ImportError, gymnasium.error.DependencyNotInstalled):  # no rlfast[mujoco]: it skips
    pass


@pytest.fixture(autouse=True)
def clean_logger():
    logger.reset()
    yield
    logger.reset()


# ------------------------------------------------------------------------- helpers

def _actions(env, n, seed):
    """``n`` random actions for a GymEnvWrapper or AtariEnv, from the test's own RNG."""
    rng = np.random.default_rng(seed)
    if isinstance(env, AtariEnv):
        return [int(a) for a in rng.integers(0, env.num_actions, n)]
    space = env.env.action_space
    if isinstance(space, gs.Discrete):
        return [int(a) for a in rng.integers(0, space.n, n)]
    return [rng.uniform(space.low, space.high).astype(np.float32) for _ in range(n)]


def _rollout(env, actions):
    """(observation, reward, done) per step, with the reset observation after each done."""
    out = []
    for a in actions:
        step = env.step(a)
        out.append((np.array(step.observation, copy=True), step.reward, step.done))
        if step.done and not (isinstance(env, AtariEnv) and not step.env_info.traj_done):
            out.append((np.array(env.reset(), copy=True), "reset", None))
    return out


def _n_dones(trajectory):
    return sum(1 for _, r, _ in trajectory if r == "reset")


def _assert_same(a, b):
    assert len(a) == len(b)
    for i, ((oa, ra, da), (ob, rb, db)) in enumerate(zip(a, b)):
        np.testing.assert_array_equal(oa, ob, err_msg=f"observation {i}")
        assert ra == rb and da == db, (i, ra, rb, da, db)


def _differ(a, b):
    return any(not np.array_equal(oa, ob) or ra != rb for (oa, ra, _), (ob, rb, _) in zip(a, b))


def _advance(env, n, seed):
    env.reset()
    _rollout(env, _actions(env, n, seed))


def _save_and_load(tmp_path, state):
    """Through the logger's snapshot and load_snapshot (weights_only=True)."""
    logger.set_snapshot_dir(tmp_path)
    logger.set_snapshot_mode("last")
    path = logger.save_itr_params(3, dict(env_state=state))
    return load_snapshot(path)["env_state"]


# (id, steps before the capture, steps compared): the compared steps cross an episode end
# (a termination or the time limit).
GYM_CASES = [("CartPole-v1", 7, 300), ("Pendulum-v1", 150, 300),
             ("MountainCar-v0", 150, 300), ("Acrobot-v1", 400, 300)]


# ------------------------------------------------------------------------- gym envs

@pytest.mark.parametrize("env_id,k,n", GYM_CASES)
def test_gym_state_continues_the_episode_exactly(env_id, k, n):
    source = make(env_id, seed=1)
    _advance(source, k, seed=10)
    state = source.get_state()
    assert state is not None and is_plain(state)

    target = make(env_id, seed=2)
    _advance(target, 5, seed=11)
    control = make(env_id, seed=2)
    _advance(control, 5, seed=11)

    target.set_state(state)
    actions = _actions(source, n, seed=12)
    expected = _rollout(source, actions)
    restored = _rollout(target, actions)
    assert _n_dones(expected) >= 1  # the comparison crosses an episode end
    _assert_same(expected, restored)
    assert _differ(expected, _rollout(control, actions))  # not equal without the restore


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Pendulum-v1"])
def test_gym_state_is_a_copy_and_rewinds_the_same_env(env_id):
    """Stepping on after the capture leaves the captured state alone: restoring it into the
    same environment replays the same steps."""
    env = make(env_id, seed=3)
    _advance(env, 20, seed=1)
    state = env.get_state()
    actions = _actions(env, 250, seed=2)
    first = _rollout(env, actions)
    env.set_state(state)
    _assert_same(first, _rollout(env, actions))


@pytest.mark.parametrize("env_id", ["CartPole-v1", "Acrobot-v1"])
def test_gym_state_survives_weights_only_snapshot(tmp_path, env_id):
    source = make(env_id, seed=5)
    _advance(source, 30, seed=3)
    state = source.get_state()
    loaded = _save_and_load(tmp_path, state)
    target = make(env_id, seed=6)
    _advance(target, 3, seed=4)
    target.set_state(loaded)
    actions = _actions(source, 200, seed=5)
    _assert_same(_rollout(source, actions), _rollout(target, actions))


def test_gym_state_plain_torch_load_with_numpy_safe_globals(tmp_path):
    env = make("MountainCar-v0", seed=0)
    _advance(env, 10, seed=0)
    state = env.get_state()
    torch.save(state, tmp_path / "s.pt")
    with torch.serialization.safe_globals(_numpy_safe_globals()):
        loaded = torch.load(tmp_path / "s.pt", weights_only=True)
    target = make("MountainCar-v0", seed=9)
    target.reset()
    target.set_state(loaded)
    actions = _actions(env, 250, seed=1)
    _assert_same(_rollout(env, actions), _rollout(target, actions))


def test_pending_seed_travels_with_the_state():
    """A seed set but not yet applied (applied at the next reset) is part of the state."""
    source = make("CartPole-v1")
    source.seed(123)
    state = source.get_state()
    assert state["pending_seed"] == 123
    target = make("CartPole-v1", seed=7)
    target.set_state(state)
    reference = make("CartPole-v1", seed=123)
    first = reference.reset()
    np.testing.assert_array_equal(target.reset(), first)
    np.testing.assert_array_equal(source.reset(), first)
    assert not np.array_equal(make("CartPole-v1", seed=7).reset(), first)


def test_gym_env_state_layers_outermost_first_and_generator_as_plain_data():
    env = make("CartPole-v1", seed=0)
    env.reset()
    env.step(1)
    layers = gym_env_state(env.env)
    chain = [env.env]
    while isinstance(chain[-1], gymnasium.Wrapper):
        chain.append(chain[-1].env)
    assert len(layers) == len(chain)
    assert layers[0]["_elapsed_steps"] == 1  # TimeLimit is outermost
    inner = layers[-1]
    np.testing.assert_array_equal(inner["state"], env.env.unwrapped.state)
    assert inner["state"] is not env.env.unwrapped.state  # copied
    generator = inner["_np_random"]
    assert is_plain(generator)
    expected = env.env.unwrapped.np_random.bit_generator.state
    assert generator["__numpy_generator_state__"] == expected


# ------------------------------------------------------------------------- non-plain state

class DequeWrapper(gymnasium.Wrapper):
    """Keeps the last observations in a deque (like a frame stack)."""

    def __init__(self, env):
        super().__init__(env)
        self.history = collections.deque(maxlen=3)

    def step(self, action):
        out = self.env.step(action)
        self.history.append(out[0])
        return out


class Opaque:
    pass


class OpaqueWrapper(gymnasium.Wrapper):
    def __init__(self, env, value):
        super().__init__(env)
        self.thing = value


@pytest.mark.parametrize("value", [Opaque(), [1, Opaque()], {"a": Opaque()}, {1: 2.0},
                                   np.array([Opaque()], dtype=object), (1, 2, {3}),
                                   collections.namedtuple("P", "x")(1)],
                         ids=["object", "list-of-object", "dict-of-object", "int-keyed-dict",
                              "object-array", "tuple-with-set", "namedtuple"])
def test_non_plain_attribute_gives_none(value):
    env = GymEnvWrapper(OpaqueWrapper(gymnasium.make("CartPole-v1"), value))
    env.reset()
    assert not is_plain(value)
    assert gym_env_state(env.env) is None
    assert env.get_state() is None


def test_deque_wrapper_and_frame_stack_give_none():
    env = GymEnvWrapper(DequeWrapper(gymnasium.make("CartPole-v1")))
    env.reset()
    env.step(0)
    assert env.get_state() is None
    stacked = GymEnvWrapper(gymnasium.wrappers.FrameStackObservation(
        gymnasium.make("CartPole-v1"), 4))
    stacked.reset()
    assert stacked.get_state() is None


def test_inner_env_with_non_plain_state_gives_none():
    class EngineEnv(gymnasium.Env):
        observation_space = gs.Box(-1.0, 1.0, (2,), np.float32)
        action_space = gs.Discrete(2)

        def __init__(self):
            self.engine = Opaque()  # e.g. a physics engine's data

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return np.zeros(2, np.float32), {}

        def step(self, action):
            return np.zeros(2, np.float32), 0.0, False, False, {}

    env = GymEnvWrapper(EngineEnv())
    env.reset()
    assert env.get_state() is None


def test_is_plain():
    plain = [None, True, 3, 2.5, "s", b"b", np.float32(1), np.int64(2), np.zeros((2, 3)),
             np.array(["a"]), [1, (2.0, "x")], {"a": [np.ones(2)], "b": {"c": None}}, ()]
    for value in plain:
        assert is_plain(value), value
    for value in [object(), {1: 1}, {"a": {2: 3}}, np.array([None], dtype=object),
                  {"a", "b"}, collections.deque([1]), [set()],
                  np.random.default_rng(0), torch.zeros(2)]:
        assert not is_plain(value), value


def test_skipped_attributes_and_spaces_are_not_state():
    """Spaces, specs and the render surfaces are configuration or caches: skipped, not a
    reason to give up."""
    inner = gymnasium.make("CartPole-v1").unwrapped
    inner.extra_space = gs.Discrete(3)
    env = GymEnvWrapper(inner)
    env.reset()
    state = env.get_state()
    assert state is not None
    names = set(state["layers"][0])
    assert "extra_space" not in names and "action_space" not in names
    assert "state" in names


# ------------------------------------------------------------------------- refusals

def test_different_number_of_layers_is_refused():
    source = make("CartPole-v1", seed=0)
    source.reset()
    state = source.get_state()
    fewer = GymEnvWrapper(gymnasium.make("CartPole-v1", disable_env_checker=True))
    more = make("CartPole-v1", info_example={})
    for target in (fewer, more):
        target.reset()
        with pytest.raises(ValueError, match="wrapper chain"):
            target.set_state(state)
        with pytest.raises(ValueError, match="wrapper chain"):
            set_gym_env_state(target.env, state["layers"])


def test_other_env_with_same_number_of_layers_is_refused():
    """CartPole's state put into MountainCar (both TimeLimit / OrderEnforcing /
    PassiveEnvChecker / env) must be refused, not written attribute by attribute."""
    source = make("CartPole-v1", seed=0)
    source.reset()
    source.step(0)
    target = make("MountainCar-v0", seed=0)
    target.reset()
    with pytest.raises(ValueError):
        target.set_state(source.get_state())


def test_reordered_wrapper_chain_with_same_length_is_refused():
    """[TimeLimit, OrderEnforcing, PassiveEnvChecker, CartPole] vs
    [EnvInfoWrapper, TimeLimit, OrderEnforcing, CartPole]: same length, other layers."""
    source = make("CartPole-v1", seed=0)
    source.reset()
    state = source.get_state()
    target = GymEnvWrapper(EnvInfoWrapper(
        gymnasium.make("CartPole-v1", disable_env_checker=True), {}))
    target.reset()
    with pytest.raises(ValueError):
        target.set_state(state)


# ------------------------------------------------------------------------- base Env

class PlainEnv(Env):
    def __init__(self):
        self._observation_space = FloatBox(0.0, 1.0, shape=(1,))
        self._action_space = IntBox(0, 2)

    def step(self, action):
        return EnvStep(np.zeros(1, np.float32), 0.0, False, None)

    def reset(self):
        return np.zeros(1, np.float32)


def test_env_base_get_state_is_none_and_set_state_refused():
    env = PlainEnv()
    assert env.get_state() is None
    with pytest.raises(TypeError, match="PlainEnv"):
        env.set_state({})
    with pytest.raises(TypeError, match="render"):
        env.render()


# ------------------------------------------------------------------------- Atari

def test_atari_state_continues_the_game_exactly(tmp_path):
    kwargs = dict(repeat_action_probability=0.25, horizon=60, max_start_noops=30)
    source = AtariEnv("pong", seed=1, **kwargs)
    _rollout(source, _actions(source, 25, seed=0))
    state = source.get_state()
    loaded = _save_and_load(tmp_path, state)
    assert isinstance(loaded["ale"], bytes)

    target = AtariEnv("pong", seed=2, **kwargs)
    _rollout(target, _actions(target, 3, seed=1))
    control = AtariEnv("pong", seed=2, **kwargs)
    _rollout(control, _actions(control, 3, seed=1))
    target.set_state(loaded)
    assert target.lives == source.lives and target.start_noops == source.start_noops
    # (ALE's screen buffer is not part of its state: render() shows the restored game from
    # the next step on, checked below.)

    actions = _actions(source, 150, seed=2)
    expected = _rollout(source, actions)
    restored = _rollout(target, actions)
    # horizon 60: the 150 steps cross resets, whose no-op counts come from the restored RNG.
    assert _n_dones(expected) >= 2
    _assert_same(expected, restored)
    np.testing.assert_array_equal(target.render(), source.render())
    assert _differ(expected, _rollout(control, actions))


def test_atari_state_is_a_copy():
    env = AtariEnv("pong", seed=4, horizon=None)
    _rollout(env, _actions(env, 10, seed=0))
    state = env.get_state()
    ring = state["ring"].copy()
    actions = _actions(env, 30, seed=1)
    first = _rollout(env, actions)
    np.testing.assert_array_equal(state["ring"], ring)  # not the live frame stack
    env.set_state(state)
    _assert_same(first, _rollout(env, actions))


@pytest.mark.parametrize("other", [dict(num_img_obs=3), dict(obs_type="84x84")])
def test_atari_other_frame_stack_shape_refused(other):
    state = AtariEnv("pong", seed=0).get_state()
    target = AtariEnv("pong", seed=0, **other)
    with pytest.raises(ValueError, match="frame stack"):
        target.set_state(state)


def test_atari_closed_env():
    env = AtariEnv("pong", seed=0)
    state = env.get_state()
    env.close()
    for call in (env.get_state, env.render, lambda: env.set_state(state)):
        with pytest.raises(RuntimeError, match="closed"):
            call()


def test_atari_render_is_the_colour_screen():
    env = AtariEnv("pong", seed=0)
    frame = env.render()
    assert frame.shape == (210, 160, 3) and frame.dtype == np.uint8
    # Independent check: the luminance of the colour frame against ALE's grayscale screen.
    gray = np.empty((210, 160), np.uint8)
    env.ale.getScreenGrayscale(gray)
    luma = frame.astype(np.float64) @ np.array([0.299, 0.587, 0.114])
    assert np.abs(luma - gray).max() <= 2
    for a in _actions(env, 40, seed=0):
        env.step(a)
    assert not np.array_equal(env.render(), frame)


# ------------------------------------------------------------------------- gym render

def test_gym_render_rgb_array(monkeypatch):
    monkeypatch.setenv("SDL_VIDEODRIVER", "dummy")
    env = make("CartPole-v1", render_mode="rgb_array", seed=0)
    env.reset()
    frame = env.render()
    unwrapped = env.env.unwrapped
    assert frame.shape == (unwrapped.screen_height, unwrapped.screen_width, 3)
    assert frame.dtype == np.uint8
    assert frame.std() > 0  # a picture, not a blank array
    # Rendering leaves surfaces on the env (skipped): its state can still be captured,
    # and a render-mode env restored from it continues identically.
    state = env.get_state()
    assert state is not None and is_plain(state)
    target = make("CartPole-v1", render_mode="rgb_array", seed=1)
    target.reset()
    target.set_state(state)
    np.testing.assert_array_equal(target.render(), frame)
    env.close()
    target.close()


def test_gym_render_without_render_mode_names_it():
    env = make("CartPole-v1", seed=0)
    env.reset()
    with pytest.raises(ValueError, match="render_mode"):
        env.render()


@pytest.mark.parametrize("env_id, extra", [("LunarLander-v3", "Box2D"),
                                           ("HalfCheetah-v5", "mujoco")])
def test_physics_engine_envs_are_not_captured(env_id, extra):
    """Box2D and MuJoCo keep their state in the engine (a b2World, an MjData), which is not
    plain data: get_state says so (None) and a resumed run starts new episodes there. Skips
    without the rlfast[box2d] / rlfast[mujoco] extras."""
    pytest.importorskip(extra)
    env = make(env_id, seed=0)
    try:
        env.reset()
        assert env.get_state() is None
    finally:
        env.close()
