"""MinAtar's miniature Atari games (Young & Tian 2019, arXiv:1903.03176) as an rlfast ``Env``.

``MinAtarEnv("breakout")`` drives ``minatar.Environment`` directly (``pip install
'rlfast[minatar]'``); ``rlfast train dqn minatar:breakout`` trains on it through the
``minatar:`` env family. Each game is a 10 x 10 grid with one boolean channel per kind of
object; the observation is that grid as uint8 ``(C, 10, 10)``, channels first, with 0 and 255
for off and on, so that the image models' scaling by 1/255 hands them MinAtar's own 0 / 1
state. Rewards are MinAtar's (unclipped; ``env_info.game_score`` repeats them).
"""
from __future__ import annotations

import difflib
import importlib.util
import re
import sys
from collections import namedtuple
from typing import Any

import numpy as np

from rlfast.envs.base import Env, EnvStep
from rlfast.spaces.int_box import IntBox
from rlfast.utils.checks import check_action_index, check_fraction, check_int

__all__ = ["MinAtarEnv", "MinAtarError", "EnvInfo", "GAMES", "resolve_minatar_game",
           "check_minatar_installed"]

# The games of minatar 1.0.15 (the modules of minatar.environments).
GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")

# Module level so that samples holding it pickle; the fields of AtariEnv's EnvInfo, so the
# samplers and algorithms read both alike (traj_done, and timeout for time-limit bootstraps).
EnvInfo = namedtuple("EnvInfo", ["game_score", "traj_done", "timeout"])

_SEPARATORS = re.compile(r"[\s_\-]+")
_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])")
_SEED_MODULUS = 2 ** 32  # numpy's RandomState, MinAtar's generator, takes seeds below this

# Colours of the rendered frame: black for an empty cell, then one per channel (MinAtar games
# have at most 10 channels); a cell shows its highest active channel.
_PALETTE = np.array([[0, 0, 0], [230, 230, 230], [240, 80, 60], [250, 190, 50],
                     [90, 200, 90], [70, 140, 240], [200, 100, 220], [60, 210, 210],
                     [250, 140, 170], [160, 120, 60], [150, 150, 150]], dtype=np.uint8)
_RENDER_SCALE = 16  # pixels per grid cell in render(): a 160 x 160 frame


class MinAtarError(ValueError):
    """An unknown MinAtar game, or minatar not installed."""


def check_minatar_installed() -> None:
    """Raise ``MinAtarError`` naming the install command when the minatar package is missing
    (checked without importing it: its import pulls in matplotlib and seaborn)."""
    if importlib.util.find_spec("minatar") is None:
        raise MinAtarError("minatar: environments need the minatar package; install it with "
                           "pip install 'rlfast[minatar]'")


def resolve_minatar_game(game: str) -> str:
    """MinAtar's module name for ``game``: ``"space_invaders"``, or another spelling of it
    such as ``"SpaceInvaders"`` or ``"space-invaders"``; an unknown game is a
    ``MinAtarError`` naming the games (the closest first)."""
    if not isinstance(game, str) or not game.strip():
        raise MinAtarError(f"a MinAtar game must be a non-empty string; the games: "
                           f"{', '.join(GAMES)}")
    by_key = {name.replace("_", ""): name for name in GAMES}
    key = _SEPARATORS.sub("", game).lower()
    if key in by_key:
        return by_key[key]
    snake = _SEPARATORS.sub("_", _CAMEL_BOUNDARY.sub("_", game.strip())).lower()
    close = difflib.get_close_matches(snake, GAMES, n=2, cutoff=0.5)
    hint = f"did you mean {' or '.join(close)}? " if close else ""
    raise MinAtarError(f"unknown MinAtar game {game!r}; {hint}the games: {', '.join(GAMES)}")


class MinAtarEnv(Env):
    """A MinAtar game: ``minatar.Environment(game, sticky_action_prob, difficulty_ramping)``.

    ``step(action)`` plays one action (an index into the full six-action set, or into the
    game's minimal set with ``minimal_action_set``) and returns ``EnvStep(observation, reward,
    done, EnvInfo(game_score, traj_done, timeout))``. MinAtar repeats the previous action with
    probability ``sticky_action_prob`` and, with ``difficulty_ramping``, speeds games up as
    they go on (the paper's settings are the defaults). minatar registers its gymnasium ids
    without a step limit, so ``horizon`` is None by default; Freeway's own end after 2500
    frames is a game over, as MinAtar reports it. A ``horizon`` cuts episodes after that many
    steps with ``done``, ``traj_done`` and ``timeout`` all True (``timeout`` only there, not at
    a game over), so algorithms may bootstrap. The observation is written into one
    pre-allocated array and handed out as one copy per step. ``seed`` seeds MinAtar's
    generator (sticky actions and the game's randomness); call ``reset()`` after it.
    """

    def __init__(self, game: str = "breakout", sticky_action_prob: float = 0.1,
                 difficulty_ramping: bool = True, minimal_action_set: bool = False,
                 horizon: int | None = None, seed: int | None = None) -> None:
        self.game = resolve_minatar_game(game)
        check_minatar_installed()
        import minatar
        owner = "MinAtarEnv"
        self._sticky_action_prob = check_fraction(sticky_action_prob, "sticky_action_prob",
                                                  owner=owner)
        if horizon is not None:
            horizon = check_int(horizon, "horizon", minimum=1, owner=owner)
        self._horizon = horizon
        self._step_limit = sys.maxsize if horizon is None else horizon
        self._game: Any = minatar.Environment(
            self.game, sticky_action_prob=self._sticky_action_prob,
            difficulty_ramping=bool(difficulty_ramping))
        n_actions = self._game.num_actions()
        actions = (tuple(self._game.minimal_action_set()) if minimal_action_set
                   else tuple(range(n_actions)))
        self._actions = actions
        self._action_of = dict(enumerate(actions))
        height, width, channels = self._game.state_shape()
        self._obs = np.zeros((channels, height, width), dtype=np.uint8)
        self._on = np.uint8(255)
        self._action_space = IntBox(0, len(actions))
        self._observation_space = IntBox(0, 256, shape=self._obs.shape, dtype="uint8")
        self._step_count = 0
        self.seed(seed)
        self.reset()

    # ---------------------------------------------------------------- hot path
    def step(self, action: Any) -> EnvStep:
        """Play ``action`` once and return the step; see the class docstring for the done /
        traj_done / timeout rules."""
        try:
            game_action = self._action_of[action]
        except (KeyError, TypeError):
            game_action = self._action_of[self._check_action(action)]
        reward, terminal = self._game.act(game_action)
        self._write_observation()
        self._step_count += 1
        timeout = self._step_count >= self._step_limit and not terminal
        done = bool(terminal) or timeout
        reward = float(reward)
        return EnvStep(self._obs.copy(), reward, done, EnvInfo(reward, done, timeout))

    def _write_observation(self) -> None:
        """MinAtar's boolean ``(10, 10, C)`` state into ``self._obs`` as 0 / 255, channels
        first, without a new array (bool times a uint8 scalar is uint8)."""
        np.multiply(self._game.state().transpose(2, 0, 1), self._on, out=self._obs)

    def _check_action(self, action: Any) -> int:
        """``action`` as a valid action index, or ValueError naming the valid range."""
        return check_action_index(action, len(self._actions), f"MinAtarEnv({self.game!r})")

    # ---------------------------------------------------------------- episode control
    def reset(self) -> np.ndarray:
        """Start a new game and return its first observation."""
        if self._game is None:
            raise RuntimeError(f"MinAtarEnv({self.game!r}) was closed; make a new one")
        self._game.reset()
        self._step_count = 0
        self._write_observation()
        return self._obs.copy()

    def seed(self, seed: int | None) -> None:
        """Seed MinAtar's generator, which draws the sticky actions and the game's
        randomness, with ``seed`` modulo 2**32 (numpy's ``RandomState`` range; a seed in it is
        passed on unchanged, as ``minatar.Environment.seed`` takes it); ``None`` draws fresh
        entropy. The current game keeps going: call ``reset()`` for a seeded one."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        if self._game is None:
            raise RuntimeError(f"MinAtarEnv({self.game!r}) was closed; make a new one")
        if seed is None:
            seed = int(np.random.SeedSequence().generate_state(1)[0])
        self._game.seed(int(seed) % _SEED_MODULUS)

    def render(self) -> np.ndarray:
        """The grid as an RGB ``uint8`` frame, 16 pixels per cell ``(160, 160, 3)``, each cell
        in the colour of its highest active channel (black when empty)."""
        if self._game is None:
            raise RuntimeError(f"MinAtarEnv({self.game!r}) was closed; make a new one")
        state = self._game.state()
        channel = (state * np.arange(1, state.shape[2] + 1)).max(axis=2)
        frame = _PALETTE[channel]
        return np.repeat(np.repeat(frame, _RENDER_SCALE, axis=0), _RENDER_SCALE, axis=1)

    @property
    def horizon(self) -> int | None:
        """Steps per trajectory before a timeout (``traj_done`` and ``timeout``), or None."""
        return self._horizon

    @property
    def num_actions(self) -> int:
        """Number of actions: 6, or the size of the game's minimal action set."""
        return len(self._actions)

    def close(self) -> None:
        """Release the game; the env cannot be used afterwards. Safe to call twice."""
        self._game = None

    def __repr__(self) -> str:
        return (f"MinAtarEnv(game={self.game!r}, sticky_action_prob={self._sticky_action_prob}, "
                f"num_actions={len(self._actions)})")
