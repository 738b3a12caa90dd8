"""Atari 2600 games as an rlfast ``Env``, driving ale-py's ``ALEInterface`` directly.

The environment is the sampler's hot loop, so ``step`` does no per-step allocation except the
observation it hands out: ALE writes grayscale screens into pre-allocated buffers, the 2-frame
max and the 2x downsample write into a ring of frames, and the returned observation is one
``take`` from that ring (oldest frame first). Going through gymnasium would add a wrapper
stack, RGB frames and dict infos per step; this module skips all of that.
"""
from __future__ import annotations

import difflib
import re
import sys
from collections import namedtuple
from typing import Any

import cv2
import numpy as np
from ale_py import Action, ALEInterface, ALEState, LoggerMode, roms

from rlfast.envs.traj_info import TrajInfo
from rlfast.envs.base import Env, EnvStep
from rlfast.spaces.int_box import IntBox
from rlfast.utils.checks import check_action_index, check_choice, check_fraction, check_int

__all__ = ["AtariEnv", "AtariTrajInfo", "EnvInfo", "OBS_TYPES", "resolve_game"]

# Module level so that samples holding it pickle (e.g. across sampler worker processes).
EnvInfo = namedtuple("EnvInfo", ["game_score", "traj_done", "timeout"])

# Observation layouts: "rlpyt" crops rows 1..208 and keeps every other pixel (104 x 80);
# "84x84" is the classic DQN area-resize of the whole 210 x 160 frame.
OBS_TYPES = {"rlpyt": (104, 80), "84x84": (84, 84)}

_CAMEL_BOUNDARY = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_SEPARATORS = re.compile(r"[\s_\-]+")


def resolve_game(game: str) -> str:
    """The ale-py ROM id for ``game``: ``"pong"``, ``"space_invaders"``, or another spelling
    of it such as ``"SpaceInvaders"``, ``"space-invaders"`` or ``"SPACE_INVADERS"`` (names
    are compared lowercased with separators removed). Raises ``ValueError`` naming the
    closest ROM ids when the game is unknown."""
    if not isinstance(game, str) or not game.strip():
        raise ValueError(f"game must be a non-empty string naming an Atari ROM, got {game!r}")
    rom_ids = roms.get_all_rom_ids()
    if game in rom_ids:
        return game
    by_key = {_SEPARATORS.sub("", rom_id): rom_id for rom_id in rom_ids}
    key = _SEPARATORS.sub("", game).lower()
    if key in by_key:
        return by_key[key]
    snake = _SEPARATORS.sub("_", _CAMEL_BOUNDARY.sub("_", game.strip())).lower()
    close = difflib.get_close_matches(snake, rom_ids, n=5, cutoff=0.6)
    hint = (f"did you mean one of {close}?" if close
            else f"available games: {sorted(rom_ids)}")
    raise ValueError(f"Unknown Atari game {game!r}: {hint}")


class AtariEnv(Env):
    """An Atari game from the Arcade Learning Environment, with the classic DQN processing.

    Each ``step(action)`` repeats the action for ``frame_skip`` emulator frames, sums their
    rewards (the raw sum is ``env_info.game_score``; the reward is its sign when
    ``clip_reward``), takes the pixel-wise max of the last two frames (Atari sprites flicker),
    and shrinks it to 104 x 80 (rows 1..208, every other pixel; ``obs_type="rlpyt"``) or
    84 x 84 (``obs_type="84x84"``). The observation stacks the last ``num_img_obs`` processed
    frames as uint8 ``(num_img_obs, H, W)``, oldest first. With ``episodic_lives`` a lost life
    gives ``done=True`` but ``env_info.traj_done=False``: the sampler keeps stepping the same
    game without a reset. Game over or reaching ``horizon`` steps gives ``done`` and
    ``traj_done``; ``env_info.timeout`` is True only for the horizon cut (not at a real game
    over), so algorithms may bootstrap there. ``reset`` hard-resets the game, plays a random
    number (0..``max_start_noops``) of raw NOOP frames, presses FIRE if ``fire_on_reset``
    (which is also pressed after every lost life), and fills the stack with zeros except the
    newest slot, which holds the first frame. ``start_noops`` is the NOOP count of the last
    reset. ``seed`` seeds both the no-op draws and ALE's own RNG (used by sticky actions)."""

    def __init__(
        self,
        game: str = "pong",
        frame_skip: int = 4,
        num_img_obs: int = 4,
        clip_reward: bool = True,
        episodic_lives: bool = True,
        fire_on_reset: bool = False,
        max_start_noops: int = 30,
        repeat_action_probability: float = 0.0,
        horizon: int | None = 27000,
        seed: int | None = None,
        obs_type: str = "rlpyt",
    ) -> None:
        self.game = resolve_game(game)
        self._frame_skip = check_int(frame_skip, "frame_skip", minimum=1, owner="AtariEnv")
        self._num_img_obs = check_int(num_img_obs, "num_img_obs", minimum=1, owner="AtariEnv")
        self._max_start_noops = check_int(max_start_noops, "max_start_noops", minimum=0,
                                          owner="AtariEnv")
        if horizon is not None:
            horizon = check_int(horizon, "horizon", minimum=1, owner="AtariEnv")
        self._horizon = horizon
        self._step_limit = sys.maxsize if horizon is None else horizon
        self.obs_type = check_choice(obs_type, "obs_type", OBS_TYPES, owner="AtariEnv")
        rap = check_fraction(repeat_action_probability, "repeat_action_probability",
                             owner="AtariEnv")
        self._clip_reward = bool(clip_reward)
        self._episodic_lives = bool(episodic_lives)
        self._fire_on_reset = bool(fire_on_reset)

        ALEInterface.setLoggerMode(LoggerMode.Error)  # loadROM banners would flood worker logs
        self.ale: ALEInterface | None = ALEInterface()
        self.ale.setFloat("repeat_action_probability", rap)
        self.ale.setInt("frame_skip", 1)  # this class repeats actions itself (and max-pools)
        self._rom_path = str(roms.get_rom_path(self.game))
        self.seed(seed)  # loads the ROM

        self._actions = tuple(self.ale.getMinimalActionSet())
        self._action_of = dict(enumerate(self._actions))
        if self._fire_on_reset and Action.FIRE not in self._actions:
            raise ValueError(f"fire_on_reset=True but game {self.game!r} has no FIRE action; "
                             f"its actions are {[a.name for a in self._actions]}")
        height, width = self.ale.getScreenDims()
        obs_h, obs_w = OBS_TYPES[obs_type]
        self._action_space = IntBox(0, len(self._actions))
        self._observation_space = IntBox(0, 256, shape=(self._num_img_obs, obs_h, obs_w),
                                         dtype="uint8")

        # Pre-allocated buffers: two raw screens, their max, and a ring of processed frames.
        self._raw_prev = np.zeros((height, width), dtype=np.uint8)
        self._raw_last = np.zeros((height, width), dtype=np.uint8)
        self._raw_max = np.zeros((height, width), dtype=np.uint8)
        self._max_src = self._raw_max[1:-1] if obs_type == "rlpyt" else self._raw_max
        self._dsize = (obs_w, obs_h)  # cv2 sizes are (width, height)
        self._interpolation = cv2.INTER_NEAREST if obs_type == "rlpyt" else cv2.INTER_AREA
        self._ring = np.zeros((self._num_img_obs, obs_h, obs_w), dtype=np.uint8)
        self._slots = [self._ring[i] for i in range(self._num_img_obs)]
        n = self._num_img_obs
        # _orders[h]: ring indices from oldest to newest when slot h holds the newest frame.
        self._orders = [np.array([(h + 1 + i) % n for i in range(n)]) for h in range(n)]
        self._newest = n - 1
        self._repeats = range(self._frame_skip - 1)
        self._lives = 0
        self._step_count = 0
        self.start_noops = 0
        self.reset()

    # ---------------------------------------------------------------- hot path
    def step(self, action: Any) -> EnvStep:
        """Play ``action`` (an index into the minimal action set) for ``frame_skip`` frames and
        return ``EnvStep(observation, reward, done, EnvInfo(game_score, traj_done, timeout))``;
        see the class docstring for the done / traj_done / timeout rules."""
        try:
            ale_action = self._action_of[action]
        except (KeyError, TypeError):
            ale_action = self._action_of[self._check_action(action)]
        ale = self.ale
        act = ale.act
        raw = 0
        for _ in self._repeats:
            raw += act(ale_action)
        ale.getScreenGrayscale(self._raw_prev)
        raw += act(ale_action)
        ale.getScreenGrayscale(self._raw_last)
        np.maximum(self._raw_prev, self._raw_last, out=self._raw_max)
        newest = self._newest + 1
        if newest == self._num_img_obs:
            newest = 0
        self._newest = newest
        cv2.resize(self._max_src, self._dsize, dst=self._slots[newest],
                   interpolation=self._interpolation)

        game_over = ale.game_over()
        lives = ale.lives()
        lost_life = lives < self._lives
        self._lives = lives
        if lost_life and self._fire_on_reset and not game_over:
            raw += act(Action.FIRE)  # relaunch (e.g. Breakout's ball); seen from the next step
        self._step_count += 1
        timeout = self._step_count >= self._step_limit and not game_over
        traj_done = game_over or timeout
        if self._clip_reward:
            reward = float((raw > 0) - (raw < 0))
        else:
            reward = float(raw)
        return EnvStep(self._ring.take(self._orders[newest], axis=0), reward,
                       traj_done or (lost_life and self._episodic_lives),
                       EnvInfo(float(raw), traj_done, timeout))

    def _check_action(self, action: Any) -> int:
        """``action`` as a valid action index, or ValueError naming the valid range."""
        return check_action_index(action, len(self._actions), f"AtariEnv({self.game!r})")

    # ---------------------------------------------------------------- episode control
    def reset(self) -> np.ndarray:
        """Hard-reset the game, play 0..``max_start_noops`` NOOP frames (count drawn from the
        env's RNG, stored in ``start_noops``), press FIRE if ``fire_on_reset``, and return the
        first observation: zeros in every stack slot but the newest, which holds the current
        screen processed like a step's frame (without a max, as there is no earlier frame)."""
        ale = self.ale
        if ale is None:
            raise RuntimeError(f"AtariEnv({self.game!r}) was closed; make a new one")
        ale.reset_game()
        self.start_noops = int(self._rng.integers(0, self._max_start_noops + 1))
        for _ in range(self.start_noops):
            ale.act(Action.NOOP)
        if self._fire_on_reset:
            ale.act(Action.FIRE)
        ale.getScreenGrayscale(self._raw_max)
        self._ring.fill(0)
        self._newest = self._num_img_obs - 1
        cv2.resize(self._max_src, self._dsize, dst=self._slots[self._newest],
                   interpolation=self._interpolation)
        self._lives = ale.lives()
        self._step_count = 0
        return self._ring.take(self._orders[self._newest], axis=0)

    def seed(self, seed: int | None) -> None:
        """Seed the no-op draws and ALE's ``random_seed`` (which drives sticky actions), both
        from ``seed``; ``None`` draws fresh entropy. ALE reads its seed when a ROM loads, so
        this reloads the ROM: call ``reset()`` before stepping again."""
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        if self.ale is None:
            raise RuntimeError(f"AtariEnv({self.game!r}) was closed; make a new one")
        self._rng = np.random.default_rng(seed)
        self.ale.setInt("random_seed", int(self._rng.integers(0, 2**31 - 1)))
        self.ale.loadROM(self._rom_path)

    def render(self) -> np.ndarray:
        """The full-colour screen, ``(210, 160, 3)`` uint8 (observations are grayscale and
        downsampled; this is what a person would see)."""
        if self.ale is None:
            raise RuntimeError(f"AtariEnv({self.game!r}) was closed; make a new one")
        return self.ale.getScreenRGB()

    def get_state(self) -> dict:
        """The emulator (ALE state with its random generator, as bytes), the no-op RNG, the
        frame stack and the episode counters: enough to continue the game exactly."""
        if self.ale is None:
            raise RuntimeError(f"AtariEnv({self.game!r}) was closed; make a new one")
        return dict(game=self.game, ale=self.ale.cloneState(include_rng=True).serialize(),
                    rng=self._rng.bit_generator.state, ring=self._ring.copy(),
                    raw_prev=self._raw_prev.copy(), raw_last=self._raw_last.copy(),
                    newest=self._newest, lives=self._lives, step_count=self._step_count,
                    start_noops=self.start_noops)

    def set_state(self, state: dict) -> None:
        """Restore :meth:`get_state`'s output into an AtariEnv of the same game and
        settings (the arrays are copied in place)."""
        if self.ale is None:
            raise RuntimeError(f"AtariEnv({self.game!r}) was closed; make a new one")
        if state.get("game", self.game) != self.game:
            raise ValueError(f"saved AtariEnv state is of {state['game']!r}, this env plays "
                             f"{self.game!r}")
        if state["ring"].shape != self._ring.shape:
            raise ValueError(f"saved AtariEnv frame stack has shape {state['ring'].shape}, "
                             f"this one {self._ring.shape}: made with other settings?")
        self.ale.restoreState(ALEState(state["ale"]))
        self._rng.bit_generator.state = state["rng"]
        self._ring[...] = state["ring"]
        self._raw_prev[...] = state["raw_prev"]
        self._raw_last[...] = state["raw_last"]
        self._newest = int(state["newest"])
        self._lives = int(state["lives"])
        self._step_count = int(state["step_count"])
        self.start_noops = int(state["start_noops"])

    @property
    def horizon(self) -> int | None:
        """Steps per trajectory before a timeout (``traj_done`` and ``timeout``), or None."""
        return self._horizon

    @property
    def lives(self) -> int:
        """Lives left in the current game (0 for games without lives)."""
        return self._lives

    @property
    def num_actions(self) -> int:
        """Size of the game's minimal action set."""
        return len(self._actions)

    @property
    def action_names(self) -> list:
        """Names of the minimal action set, by action index (e.g. ``["NOOP", "FIRE", ...]``)."""
        return [a.name for a in self._actions]

    def close(self) -> None:
        """Release the emulator; the env cannot be used afterwards. Safe to call twice."""
        self.ale = None

    def __repr__(self) -> str:
        return (f"AtariEnv(game={self.game!r}, frame_skip={self._frame_skip}, "
                f"num_img_obs={self._num_img_obs}, obs_type={self.obs_type!r})")


class AtariTrajInfo(TrajInfo):
    """``TrajInfo`` plus ``GameScore``: the sum of ``env_info.game_score``, i.e. the unclipped
    score that Atari results are reported in."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.GameScore = 0.0

    def step(self, observation: Any, action: Any, reward: Any, done: Any, agent_info: Any,
             env_info: Any) -> None:
        super().step(observation, action, reward, done, agent_info, env_info)
        self.GameScore += float(env_info.game_score)
