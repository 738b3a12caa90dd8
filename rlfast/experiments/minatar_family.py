"""The ``minatar:<game>`` env family: MinAtar's miniature Atari games (Young & Tian 2019).

``rlfast train dqn minatar:breakout``, ``rlfast train rainbow minatar:space_invaders``. The
games (breakout, space_invaders, asterix, freeway, seaquest) are 10 x 10 images, so they take
the convolutional agents of the Atari games (action kind ``atari``) with the ``minatar``
presets, which size the network for them (:mod:`rlfast.experiments.preset_data`); an
algorithm without a ``minatar`` preset is refused, naming those that have one. See
:mod:`rlfast.envs.minatar` (``pip install 'rlfast[minatar]'``).
"""
from __future__ import annotations

from typing import Any

from rlfast.experiments.config import ConfigError
from rlfast.experiments.registry import EnvFamily, EnvTraits

__all__ = ["MINATAR"]


def _check(name: str) -> None:
    """Refuse an unknown game, or a missing minatar package, as a one-line ``ConfigError``."""
    from rlfast.envs.minatar import MinAtarError, check_minatar_installed, resolve_minatar_game
    try:
        resolve_minatar_game(name)
        check_minatar_installed()
    except MinAtarError as e:
        raise ConfigError(str(e)) from None


def _factory(name: str, env_cfg: dict) -> tuple[Any, dict]:
    from rlfast.envs.minatar import MinAtarEnv
    _check(name)  # now, not in a worker later
    return MinAtarEnv, dict(game=name, **env_cfg)


def _traits(name: str) -> EnvTraits:
    """Image observations and discrete actions, like Atari's (nothing is made); minatar
    registers no step limit, so no horizon."""
    _check(name)
    return EnvTraits("atari", None, None, None)


MINATAR = EnvFamily(
    prefix="minatar", factory=_factory, traits=_traits, check_id=_check,
    preset_family="minatar", pixels=True,
    description="a MinAtar game (minatar:breakout, minatar:space_invaders; pip install "
                "'rlfast[minatar]')")
