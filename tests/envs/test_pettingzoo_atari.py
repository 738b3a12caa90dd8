"""PettingZoo's multi-agent Atari games under rlfast (pz:pettingzoo.atari.<game>): the
per-player frame processing checked with PettingZoo's own parallel API test and against a
direct PettingZoo rollout, the batch columns of uint8 frames, the presets, the one-line
errors for a missing package or ROM, and ``rlfast train ppo`` end to end on the serial and
cpu samplers (in a subprocess)."""
from __future__ import annotations

import csv
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

pytest.importorskip("pettingzoo")
pytest.importorskip("multi_agent_ale_py")

from rlfast.envs.pettingzoo import PettingZooError  # noqa: E402
from rlfast.envs.pettingzoo_atari import (  # noqa: E402
    AtariParallelEnv, ale_rom_folder, pettingzoo_atari_env)
from rlfast.experiments.config import ConfigError  # noqa: E402
from rlfast.experiments.presets import build_experiment, get_preset  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PONG = "pettingzoo.atari.pong_v3"


def _direct_pong():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from pettingzoo.atari import pong_v3
    return pong_v3.parallel_env(obs_type="grayscale_image",
                                auto_rom_install_path=ale_rom_folder())


def test_parallel_api_test_passes_on_the_wrapper():
    from pettingzoo.test import parallel_api_test
    env = AtariParallelEnv(PONG, frame_skip=2, num_img_obs=2, max_start_noops=3, horizon=60,
                           seed=0)
    parallel_api_test(env, num_cycles=80)  # past the horizon: truncation and reset
    env.close()


@pytest.mark.parametrize("obs_type", ["rlpyt", "84x84"])
def test_frames_equal_a_direct_pettingzoo_rollout(obs_type):
    """Same seed, same actions: each wrapped frame stack is the direct PettingZoo screens,
    skipped, max-pooled over the last two frames, shrunk and stacked (reference written
    here with plain numpy slicing for the 104 x 80 layout, cv2's area resize for 84 x 84)."""
    import cv2
    skip, n_stack, steps = 3, 4, 40
    wrapped = AtariParallelEnv(PONG, frame_skip=skip, num_img_obs=n_stack, clip_reward=False,
                               max_start_noops=0, horizon=None, obs_type=obs_type)
    direct = _direct_pong()
    obs, _ = wrapped.reset(seed=5)
    seed = int(np.random.default_rng(5).integers(0, 2**31 - 1))  # the wrapper's game seed
    raw, _ = direct.reset(seed=seed)

    def shrink(screen):
        screen = screen[..., 0]
        if obs_type == "rlpyt":
            return screen[1:-1:2, ::2]
        return cv2.resize(screen, (84, 84), interpolation=cv2.INTER_AREA)

    agents = list(direct.possible_agents)
    stacks = {a: [np.zeros_like(shrink(raw[a]))] * (n_stack - 1) + [shrink(raw[a])]
              for a in agents}
    for a in agents:
        np.testing.assert_array_equal(obs[a], np.stack(stacks[a]))
    rng = np.random.default_rng(1)
    total = dict.fromkeys(agents, 0.0)
    for _ in range(steps):
        actions = {a: int(rng.integers(0, 6)) for a in agents}
        obs, rewards, _, _, _ = wrapped.step(actions)
        screens, summed = [], dict.fromkeys(agents, 0.0)
        for _ in range(skip):
            raw, r, _, _, _ = direct.step(actions)
            screens.append(raw)
            for a in agents:
                summed[a] += r[a]
        for a in agents:
            frame = shrink(np.maximum(screens[-2][a], screens[-1][a]))
            stacks[a] = stacks[a][1:] + [frame]
            np.testing.assert_array_equal(obs[a], np.stack(stacks[a]))
            assert rewards[a] == summed[a]
            total[a] += rewards[a]
    assert obs[agents[0]].dtype == np.uint8
    wrapped.close()
    direct.close()


def test_reward_clipping_no_op_starts_and_horizon():
    env = AtariParallelEnv(PONG, frame_skip=4, max_start_noops=30, horizon=5, seed=3)
    counts = set()
    for _ in range(4):
        env.reset()
        counts.add(env.start_noops)
        for t in range(5):
            _, rewards, term, trunc, infos = env.step({a: 0 for a in env.agents})
            assert all(r in (-1.0, 0.0, 1.0) for r in rewards.values())
            assert all(abs(i["game_score"]) >= abs(rewards[a]) for a, i in infos.items())
        assert all(trunc.values()) and not any(term.values()) and env.agents == []
    assert len(counts) > 1 and max(counts) <= 30  # drawn per reset from the env's RNG


def test_players_are_columns_of_uint8_frames():
    env = pettingzoo_atari_env(PONG, frame_skip=4, num_img_obs=4, seed=0)
    assert env.n_agents == 2 and env.agent_names == ["first_0", "second_0"]
    assert env.observation_space.shape == (4, 104, 80)
    assert env.observation_space.dtype == np.uint8 and env.action_space.n == 6
    obs = env.reset()
    assert obs.shape == (2, 4, 104, 80) and obs.dtype == np.uint8
    assert np.all(obs[:, :3] == 0) and obs[:, 3].any()
    obs, reward, done, info = env.step(np.array([1, 2]))
    assert obs.dtype == np.uint8 and reward.shape == (2,) and info.valid.all()
    with pytest.raises(PettingZooError, match="agent_id=False"):
        pettingzoo_atari_env(PONG, agent_id=True)
    env.close()


def test_presets_use_the_atari_settings_and_the_conv_agent():
    from rlfast.agents import AtariFfAgent
    config = get_preset("ppo", f"pz:{PONG}")
    assert config["algo"]["learning_rate"] == get_preset("ppo", "atari:pong")["algo"][
        "learning_rate"]
    assert config["env"]["frame_skip"] == 4 and config["env"]["agent_id"] is False
    config["sampler"].update(batch_B=1, batch_T=4, eval_n_envs=0, max_decorrelation_steps=0)
    runner = build_experiment("ppo", f"pz:{PONG}", config, sampler="serial", seed=0)
    assert isinstance(runner.agent, AtariFfAgent)
    assert "episodic_lives" not in runner.sampler.env_kwargs
    config = get_preset("dqn", f"pz:{PONG}")  # one Atari DQN network for every player
    config["sampler"].update(batch_B=1, batch_T=4, eval_n_envs=0, max_decorrelation_steps=0)
    runner = build_experiment("dqn", f"pz:{PONG}", config, sampler="serial", seed=0)
    from rlfast.agents import AtariDqnAgent
    assert isinstance(runner.agent, AtariDqnAgent)


def test_missing_package_and_rom_are_one_line_errors(monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m.startswith("pettingzoo.atari")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "multi_agent_ale_py", None)
    with pytest.raises(ConfigError) as info:
        get_preset("ppo", f"pz:{PONG}")
    message = str(info.value)
    assert "\n" not in message and "rlfast[pettingzoo-atari]" in message
    assert "multi_agent_ale_py" in message
    monkeypatch.undo()
    with pytest.raises(PettingZooError) as info:
        AtariParallelEnv(PONG, dict(auto_rom_install_path=str(tmp_path)))
    message = str(info.value)
    assert "\n" not in message and "rlfast[pettingzoo-atari]" in message
    assert "pong" in message


ALGO_SETS = {
    "ppo": ["sampler.batch_T=32", "algo.minibatches=2", "algo.epochs=1"],
    # learning starts inside the budget, from a replay small enough to fill at once
    "dqn": ["sampler.batch_T=32", "algo.min_steps_learn=128", "algo.replay_size=1000"],
}


@pytest.mark.parametrize("algo, sampler", [
    ("ppo", "serial"), ("ppo", "cpu"), ("ppo", "gpu"), ("ppo", "alternating"),
    ("dqn", "serial"), ("dqn", "cpu")])
def test_rlfast_train_on_pong(tmp_path, algo, sampler):
    """Every sampler steps the players' columns (the gpu and alternating samplers batch the
    agent in the master, on the CPU here); ppo and dqn through ``rlfast train``."""
    log_dir = str(tmp_path / sampler)
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    sets = [item for s in ALGO_SETS[algo] for item in ("--set", s)]
    done = subprocess.run(
        [sys.executable, "-m", "rlfast", "train", algo, f"pz:{PONG}", "--sampler", sampler,
         "--n-envs", "2", "--steps", "256", "--seed", "1", "--log-dir", log_dir,
         "--set", "sampler.eval_n_envs=0", "--set", "sampler.max_decorrelation_steps=0",
         "--set", "runner.log_interval_steps=128", *sets],
        capture_output=True, text=True, timeout=240, env=env, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-3000:]
    with open(os.path.join(log_dir, "progress.csv")) as f:
        rows = list(csv.DictReader(f))
    # environment steps: 2 envs x 32 steps per iteration, 2 players (columns) each
    assert int(float(rows[-1]["Diagnostics/CumSteps"])) == 256
