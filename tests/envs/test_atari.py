"""Tests for rlfast.envs.atari: frame processing, lives, horizon, rewards, seeding, traj info.

Frames are checked against an independent computation from the emulator's own grayscale
screens (a 2x nearest downsample of rows 1..208 is every other row and column)."""
import pickle

import cv2
import numpy as np
import pytest

from rlfast.envs import AtariEnv as ExportedAtariEnv
from rlfast.envs import AtariTrajInfo as ExportedAtariTrajInfo
from rlfast.envs.atari import AtariEnv, AtariTrajInfo, EnvInfo, resolve_game
from rlfast.envs.base import Env
from rlfast.samplers.collections import TrajInfo


def _play(env, actions):
    return [env.step(a) for a in actions]


def test_exports_and_base_class():
    assert ExportedAtariEnv is AtariEnv and ExportedAtariTrajInfo is AtariTrajInfo
    env = AtariEnv("pong", seed=0)
    assert isinstance(env, Env)
    env.close()


def test_spaces_shapes_and_dtypes():
    env = AtariEnv("pong", num_img_obs=3, seed=0)
    assert env.observation_space.shape == (3, 104, 80)
    assert env.observation_space.dtype == np.uint8
    assert env.action_space.n == len(env.ale.getMinimalActionSet()) == env.num_actions == 6
    assert env.spaces.action is env.action_space
    obs = env.reset()
    assert obs.shape == (3, 104, 80) and obs.dtype == np.uint8
    assert env.observation_space.contains(obs)
    step = env.step(np.int64(2))
    assert step.observation.shape == (3, 104, 80) and step.observation.dtype == np.uint8
    assert isinstance(step.reward, float) and isinstance(step.done, bool)
    env.close()


def test_84x84_option():
    env = AtariEnv("pong", obs_type="84x84", seed=0, max_start_noops=0)
    assert env.observation_space.shape == (4, 84, 84)
    state = env.ale.cloneState()
    obs = env.step(0).observation
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    # The classic scheme: area-resize of the whole 210x160 max-pooled frame.
    env.ale.restoreState(state)
    prev, last = np.empty((210, 160), np.uint8), np.empty((210, 160), np.uint8)
    for _ in range(3):
        env.ale.act(env.ale.getMinimalActionSet()[0])
    env.ale.getScreenGrayscale(prev)
    env.ale.act(env.ale.getMinimalActionSet()[0])
    env.ale.getScreenGrayscale(last)
    expected = cv2.resize(np.maximum(prev, last), (84, 84), interpolation=cv2.INTER_AREA)
    np.testing.assert_array_equal(obs[-1], expected)
    with pytest.raises(ValueError, match="obs_type"):
        AtariEnv("pong", obs_type="96x96")


def test_reset_fills_zeros_then_first_frame_and_stack_shifts():
    env = AtariEnv("pong", seed=1)
    obs = env.reset()
    assert not obs[:-1].any(), "older slots start as zeros"
    assert obs[-1].any()
    rng = np.random.default_rng(0)
    for _ in range(6):
        new = env.step(rng.integers(env.num_actions)).observation
        np.testing.assert_array_equal(new[:-1], obs[1:])  # oldest first, newest last
        obs = new
    # Returned observations are copies, not views of the internal frame ring.
    held = obs.copy()
    obs[...] = 7
    new = env.step(0).observation
    np.testing.assert_array_equal(new[:-1], held[1:])
    assert not np.shares_memory(new, env._ring)
    env.close()


def test_observation_is_max_of_last_two_frames():
    env = AtariEnv("pong", seed=0, max_start_noops=0, frame_skip=4)
    ale = env.ale
    actions = ale.getMinimalActionSet()
    prev, last = np.empty((210, 160), np.uint8), np.empty((210, 160), np.uint8)
    rng = np.random.default_rng(3)
    max_mattered = False
    for _ in range(60):
        a = int(rng.integers(env.num_actions))
        state = ale.cloneState()
        obs = env.step(a).observation
        after = ale.cloneState()
        ale.restoreState(state)  # replay the same 4 frames by hand
        for _ in range(3):
            ale.act(actions[a])
        ale.getScreenGrayscale(prev)
        ale.act(actions[a])
        ale.getScreenGrayscale(last)
        ale.restoreState(after)
        expected = np.maximum(prev, last)[1:-1][::2, ::2]
        np.testing.assert_array_equal(obs[-1], expected)
        max_mattered |= not np.array_equal(expected, last[1:-1][::2, ::2])
    assert max_mattered, "some step should have a pixel where the earlier frame was brighter"
    env.close()


def test_episodic_lives_breakout_continues_game_without_reset():
    env = AtariEnv("breakout", seed=0, max_start_noops=0, episodic_lives=True)
    assert env.lives == 5
    env.step(1)  # FIRE launches the ball; NOOPs then miss it
    for _ in range(200):
        step = env.step(0)
        if step.done:
            break
    assert step.done and not step.env_info.traj_done and not step.env_info.timeout
    assert env.lives == env.ale.lives() == 4
    frame_number = env.ale.getEpisodeFrameNumber()
    # The collector keeps stepping: same game, frame stack continues, no reset happened.
    nxt = env.step(0)
    np.testing.assert_array_equal(nxt.observation[:-1], step.observation[1:])
    assert env.ale.getEpisodeFrameNumber() == frame_number + 4
    assert env.lives == 4 and not nxt.done
    env.close()


def test_game_over_sets_traj_done_and_fire_after_lost_life():
    env = AtariEnv("breakout", seed=0, max_start_noops=0, fire_on_reset=True)
    dones, traj_dones = 0, 0
    for _ in range(1000):  # fire_on_reset relaunches the ball after every lost life
        step = env.step(0)
        dones += step.done
        if step.env_info.traj_done:
            traj_dones += 1
            break
    assert traj_dones == 1 and dones == 5 and env.lives == 0
    assert step.done and not step.env_info.timeout
    env.reset()
    assert env.lives == 5
    env.close()


def test_life_loss_is_not_done_without_episodic_lives():
    env = AtariEnv("breakout", seed=0, max_start_noops=0, episodic_lives=False,
                   fire_on_reset=True)
    for _ in range(40):
        step = env.step(0)
        assert not step.done
    assert env.lives < 5
    env.close()


def test_horizon_timeout():
    env = AtariEnv("pong", horizon=10, seed=0)
    assert env.horizon == 10
    for episode in range(2):
        env.reset()
        for t in range(1, 11):
            step = env.step(0)
            assert step.done == (t == 10)
            assert step.env_info.traj_done == (t == 10)
            assert step.env_info.timeout == (t == 10)
    env.close()
    assert AtariEnv("pong", horizon=None, seed=0).horizon is None


def test_reward_clipping_keeps_raw_game_score():
    clipped = AtariEnv("space_invaders", seed=4, clip_reward=True)
    raw_env = AtariEnv("space_invaders", seed=4, clip_reward=False)
    actions = np.random.default_rng(1).choice([1, 4, 5], size=250)  # firing actions
    raw_scores = []
    for step_c, step_r in zip(_play(clipped, actions), _play(raw_env, actions)):
        raw = step_r.env_info.game_score
        assert step_c.env_info.game_score == raw  # identical games
        assert step_r.reward == raw
        assert step_c.reward == np.sign(raw) and step_c.reward in (-1.0, 0.0, 1.0)
        raw_scores.append(raw)
    assert max(raw_scores) > 1, "space invaders scores 5+ per alien"
    assert isinstance(raw_scores[0], float)


def test_noop_starts():
    env0 = AtariEnv("pong", seed=0, max_start_noops=0)
    env30 = AtariEnv("pong", seed=0, max_start_noops=30)
    counts = []
    differs = False
    for seed in range(6):
        env0.seed(seed)
        env30.seed(seed)
        first0, first30 = env0.reset(), env30.reset()
        assert env0.start_noops == 0
        assert 0 <= env30.start_noops <= 30
        counts.append(env30.start_noops)
        differs |= env30.start_noops > 0 and not np.array_equal(first0, first30)
    assert differs
    assert len(set(counts)) > 1, "different seeds should draw different no-op counts"
    with pytest.raises(ValueError, match="max_start_noops"):
        AtariEnv("pong", max_start_noops=-1)


def _episode_frames(env, seed, steps):
    env.seed(seed)
    frames = [env.reset()]
    rng = np.random.default_rng(123)
    for _ in range(steps):
        step = env.step(rng.integers(env.num_actions))
        frames.append(step.observation[-1])
        if step.env_info.traj_done:
            break
    return frames


def test_seeding_reproduces_whole_episode_with_sticky_actions():
    kwargs = dict(episodic_lives=False, repeat_action_probability=0.25)
    env_a = AtariEnv("breakout", seed=11, **kwargs)
    env_b = AtariEnv("breakout", seed=99, **kwargs)  # reseeded below
    frames_a = _episode_frames(env_a, 5, 3000)
    frames_b = _episode_frames(env_b, 5, 3000)
    assert len(frames_a) == len(frames_b) < 3001, "the episode should end"
    for fa, fb in zip(frames_a, frames_b):
        np.testing.assert_array_equal(fa, fb)
    # Constructor seed == seed() then reset().
    env_c = AtariEnv("breakout", seed=5, **kwargs)
    env_d = AtariEnv("breakout", seed=0, **kwargs)
    env_d.seed(5)
    env_d.reset()
    np.testing.assert_array_equal(env_c.step(1).observation, env_d.step(1).observation)


def test_different_seeds_change_ale_randomness():
    # No no-ops, so only ALE's random_seed (sticky actions) can make the frames differ.
    kwargs = dict(max_start_noops=0, repeat_action_probability=0.25, episodic_lives=False)
    frames_1 = _episode_frames(AtariEnv("breakout", **kwargs), 1, 150)
    frames_2 = _episode_frames(AtariEnv("breakout", **kwargs), 2, 150)
    assert any(not np.array_equal(a, b) for a, b in zip(frames_1, frames_2))


def test_game_names():
    assert resolve_game("pong") == "pong"
    assert resolve_game("SpaceInvaders") == "space_invaders"
    assert resolve_game("space-invaders") == "space_invaders"
    assert AtariEnv("SpaceInvaders", seed=0).game == "space_invaders"
    with pytest.raises(ValueError, match="pongg") as err:
        AtariEnv("pongg")
    assert "'pong'" in str(err.value)
    with pytest.raises(ValueError, match="space_invaders"):
        resolve_game("SpaceInvader")


def test_argument_and_action_checks():
    with pytest.raises(ValueError, match="frame_skip"):
        AtariEnv("pong", frame_skip=0)
    with pytest.raises(ValueError, match="repeat_action_probability"):
        AtariEnv("pong", repeat_action_probability=1.5)
    with pytest.raises(ValueError, match="FIRE"):
        AtariEnv("freeway", fire_on_reset=True)
    env = AtariEnv("pong", seed=0)
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        env.step(6)
    with pytest.raises(ValueError, match=r"\[0, 6\)"):
        env.step(-1)
    assert env.step(np.array(3)).observation.shape == (4, 104, 80)  # 0-d array action
    env.close()
    env.close()  # idempotent
    with pytest.raises(RuntimeError, match="closed"):
        env.reset()


def test_env_info_pickles():
    env = AtariEnv("pong", seed=0)
    info = env.step(0).env_info
    assert type(info) is EnvInfo and info._fields == ("game_score", "traj_done", "timeout")
    assert isinstance(info.game_score, float)
    assert isinstance(info.traj_done, bool) and isinstance(info.timeout, bool)
    restored = pickle.loads(pickle.dumps(info))
    assert restored == info and type(restored) is EnvInfo
    env.close()


def test_atari_traj_info_matches_traj_info_and_sums_game_score():
    rewards = [0.0, 1.0, 0.0, -1.0, 1.0]
    scores = [0.0, 30.0, 0.0, -1.0, 5.0]
    for discount in (1.0, 0.9):
        info, ref = AtariTrajInfo(_discount=discount), TrajInfo(_discount=discount)
        for r, s in zip(rewards, scores):
            env_info = EnvInfo(game_score=s, traj_done=False, timeout=False)
            info.step(None, 0, r, False, None, env_info)
            ref.step(None, 0, r, False, None, env_info)
        assert info.terminate(None) is info
        assert info.GameScore == pytest.approx(34.0)
        for key in ref:
            assert info[key] == pytest.approx(ref[key]), key
        expected_disc = sum(discount ** t * r for t, r in enumerate(rewards))
        assert info.DiscountedReturn == pytest.approx(expected_disc)
        assert info.Length == 5 and info.NonzeroRewards == 3 and info.Return == 1.0
    assert AtariTrajInfo(extra=3).extra == 3
