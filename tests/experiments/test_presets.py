"""Presets and the experiment builder: merged tuning, agent choice per sampler, early errors."""
import pytest

from rlfast.experiments.presets import PRESETS, build_experiment, default_affinity, get_preset
from rlfast.experiments.qpg_presets import ENV_TUNED
from rlfast.utils.misc import available_cpus


def test_get_preset_merges_env_tuning_into_a_fresh_copy():
    sac = get_preset("sac", "Pendulum-v1")
    tuned = ENV_TUNED[("sac", "Pendulum-v1")]
    assert sac["algo"]["learning_rate"] == tuned["algo"]["learning_rate"]
    assert sac["algo"]["discount"] == PRESETS["sac"]["continuous"]["algo"]["discount"]
    assert sac["agent"]["model_kwargs"]["hidden_sizes"] == [64, 64]
    assert sac["runner"] == tuned["runner"]
    sac["agent"]["model_kwargs"]["hidden_sizes"].append(1)
    sac["algo"]["discount"] = 0.5
    assert PRESETS["sac"]["continuous"]["agent"]["model_kwargs"]["hidden_sizes"] == [256, 256]
    assert tuned["agent"]["model_kwargs"]["hidden_sizes"] == [64, 64]
    assert get_preset("sac", "Pendulum-v1")["algo"]["discount"] == 0.99


def test_default_affinity_uses_available_cpus():
    cpus = available_cpus()
    assert default_affinity(4, "serial")["master_cpus"] == cpus
    alternating = default_affinity(1, "alternating")
    assert len(alternating["workers_cpus"]) == 2  # two groups take turns
    assert all(w[0] in cpus for w in alternating["workers_cpus"])


def test_r2d1_alternating_sampler_gets_the_alternating_agent():
    from rlfast.agents import AlternatingR2d1Agent, R2d1Agent
    config = get_preset("r2d1", "CartPole-v1")
    runner = build_experiment("r2d1", "CartPole-v1", config, sampler="alternating", seed=0)
    assert isinstance(runner.agent, AlternatingR2d1Agent)
    runner = build_experiment("r2d1", "CartPole-v1", config, sampler="gpu", seed=0)
    assert type(runner.agent) is R2d1Agent


def test_unknown_sampler_lists_choices():
    with pytest.raises(ValueError, match="'serial', 'cpu', 'gpu', 'alternating'.*'fast'"):
        build_experiment("ppo", "CartPole-v1", get_preset("ppo", "CartPole-v1"), sampler="fast")


def test_unknown_atari_game_fails_while_building():
    config = get_preset("ppo", "atari:pong")
    with pytest.raises(ValueError, match="pong"):
        build_experiment("ppo", "atari:pongg", config, sampler="serial", seed=0)
