"""POPGym's partially observable tasks (Morad et al., ICLR 2023) as gymnasium environments.

``make_popgym_env("RepeatPreviousEasy")`` builds the task of that class name from
``popgym.envs`` (``pip install rlfast[popgym]``); ``rlfast train ppo
popgym:PositionOnlyCartPoleEasy --set agent.recurrent=True --set agent.core=gru`` trains on it
through the ``popgym:`` env family.  Discrete and MultiDiscrete observations reach the models
one-hot (``flatten_observation``), the way the presets feed every such space to an MLP.
Returns are POPGym's own, scaled to [-1, 1] per episode (1.0 is the best).
"""
from __future__ import annotations

import difflib
import functools
from typing import Any

import gymnasium

__all__ = ["PopGymError", "popgym_task_names", "check_popgym_task", "make_popgym_env",
           "popgym_horizon"]


class PopGymError(ValueError):
    """An unknown POPGym task, or popgym not installed."""


def _popgym_envs() -> Any:
    try:
        import popgym.envs
    except ImportError as e:
        raise PopGymError(f"popgym: environments need the popgym package ({e}); install it "
                          f"with pip install 'rlfast[popgym]'") from None
    return popgym.envs


@functools.lru_cache(maxsize=1)
def popgym_task_names() -> dict[str, type]:
    """Class name -> environment class of every task popgym lists (``popgym.envs.ALL``)."""
    envs = _popgym_envs()
    return {cls.__name__: cls for cls in envs.ALL}


def check_popgym_task(name: str) -> type:
    """The environment class of task ``name``; an unknown name is a ``PopGymError`` naming
    the closest tasks."""
    tasks = popgym_task_names()
    if name in tasks:
        return tasks[name]
    close = difflib.get_close_matches(name, list(tasks), n=3, cutoff=0.5)
    hint = (f"did you mean {' or '.join(close)}?" if close
            else f"the tasks: {', '.join(sorted(tasks))}")
    raise PopGymError(f"unknown POPGym task {name!r}; {hint}")


def make_popgym_env(name: str, **kwargs: Any) -> gymnasium.Env:
    """A new instance of POPGym task ``name`` (its class name), built with ``kwargs``."""
    env = check_popgym_task(name)(**kwargs)
    if not isinstance(env, gymnasium.Env):
        raise PopGymError(f"popgym task {name} is a {type(env).__name__}, not a gymnasium.Env")
    return env


def popgym_horizon(name: str) -> int | None:
    """The task's episode limit (``max_episode_length``), None if it has none."""
    env = make_popgym_env(name)
    try:
        limit = getattr(env, "max_episode_length", None)
        return int(limit) if limit else None
    finally:
        env.close()
