"""The registries (rlfast.experiments.registry / catalog): one entry per algorithm, sampler,
env family and evolution strategy, and registration from outside the package.

Every run here uses the serial sampler, in this process (no worker, no shared memory)."""
from __future__ import annotations

import functools

import gymnasium
import numpy as np
import pytest

import rlfast
from rlfast.algos import PPO
from rlfast.experiments import catalog
from rlfast.experiments.builtin import ALGORITHMS, ENV_FAMILIES, ES_STRATEGIES, SAMPLERS
from rlfast.experiments.placement import default_affinity
from rlfast.experiments.presets import PRESETS, build_experiment, get_preset, inspect_env
from rlfast.experiments.registry import Registry, RegistryError


@pytest.fixture
def undo():
    """Registrations a test makes, removed afterwards."""
    made: list[tuple[Registry, str]] = []
    yield made
    for registry, name in made:
        if name in registry:
            registry.remove(name)


def test_rlfast_registers_its_own_entries_once_each():
    assert ALGORITHMS.names() == ["ppo", "a2c", "mappo", "dqn", "cat_dqn", "rainbow", "r2d1",
                                  "ddpg", "td3", "sac"]
    assert set(ALGORITHMS.names()) == set(PRESETS)
    assert SAMPLERS.names() == ["serial", "cpu", "gpu", "alternating"]
    assert ENV_FAMILIES.names() == ["gymnasium", "pz", "popgym", "minatar", "atari"]
    assert ES_STRATEGIES.names() == ["cem", "cmaes", "openai_es"]
    assert [n for n in ALGORITHMS if ALGORITHMS.get(n).replay] == [
        "dqn", "cat_dqn", "rainbow", "r2d1", "ddpg", "td3", "sac"]


def test_a_name_registered_twice_needs_replace():
    registry: Registry[int] = Registry("widget")
    registry.add("a", 1)
    with pytest.raises(RegistryError, match="widget 'a' is already registered"):
        registry.add("a", 2)
    registry.add("a", 3, replace=True)
    assert registry.get("a") == 3
    with pytest.raises(ValueError, match=r"unknown widget 'b'; choose from \['a'\]"):
        registry.get("b")
    with pytest.raises(RegistryError, match="non-empty string"):
        registry.add(" a", 4)


def test_env_ids_resolve_to_their_family():
    assert catalog.env_family("atari:pong")[0].prefix == "atari"
    assert catalog.env_family("atari:pong")[1] == "pong"
    family, name = catalog.env_family("CartPole-v1")
    assert family.prefix is None and name == "CartPole-v1"
    # gymnasium's own module:Env ids are not a family prefix
    assert catalog.env_family("gymnasium.envs.classic_control:CartPole-v1")[0].prefix is None
    assert inspect_env("atari:pong").kind == "atari"


def test_the_top_level_package_exports_the_registration_functions():
    assert rlfast.register_env_family is catalog.register_env_family
    assert rlfast.register_algorithm is catalog.register_algorithm
    assert rlfast.register_sampler is catalog.register_sampler
    assert rlfast.register_es_strategy is catalog.register_es_strategy
    with pytest.raises(AttributeError):
        rlfast.register_nothing  # noqa: B018


class Walk(gymnasium.Env):
    """Two actions, a 3-vector observation, episodes of 5 steps."""

    def __init__(self, scale: float = 1.0, render_mode=None):
        self.observation_space = gymnasium.spaces.Box(-1.0, 1.0, (3,), np.float32)
        self.action_space = gymnasium.spaces.Discrete(2)
        self.scale, self.t = scale, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        self.t += 1
        return (np.full(3, self.t / 5, np.float32), self.scale * float(action), False,
                self.t >= 5, {})


def make_walk(name: str, **kwargs) -> gymnasium.Env:
    return gymnasium.wrappers.TimeLimit(Walk(**kwargs), max_episode_steps=int(name))


def test_a_registered_env_family_is_inspected_built_and_configured(undo):
    rlfast.register_env_family("walktest", make_walk)
    undo.append((ENV_FAMILIES, "walktest"))
    traits = inspect_env("walktest:5")
    assert traits.kind == "discrete" and traits.horizon == 5
    config = get_preset("ppo", "walktest:5")
    discrete = PRESETS["ppo"]["discrete"]["algo"]  # the preset of its action kind
    assert {k: config["algo"][k] for k in discrete} == discrete
    config["env"] = dict(scale=2.0)
    runner = build_experiment("ppo", "walktest:5", config, sampler="serial", seed=0,
                              device="cpu")
    env = runner.sampler.EnvCls(**runner.sampler.env_kwargs)
    env.reset()
    assert env.step(np.int64(1)).reward == 2.0  # --set env.scale reached make_walk
    with pytest.raises(RegistryError, match="already registered"):
        rlfast.register_env_family("walktest", make_walk)
    with pytest.raises(RegistryError, match="a name like 'myenvs'"):
        rlfast.register_env_family("bad-prefix", make_walk)
    with pytest.raises(RegistryError, match="exactly one"):
        rlfast.register_env_family("other", make_walk, factory=lambda n, c: (None, {}))


def test_a_family_maker_must_return_a_gymnasium_env(undo):
    rlfast.register_env_family("notgym", lambda name, **kw: object())
    undo.append((ENV_FAMILIES, "notgym"))
    EnvCls, kwargs, _ = catalog.env_factory("notgym:x", {})
    with pytest.raises(TypeError, match="not a gymnasium.Env"):
        EnvCls(**kwargs)


def test_a_registered_algorithm_trains_from_the_command_line(undo, tmp_path):
    from rlfast.cli import main

    small = {family: dict(preset, sampler=dict(preset["sampler"], batch_T=16, batch_B=2),
                          runner=dict(preset["runner"], n_steps=64, log_interval_steps=32))
             for family, preset in PRESETS["ppo"].items()}
    seen = []

    def agent_for(kind, recurrent, sampler):
        seen.append((kind, recurrent, sampler.name))
        return catalog.algorithm("ppo").agent_cls(kind, recurrent, sampler)

    rlfast.register_algorithm("ppo_small", functools.partial(PPO), small, agent_for,
                              defaults=dict(algo=dict(compile=False)))
    undo.append((ALGORITHMS, "ppo_small"))
    assert main(["train", "ppo_small", "CartPole-v1", "--sampler", "serial", "--device", "cpu",
                 "--no-progress", "--log-dir", str(tmp_path / "run")]) == 0
    assert seen == [("discrete", False, "serial")]
    assert (tmp_path / "run" / "progress.csv").exists()
    assert get_preset("ppo_small", "CartPole-v1")["algo"]["compile"] is False
    # no replay: no async runner, said at configuration time
    assert main(["train", "ppo_small", "CartPole-v1", "--runner", "async",
                 "--log-dir", str(tmp_path / "run2")]) == 2
    with pytest.raises(RegistryError, match="lacks the sections"):
        rlfast.register_algorithm("broken", PPO, dict(discrete=dict(algo={})), agent_for)


def test_a_registered_sampler_is_a_choice_of_the_command_line(undo, tmp_path):
    from rlfast.cli import main
    from rlfast.samplers import (CpuResetCollector, CpuWaitResetCollector,
                                 SerialEvalCollector, SerialSampler)

    class CountingSampler(SerialSampler):
        built = 0

        def __init__(self, *args, **kwargs):
            type(self).built += 1
            super().__init__(*args, **kwargs)

    rlfast.register_sampler("counting", CountingSampler, SerialEvalCollector,
                            CpuResetCollector, CpuWaitResetCollector, worker_processes=False)
    undo.append((SAMPLERS, "counting"))
    assert default_affinity(4, "counting")["master_cpus"]
    assert "workers_cpus" not in default_affinity(4, "counting")
    assert main(["train", "ppo", "CartPole-v1", "--sampler", "counting", "--steps", "256",
                 "--device", "cpu", "--no-progress", "--log-dir", str(tmp_path / "run"),
                 "--set", "sampler.batch_B=2", "--set", "sampler.batch_T=32",
                 "--set", "runner.log_interval_steps=128"]) == 0
    assert CountingSampler.built == 1
    with pytest.raises(ValueError, match="has no asynchronous variant"):
        build_experiment("dqn", "CartPole-v1", get_preset("dqn", "CartPole-v1"),
                         sampler="counting", runner="async", device="cpu")


def test_a_registered_es_strategy_is_a_train_algorithm(undo, capsys):
    from rlfast.cli import main
    from rlfast.es import CEM
    from rlfast.experiments.es_presets import ES_PRESETS
    from rlfast.experiments.presets import get_es_preset

    rlfast.register_es_strategy("cem_copy", CEM, ES_PRESETS["cem"])
    undo.append((ES_STRATEGIES, "cem_copy"))
    assert get_es_preset("cem_copy", "CartPole-v1") == get_es_preset("cem", "CartPole-v1")
    with pytest.raises(ValueError, match="image game"):
        get_es_preset("cem_copy", "atari:pong")
    assert main(["train", "cem_copy", "atari:pong"]) == 2  # dispatched to the ES path
    assert "evolution strategies search vector-observation policies" in capsys.readouterr().err


def test_entry_points_are_scanned_once_per_sys_path(monkeypatch):
    """A lookup does not rescan every installed distribution's metadata: the ``rlfast.plugins``
    entry points are read once, and again only when ``sys.path`` changes (where a new
    distribution may have become visible)."""
    import sys
    from importlib import metadata

    scans = []
    real = metadata.entry_points

    def counting(**kwargs):
        scans.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(catalog.metadata, "entry_points", counting)
    monkeypatch.setattr(catalog, "_scanned", None)
    for _ in range(5):
        catalog.load_plugins()
        catalog.algorithm("ppo")
        catalog.env_family("CartPole-v1")
    assert scans == [dict(group=catalog.PLUGIN_GROUP)]
    monkeypatch.setattr(sys, "path", [*sys.path, "/nonexistent-rlfast-test-dir"])
    catalog.load_plugins()
    catalog.load_plugins()
    assert len(scans) == 2
