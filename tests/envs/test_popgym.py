"""POPGym tasks through the ``popgym:`` env family: ids, one-hot observations, rewards as
POPGym gives them, the presets, and the ``agent.core`` settings. All in this process."""
from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("popgym")

from rlfast.envs.popgym import PopGymError, check_popgym_task, make_popgym_env  # noqa: E402
from rlfast.experiments import catalog  # noqa: E402
from rlfast.experiments.config import ConfigError, apply_overrides  # noqa: E402
from rlfast.experiments.presets import (build_experiment, get_preset,  # noqa: E402
                                        memory_core_kwargs)

TASKS = ["PositionOnlyCartPoleEasy", "RepeatPreviousEasy", "CountRecallEasy"]


def _env(task: str, **env_cfg):
    EnvCls, kwargs = catalog.env_factory(f"popgym:{task}", env_cfg)[:2]
    return EnvCls(**kwargs)


def test_tasks_by_class_name_and_a_clear_error_for_a_typo():
    for task in TASKS:
        assert check_popgym_task(task).__name__ == task
    with pytest.raises(PopGymError, match="did you mean RepeatPreviousEasy"):
        check_popgym_task("RepeatPrevousEasy")
    with pytest.raises(ConfigError, match="unknown POPGym task 'Nope'"):
        get_preset("ppo", "popgym:Nope")


@pytest.mark.parametrize("task, nvec", [("RepeatPreviousEasy", [4]), ("CountRecallEasy", [2, 2])])
def test_discrete_observations_reach_the_model_one_hot(task, nvec):
    config = get_preset("ppo", f"popgym:{task}")
    assert config["env"]["flatten_observation"] is True
    env = _env(task, **config["env"], seed=5)
    raw = make_popgym_env(task)
    assert env.spaces.observation.shape == (sum(nvec),)
    obs, (raw_obs, _) = env.reset(), raw.reset(seed=5)
    for _ in range(20):
        codes = np.atleast_1d(raw_obs)
        expected = np.concatenate([np.eye(n)[c] for n, c in zip(nvec, codes)])
        np.testing.assert_array_equal(np.asarray(obs), expected)
        action = int(raw.action_space.sample())
        step = env.step(action)
        raw_obs, raw_reward, term, trunc, _ = raw.step(action)
        assert step.reward == pytest.approx(raw_reward)  # POPGym's own reward scale
        obs = step.observation
        if term or trunc:
            assert step.done
            break


def test_vector_observations_stay_as_they_are():
    config = get_preset("ppo", "popgym:PositionOnlyCartPoleEasy")
    assert "flatten_observation" not in config.get("env", {})
    env = _env("PositionOnlyCartPoleEasy", seed=0)
    assert env.spaces.observation.shape == (2,)


def test_the_popgym_preset_is_a_recurrent_gru_and_other_algorithms_are_named():
    config = get_preset("ppo", "popgym:RepeatPreviousEasy")
    assert config["agent"]["recurrent"] is True and config["agent"]["core"] == "gru"
    assert config["agent"]["model_kwargs"]["lstm_size"] == 128
    assert get_preset("r2d1", "popgym:RepeatPreviousEasy")["agent"]["recurrent"] is True
    assert get_preset("a2c", "popgym:CountRecallEasy")["agent"]["core"] == "gru"
    with pytest.raises(ValueError, match="'dqn' has no preset for the popgym environments"):
        get_preset("dqn", "popgym:RepeatPreviousEasy")
    # A continuous-action task takes the continuous presets (no recurrent default).
    assert get_preset("ppo", "popgym:PositionOnlyPendulumEasy")["agent"]["recurrent"] is False


def test_core_settings_move_into_the_model_and_are_checked():
    config = apply_overrides(get_preset("ppo", "CartPole-v1"),
                             ["agent.recurrent=True", "model.core=attention",
                              "agent.memory_len=7", "model.core_size=32"])
    agent_cfg = memory_core_kwargs(dict(config["agent"]))
    assert agent_cfg["model_kwargs"] == dict(config["agent"]["model_kwargs"], core="attention",
                                             memory_len=7, lstm_size=32)
    assert "core" not in agent_cfg and "memory_len" not in agent_cfg
    with pytest.raises(ConfigError, match="agent.core=gru is a recurrent agent's memory core; "
                                          "add --set agent.recurrent=True"):
        memory_core_kwargs(dict(apply_overrides(get_preset("ppo", "CartPole-v1"),
                                                ["agent.core=gru"])["agent"]))
    with pytest.raises(ValueError, match="core must be one of lstm, gru, ln_lstm, attention"):
        memory_core_kwargs(dict(get_preset("ppo", "CartPole-v1")["agent"], recurrent=True,
                                core="rnn"))
    # feedforward default: the keys leave the agent section and nothing reaches the model
    plain = memory_core_kwargs(dict(get_preset("ppo", "CartPole-v1")["agent"]))
    assert "core" not in plain and "core" not in plain["model_kwargs"]


@pytest.mark.parametrize("core", ["gru", "attention"])
def test_a_run_is_built_with_the_chosen_core(core):
    config = apply_overrides(get_preset("ppo", "popgym:RepeatPreviousEasy"),
                             [f"agent.core={core}", "agent.memory_len=5"])
    runner = build_experiment("ppo", "popgym:RepeatPreviousEasy", config, sampler="serial",
                              seed=0, device="cpu")
    agent = runner.agent
    assert agent.recurrent and agent.model_kwargs["core"] == core
    # on-policy recurrent runs reset environments mid-batch (the losses reset the state)
    assert runner.sampler.CollectorCls.mid_batch_reset is True
