"""The ``popgym:<Task>`` env family: POPGym's partially observable tasks by class name.

``rlfast train ppo popgym:RepeatPreviousEasy --set agent.recurrent=True --set agent.core=gru``.
Tasks with Discrete actions use the ``popgym`` presets (ppo, a2c, r2d1: recurrent agents, a GRU
for ppo and a2c); the continuous ones (the pendulums) the continuous presets.  Discrete and
MultiDiscrete observations are flattened to one-hot vectors for the models
(``env.flatten_observation``, set by the presets).  See :mod:`rlfast.envs.popgym`.
"""
from __future__ import annotations

from typing import Any

from rlfast.experiments.config import ConfigError
from rlfast.experiments.registry import EnvFamily, EnvTraits, action_kind

__all__ = ["POPGYM"]


def _check(name: str) -> None:
    from rlfast.envs.popgym import PopGymError, check_popgym_task
    try:
        check_popgym_task(name)
    except PopGymError as e:
        raise ConfigError(str(e)) from None


def _factory(name: str, env_cfg: dict) -> tuple[Any, dict]:
    from rlfast.envs.gym import make_with
    from rlfast.envs.popgym import make_popgym_env
    return make_with, dict(make_env=make_popgym_env, name=name, **env_cfg)


def _traits(name: str) -> EnvTraits:
    from rlfast.envs.popgym import make_popgym_env, popgym_horizon
    _check(name)
    env = make_popgym_env(name)
    try:
        action, observation = env.action_space, env.observation_space
    finally:
        env.close()
    return EnvTraits(action_kind(action), action, observation, popgym_horizon(name))


def _preset_family(traits: EnvTraits) -> str | None:
    """``popgym`` (recurrent presets) for the discrete-action tasks; the continuous ones use
    the continuous presets (``--set agent.recurrent=True`` for memory)."""
    return "popgym" if traits.kind == "discrete" else None


POPGYM = EnvFamily(
    prefix="popgym", factory=_factory, traits=_traits, check_id=_check,
    preset_family=_preset_family,
    description="a POPGym task by class name (popgym:RepeatPreviousEasy; pip install "
                "'rlfast[popgym]')")
