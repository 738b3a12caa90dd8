"""The ``popgym:<Task>`` env family: POPGym's partially observable tasks by class name.

``rlfast train ppo popgym:RepeatPreviousEasy --set agent.recurrent=True --set agent.core=gru``.
The task's spaces choose the presets like any gymnasium environment's (a Discrete action
space: the discrete presets); Discrete and MultiDiscrete observations are flattened to one-hot
vectors for the models (``env.flatten_observation``, set by the presets).  See
:mod:`rlfast.envs.popgym`.
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


POPGYM = EnvFamily(
    prefix="popgym", factory=_factory, traits=_traits, check_id=_check,
    description="a POPGym task by class name (popgym:RepeatPreviousEasy; pip install "
                "'rlfast[popgym]')")
