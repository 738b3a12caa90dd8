"""What the command line says about names: the unknown-algorithm error lists the evolution
strategies too, ``train --help`` names every registered env family (plug-ins' included), and
the default log directory's name holds no character that breaks tools or paths."""
from __future__ import annotations

import argparse
import os

import pytest

from rlfast.cli import main
from rlfast.experiments import catalog
from rlfast.experiments.builtin import ENV_FAMILIES
from rlfast.experiments.registry import Registry
from rlfast.experiments.run_dir import log_dir_for_run


def test_unknown_algorithm_lists_the_evolution_strategies(capsys):
    assert main(["train", "nope", "CartPole-v1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("rlfast: error: unknown algorithm 'nope'; choose from ['ppo'")
    assert f"or an evolution strategy from {catalog.es_strategy_names()}" in err
    for name in ("cem", "cmaes", "openai_es"):
        assert repr(name) in err


def test_registry_lookup_names_the_other_kind():
    algorithms, strategies = Registry("algorithm"), Registry("evolution strategy")
    algorithms.add("ppo", 1)
    strategies.add("cem", 2)
    with pytest.raises(ValueError, match=r"^unknown algorithm 'x'; choose from \['ppo'\] or "
                                         r"an evolution strategy from \['cem'\]$"):
        algorithms.get("x", strategies)
    with pytest.raises(ValueError, match=r"^'cem' is an evolution strategy, not an algorithm; "
                                         r"choose an algorithm from \['ppo'\]$"):
        algorithms.get("cem", strategies)
    assert algorithms.get("ppo", strategies) == 1


def _train_help(capsys) -> str:
    with pytest.raises(SystemExit) as exit_info:
        main(["train", "--help"])
    assert exit_info.value.code == 0
    return "".join(capsys.readouterr().out.split())  # argparse wraps lines (even at hyphens)


def test_train_help_names_every_env_family_including_plugins(capsys):
    catalog.register_env_family("helpfam", make_env=_never_called,
                                description="a family registered at run time (helpfam:x)")
    try:
        text = _train_help(capsys)
    finally:
        ENV_FAMILIES.remove("helpfam")
    assert "helpfam:<name>,afamilyregisteredatruntime(helpfam:x)" in text
    for key in ENV_FAMILIES:
        family = ENV_FAMILIES.get(key)
        assert "".join(family.description.split()) in text, key
        if family.prefix is not None:
            assert f"{family.prefix}:<name>" in text, key
    assert "helpfam" not in _train_help(capsys)  # generated at each parse, not cached


def _never_called(name, **kwargs):
    raise AssertionError("help text must not make environments")


@pytest.mark.parametrize("env, name", [
    ("atari:pong", "ppo_atari_pong"),
    ("ale_py:ALE/Pong-v5", "ppo_ale_py_ALE_Pong-v5"),
    ("pz:mpe2.simple_spread_v3", "ppo_pz_mpe2.simple_spread_v3"),
    ("CartPole-v1", "ppo_CartPole-v1"),
])
def test_default_log_dir_name_is_safe(tmp_path, monkeypatch, env, name):
    monkeypatch.setenv("RLFAST_DATA_DIR", str(tmp_path))
    path = log_dir_for_run(argparse.Namespace(log_dir=None, algo="ppo", env=env))
    relative = os.path.relpath(path, tmp_path).split(os.sep)
    assert relative[0] == "local" and relative[3:] == [name, "run_0"], relative
    given = log_dir_for_run(argparse.Namespace(log_dir=str(tmp_path / "a:b"), algo="ppo",
                                               env=env))
    assert given == str(tmp_path / "a:b")  # a --log-dir is used as given
