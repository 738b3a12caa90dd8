"""PettingZoo's multi-agent Atari games with the classic DQN frame processing, per player.

:class:`AtariParallelEnv` is itself a PettingZoo ``ParallelEnv`` (so PettingZoo's own API
test runs on it): it builds a ``pettingzoo.atari`` game on grayscale screens, with the ROM
taken from ale-py's bundled ``roms`` folder (no download), and gives every player what
rlfast's single-agent :class:`~rlfast.envs.atari.AtariEnv` gives its one player: each step
repeats the joint action for ``frame_skip`` emulator frames, sums each player's rewards
(their sign with ``clip_reward``), takes the pixel-wise max of the last two frames, shrinks
it to :data:`~rlfast.envs.atari.OBS_TYPES`' size (104 x 80 ``"rlpyt"`` or 84 x 84), and
stacks the last ``num_img_obs`` frames as uint8 ``(num_img_obs, H, W)``, oldest first.
``reset`` plays 0..``max_start_noops`` joint NOOP frames (drawn from the env's RNG) and fills
the stack with zeros but for the newest frame; ``horizon`` steps truncate the episode.
:func:`pettingzoo_atari_env` builds a :class:`~rlfast.envs.pettingzoo.PettingZooEnv` over it, so the
players become batch columns of uint8 frames. Multi-agent ALE has no sticky actions and no
per-player lives, so there is no ``repeat_action_probability`` or ``episodic_lives`` here.

Needs ``pip install 'rlfast[pettingzoo-atari]'`` (PettingZoo and multi-agent-ale-py).
"""
from __future__ import annotations

import functools
import os
import warnings
from typing import Any

import cv2
import numpy as np

try:
    from pettingzoo import ParallelEnv
except ImportError:  # one line, naming the extra (this module is imported for pz:...atari)
    raise ImportError("PettingZoo's Atari games need PettingZoo and multi-agent-ale-py: "
                      "pip install 'rlfast[pettingzoo-atari]'") from None

from rlfast.envs.atari.atari_env import OBS_TYPES
from rlfast.envs.pettingzoo import (PettingZooEnv, PettingZooError, check_pettingzoo_id,
                                   learner_count)
from rlfast.utils.checks import check_choice, check_int

__all__ = ["AtariParallelEnv", "pettingzoo_atari_env", "player_names", "ale_rom_folder"]

ATARI_EXTRA = "pip install 'rlfast[pettingzoo-atari]'"


def ale_rom_folder() -> str:
    """ale-py's bundled ``roms`` folder, which PettingZoo's Atari games read their ROM from."""
    import ale_py
    return os.path.join(os.path.dirname(ale_py.__file__), "roms")


def _make_game(env: str, env_kwargs: dict) -> Any:
    """The ``pettingzoo.atari`` game ``env`` as a parallel env on grayscale screens, or a
    one-line :class:`PettingZooError` naming the extra to install."""
    kwargs = dict(env_kwargs)
    obs_type = kwargs.pop("obs_type", "grayscale_image")
    if obs_type != "grayscale_image":
        raise PettingZooError(f"PettingZoo Atari environment {env!r}: env.kwargs.obs_type is "
                              f"{obs_type!r}; rlfast processes the grayscale screens itself "
                              f"(leave obs_type unset)")
    kwargs.setdefault("auto_rom_install_path", ale_rom_folder())
    with warnings.catch_warnings():  # PettingZoo's "create envs without the registry" notice
        warnings.simplefilter("ignore", DeprecationWarning)
        module = check_pettingzoo_id(env)
    try:
        return module.parallel_env(obs_type=obs_type, **kwargs)
    except OSError as e:  # PettingZoo: "rom <game> is not installed ..."
        raise PettingZooError(f"PettingZoo Atari environment {env!r} found no ROM in "
                              f"{kwargs['auto_rom_install_path']} ({str(e).split('.')[0]}); "
                              f"{ATARI_EXTRA} installs ale-py's bundled ROMs") from None
    except (TypeError, AssertionError) as e:
        raise PettingZooError(f"PettingZoo environment {env!r} refused its arguments "
                              f"{env_kwargs}: {e}") from None


def _noop_index(game: Any) -> int:
    """The action index of NOOP in the game's action set (ALE action 0)."""
    mapping = getattr(getattr(game, "unwrapped", game), "action_mapping", None)
    if mapping is None:
        return 0
    found = np.flatnonzero(np.asarray(mapping) == 0)
    if found.size == 0:
        raise PettingZooError("this PettingZoo Atari game has no NOOP action, which the "
                              "no-op starts need; set env.max_start_noops=0")
    return int(found[0])


class AtariParallelEnv(ParallelEnv):
    """A ``pettingzoo.atari`` game with per-player Atari frame processing, as a PettingZoo
    ``ParallelEnv`` (see the module docstring). ``env``: the module path
    (``pettingzoo.atari.pong_v3``); ``env_kwargs``: its constructor's arguments."""

    def __init__(self, env: str, env_kwargs: dict | None = None, frame_skip: int = 4,
                 num_img_obs: int = 4, clip_reward: bool = True, max_start_noops: int = 30,
                 horizon: int | None = 27000, obs_type: str = "rlpyt", seed: int | None = None):
        from gymnasium import spaces
        owner = "AtariParallelEnv"
        self.frame_skip = check_int(frame_skip, "frame_skip", minimum=1, owner=owner)
        self.num_img_obs = check_int(num_img_obs, "num_img_obs", minimum=1, owner=owner)
        self.max_start_noops = check_int(max_start_noops, "max_start_noops", minimum=0,
                                         owner=owner)
        self.horizon = None if horizon is None else check_int(horizon, "horizon", minimum=1,
                                                              owner=owner)
        self.obs_type = check_choice(obs_type, "obs_type", OBS_TYPES, owner=owner)
        self.clip_reward = bool(clip_reward)
        self.game = _make_game(env, dict(env_kwargs or {}))
        self.possible_agents = list(self.game.possible_agents)
        self.agents: list[str] = []
        self.metadata = dict(getattr(self.game, "metadata", {}))
        self.render_mode = getattr(self.game, "render_mode", None)
        height, width = OBS_TYPES[self.obs_type]
        self._dsize = (width, height)  # cv2 sizes are (width, height)
        self._crop = slice(1, -1) if self.obs_type == "rlpyt" else slice(None)
        self._interpolation = cv2.INTER_NEAREST if self.obs_type == "rlpyt" else cv2.INTER_AREA
        self._space = spaces.Box(0, 255, (self.num_img_obs, height, width), np.uint8)
        self._noop = _noop_index(self.game) if self.max_start_noops else 0
        self._stacks = {a: np.zeros(self._space.shape, np.uint8) for a in self.possible_agents}
        self._rng = np.random.default_rng(seed)
        self._seed = seed
        self._steps = 0
        self.start_noops = 0

    # ---- PettingZoo's ParallelEnv interface ----------------------------------------------
    def observation_space(self, agent: str) -> Any:
        return self._space

    def action_space(self, agent: str) -> Any:
        return self.game.action_space(agent)

    def _frame(self, screen: np.ndarray) -> np.ndarray:
        """One screen (or the max of two), cropped and resized as AtariEnv does."""
        screen = np.asarray(screen).reshape(screen.shape[0], screen.shape[1])
        return cv2.resize(screen[self._crop], self._dsize, interpolation=self._interpolation)

    def _push(self, agent: str, frame: np.ndarray) -> np.ndarray:
        stack = self._stacks[agent]
        stack[:-1] = stack[1:]
        stack[-1] = frame
        return stack.copy()

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        if seed is None and self._seed is not None:
            seed, self._seed = self._seed, None  # the constructor's seed, once
        if seed is not None:
            self._rng = np.random.default_rng(seed)
            obs, _ = self.game.reset(seed=int(self._rng.integers(0, 2**31 - 1)))
        else:
            obs, _ = self.game.reset()
        self.start_noops = int(self._rng.integers(0, self.max_start_noops + 1))
        for _ in range(self.start_noops):
            noop_obs, _, term, trunc, _ = self.game.step(
                {a: self._noop for a in self.game.agents})
            if any(term.values()) or any(trunc.values()):  # a game that ends on no-ops
                obs, _ = self.game.reset()
                break
            obs = noop_obs
        self.agents = list(self.game.agents)
        self._steps = 0
        out = {}
        for agent in self.agents:
            self._stacks[agent].fill(0)
            out[agent] = self._push(agent, self._frame(obs[agent]))
        return out, {a: {} for a in self.agents}

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        agents = list(self.agents)
        raw = dict.fromkeys(agents, 0.0)
        term = dict.fromkeys(agents, False)
        trunc = dict.fromkeys(agents, False)
        last = prev = None
        for _ in range(self.frame_skip):
            live = list(self.game.agents)
            obs, rewards, t, tr, _ = self.game.step({a: actions[a] for a in live})
            for a, r in rewards.items():
                raw[a] += float(r)
            for a in t:
                term[a] = term[a] or bool(t[a])
                trunc[a] = trunc[a] or bool(tr[a])
            prev, last = last, obs
            if any(t.values()) or any(tr.values()):
                break
        self._steps += 1
        if self.horizon is not None and self._steps >= self.horizon:
            trunc = {a: trunc[a] or not term[a] for a in agents}
        out, infos, rewards = {}, {}, {}
        for agent in agents:
            screen = last[agent]
            if prev is not None and agent in prev:
                screen = np.maximum(prev[agent], screen)
            out[agent] = self._push(agent, self._frame(screen))
            r = raw[agent]
            rewards[agent] = float((r > 0) - (r < 0)) if self.clip_reward else r
            infos[agent] = dict(game_score=r)
        self.agents = [a for a in agents if not (term[a] or trunc[a])]
        if not self.game.agents:
            self.agents = []
        return out, rewards, term, trunc, infos

    def render(self) -> Any:
        return self.game.render()

    def close(self) -> None:
        self.game.close()

    def __str__(self) -> str:
        return f"AtariParallelEnv<{self.metadata.get('name', 'atari')}>"



def pettingzoo_atari_env(env: str, env_kwargs: dict | None = None, frame_skip: int = 4,
                         num_img_obs: int = 4, clip_reward: bool = True,
                         max_start_noops: int = 30, horizon: int | None = 27000,
                         obs_type: str = "rlpyt", agent_id: bool = False,
                         global_state: bool = False, pad: bool = False, seed: int | None = None,
                         render_mode: str | None = None, opponent: Any = None,
                         learners: str | list[str] | None = None) -> PettingZooEnv:
    """A ``pettingzoo.atari`` game as a :class:`~rlfast.envs.pettingzoo.PettingZooEnv` of
    uint8 frame stacks, one batch column per player (see the module docstring): the samplers'
    ``EnvCls`` for ``pz:pettingzoo.atari.*`` ids. ``env`` and ``env_kwargs`` as for
    PettingZooEnv; the Atari options as for :class:`AtariParallelEnv`. Image observations
    carry no agent id and no global state. ``opponent`` and ``learners``: a fixed opponent for
    the players that do not learn (:mod:`rlfast.envs.opponents`), as for PettingZooEnv."""
    atari = dict(frame_skip=frame_skip, num_img_obs=num_img_obs, clip_reward=clip_reward,
                 max_start_noops=max_start_noops, horizon=horizon, obs_type=obs_type)
    return PettingZooEnv(env, env_kwargs, agent_id=agent_id, global_state=global_state,
                         pad=pad, seed=seed, render_mode=render_mode,
                         make_env=functools.partial(AtariParallelEnv, **atari),
                         horizon=horizon, opponent=opponent, learners=learners)


def player_names(env: str, env_kwargs: dict | None = None) -> list[str]:
    """The players (``possible_agents``) of the game ``env`` built with ``env_kwargs``."""
    game = _make_game(env, dict(env_kwargs or {}))
    try:
        return list(game.possible_agents)
    finally:
        game.close()


def _players(env: str, env_kwargs: dict | None = None, opponent: Any = None,
             learners: str | list[str] | None = None, **_: Any) -> int:
    return learner_count(env, player_names(env, env_kwargs), opponent, learners)


# The samplers ask an EnvCls how many batch columns one environment fills.
pettingzoo_atari_env.agents_per_env = _players
