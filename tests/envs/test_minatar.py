"""MinAtar games through the ``minatar:`` env family: MinAtarEnv step for step against
``minatar.Environment`` itself, its errors, horizon and seeding, the presets, and one short
``rlfast train`` run each of DQN (``python -m rlfast``) and Rainbow (in this process); both on
the serial sampler, so nothing here starts a process but that one serial run."""
from __future__ import annotations

import csv
import math
import subprocess
import sys

import numpy as np
import pytest

minatar = pytest.importorskip("minatar")

from rlfast.cli import main  # noqa: E402
from rlfast.envs.minatar import GAMES, MinAtarEnv, MinAtarError  # noqa: E402
from rlfast.experiments.config import ConfigError  # noqa: E402
from rlfast.experiments.presets import get_preset  # noqa: E402


def _raw_observation(game) -> np.ndarray:
    """MinAtar's boolean (10, 10, C) state as the env hands it out: uint8 0 / 255, (C, 10, 10)."""
    return np.transpose(game.state(), (2, 0, 1)).astype(np.uint8) * 255


@pytest.mark.parametrize("game", GAMES)
def test_steps_match_minatar_itself_across_resets(game):
    env, raw = MinAtarEnv(game), minatar.Environment(game)
    env.seed(11)
    raw.seed(11)
    obs = env.reset()
    raw.reset()
    actions = np.random.default_rng(0).integers(0, 6, 3000)
    resets = 0
    for t, action in enumerate(actions):
        np.testing.assert_array_equal(obs, _raw_observation(raw), err_msg=f"step {t}")
        step = env.step(action)
        reward, terminal = raw.act(int(action))
        assert (step.reward, step.done) == (float(reward), bool(terminal)), t
        assert step.env_info == (float(reward), bool(terminal), False)
        obs = step.observation
        if terminal:
            np.testing.assert_array_equal(obs, _raw_observation(raw))
            obs = env.reset()
            raw.reset()
            resets += 1
            if resets == 2:
                break
    assert resets >= 1  # Freeway's games last 2501 steps; the others end sooner at random
    assert obs.dtype == np.uint8 and obs.shape == env.observation_space.shape
    assert set(np.unique(obs)) <= {0, 255}


def test_seeding_is_reproducible_and_seeds_differ():
    def rollout(seed):
        env = MinAtarEnv("asterix", seed=seed)
        env.reset()
        return [env.step(t % 6).observation for t in range(60)]

    same = rollout(3), rollout(3)
    assert all(np.array_equal(a, b) for a, b in zip(*same))
    assert not all(np.array_equal(a, b) for a, b in zip(same[0], rollout(4)))


def test_horizon_cut_is_a_timeout_and_minimal_actions_map_to_minatar_ids():
    env = MinAtarEnv("freeway", horizon=5, minimal_action_set=True, seed=0)
    assert env.num_actions == 3 and env.action_space.n == 3
    assert env.horizon == 5
    for _ in range(4):
        assert not env.step(1).done
    step = env.step(1)
    assert step.done and step.env_info.traj_done and step.env_info.timeout
    with pytest.raises(ValueError, match=r"action must be an int in \[0, 3\)"):
        env.step(3)
    frame = env.render()
    assert frame.shape == (160, 160, 3) and frame.dtype == np.uint8 and frame.any()
    env.close()
    with pytest.raises(RuntimeError, match="was closed"):
        env.reset()


def test_unknown_game_names_the_games():
    with pytest.raises(MinAtarError, match="did you mean breakout\\? the games: asterix, "
                                           "breakout, freeway, seaquest, space_invaders"):
        MinAtarEnv("breakot")
    assert MinAtarEnv("SpaceInvaders").game == "space_invaders"
    with pytest.raises(ConfigError, match="unknown MinAtar game 'pong'"):
        get_preset("dqn", "minatar:pong")


def test_presets_and_the_algorithms_without_one():
    dqn = get_preset("dqn", "minatar:breakout")
    assert dqn["agent"]["model_kwargs"]["channels"] == [16]
    assert dqn["algo"]["replay_ratio"] == dqn["algo"]["batch_size"]  # one update per step
    rainbow = get_preset("rainbow", "minatar:space_invaders")
    assert rainbow["agent"]["model_kwargs"]["noisy"] and rainbow["algo"]["n_step_return"] == 3
    with pytest.raises(ValueError, match="'ppo' has no preset for the minatar environments "
                                         r"\(minatar:breakout\); algorithms that have one: "
                                         "dqn, rainbow"):
        get_preset("ppo", "minatar:breakout")


def _train_args(algo: str, env_id: str, log_dir) -> list[str]:
    """``rlfast train`` for 2000 steps, learning from step 500 with one update per 8 steps,
    on the serial sampler and the CPU."""
    return ["train", algo, env_id, "--steps", "2000", "--sampler", "serial", "--device", "cpu",
            "--no-progress", "--log-dir", str(log_dir),
            "--set", "algo.min_steps_learn=500", "--set", "algo.replay_size=2000",
            "--set", "algo.replay_ratio=4", "--set", "sampler.max_decorrelation_steps=0",
            "--set", "sampler.eval_n_envs=1", "--set", "sampler.eval_max_trajectories=1",
            "--set", "sampler.eval_max_steps=200", "--set", "runner.log_interval_steps=1000"]


def _assert_learned(log_dir) -> None:
    """progress.csv has rows after learning started (step 500), each with a finite loss."""
    with open(log_dir / "progress.csv") as f:
        learned = [r for r in csv.DictReader(f) if int(r["Diagnostics/CumSteps"]) > 500]
    assert learned
    for row in learned:
        assert math.isfinite(float(row["lossAverage"])), row


def test_train_dqn_from_the_command_line(tmp_path):
    log_dir = tmp_path / "dqn"
    done = subprocess.run([sys.executable, "-m", "rlfast",
                           *_train_args("dqn", "minatar:breakout", log_dir)],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    _assert_learned(log_dir)


def test_train_rainbow_in_this_process(tmp_path):
    # In this process: a second interpreter would import torch and minatar again (~6 s).
    log_dir = tmp_path / "rainbow"
    assert main(_train_args("rainbow", "minatar:space_invaders", log_dir)) == 0
    _assert_learned(log_dir)
