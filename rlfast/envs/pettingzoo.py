"""PettingZoo environments under rlfast: the agents of one parallel env become batch columns.

``PettingZooEnv(env="mpe2.simple_spread_v3", env_kwargs=dict(N=3))`` imports the module and
builds its ``parallel_env(**env_kwargs)``; a module that only offers the AEC API (``env()``)
is converted with PettingZoo's own ``aec_to_parallel``, which refuses AEC envs that cannot
run in parallel. Every agent of ``possible_agents`` owns one column
(:mod:`rlfast.envs.multiagent`), in that order.

Observations are one vector per agent, ``[local | one-hot agent id | global state]``
(:func:`~rlfast.envs.multiagent.agent_observation_box`): ``agent_id`` (default True) appends
the agent's one-hot index, which separate per-agent policies need and a shared policy may
use; ``global_state`` appends the env's ``state()`` (or, for envs without one, every
agent's observation concatenated, zeros for departed agents), which a centralised critic
reads. Image observations (a 3-D uint8 Box the same for every agent, such as the frame stacks
of :mod:`rlfast.envs.pettingzoo_atari`) are passed on as uint8 arrays, without agent id or
global state. Agents must share one observation and one action space; ``pad=True`` accepts
1-D Box observations of different sizes (zero-padded to the largest) and Discrete action
spaces of different sizes (the largest; an agent given an action beyond its own space takes
its last action).

PettingZoo is an optional dependency (``pip install rlfast[pettingzoo]``); this module
imports it when an environment is built.
"""
from __future__ import annotations

import difflib
import importlib
import pkgutil
from collections.abc import Callable
from typing import Any

import numpy as np

from rlfast.envs.base import EnvStep
from rlfast.envs.multiagent import MultiAgentEnv, MultiAgentInfo, agent_observation_box
from rlfast.spaces.float_box import FloatBox
from rlfast.spaces.int_box import IntBox

__all__ = ["PettingZooEnv", "make_parallel_env", "check_pettingzoo_id", "PettingZooError"]


class PettingZooError(ValueError):
    """A PettingZoo id that does not name an environment, or spaces rlfast cannot batch."""


def _close_names(module_path: str) -> str:
    """``; did you mean ...?`` from the sibling modules of ``module_path``'s package."""
    package, _, leaf = module_path.rpartition(".")
    if not package:
        return ""
    try:
        parent = importlib.import_module(package)
    except ImportError:
        return ""
    names = [m.name for m in pkgutil.iter_modules(getattr(parent, "__path__", []))]
    close = difflib.get_close_matches(leaf, names, n=3, cutoff=0.6)
    return f"; did you mean {' or '.join(package + '.' + c for c in close)}?" if close else ""


def check_pettingzoo_id(env: str) -> Any:
    """Import the module ``env`` names (``mpe2.simple_spread_v3``) and return it, or raise a
    one-line :class:`PettingZooError` naming the id and close matches."""
    if not isinstance(env, str) or not env or env.startswith(".") or env.endswith("."):
        raise PettingZooError(f"a PettingZoo id is a module path such as "
                              f"mpe2.simple_spread_v3; got {env!r}")
    try:
        module = importlib.import_module(env)
    except ImportError as e:
        missing = getattr(e, "name", None) or ""
        if env.startswith("pettingzoo.atari.") and missing in ("multi_agent_ale_py", "pygame"):
            raise PettingZooError(f"PettingZoo Atari environment {env!r} needs the {missing} "
                                  f"package: pip install 'rlfast[pettingzoo-atari]'") from None
        if missing in ("pettingzoo", "mpe2") or env.split(".")[0] == missing == "pettingzoo":
            raise PettingZooError(f"PettingZoo environment {env!r} needs the {missing} package: "
                                  f"pip install 'rlfast[pettingzoo]'") from None
        raise PettingZooError(f"unknown PettingZoo environment {env!r}: cannot import it "
                              f"({e}){_close_names(env)}") from None
    if not hasattr(module, "parallel_env") and not hasattr(module, "env"):
        raise PettingZooError(f"{env!r} is a module without parallel_env() or env(), not a "
                              f"PettingZoo environment{_close_names(env)}")
    return module


def make_parallel_env(env: str, env_kwargs: dict | None = None) -> Any:
    """The PettingZoo parallel env of module ``env``: its ``parallel_env(**env_kwargs)``, or
    ``aec_to_parallel(env(**env_kwargs))`` for a module with only the AEC API."""
    module = check_pettingzoo_id(env)
    kwargs = dict(env_kwargs or {})
    try:
        if hasattr(module, "parallel_env"):
            return module.parallel_env(**kwargs)
        from pettingzoo.utils.conversions import aec_to_parallel
        return aec_to_parallel(module.env(**kwargs))
    except TypeError as e:
        raise PettingZooError(f"PettingZoo environment {env!r} refused its arguments "
                              f"{kwargs}: {e}") from None
    except AssertionError as e:  # aec_to_parallel: "not parallelizable"
        raise PettingZooError(f"PettingZoo environment {env!r} has no parallel API and its AEC "
                              f"env cannot be converted: {e}") from None


def learner_count(env: str, players: list[str], opponent: Any,
                  learners: str | list[str] | None) -> int:
    """The columns of a game with ``players``: all of them, or with an ``opponent`` the
    ``learners`` (:func:`rlfast.envs.opponents.check_learners`)."""
    if opponent is None:
        return len(players)
    from rlfast.envs.opponents import check_learners
    try:
        return len(check_learners(learners, players))
    except ValueError as e:
        raise PettingZooError(f"PettingZoo environment {env!r}: {e}") from None


def _space_text(space: Any) -> str:
    return " ".join(str(space).split())


def _observation_size(name: str, agent: str, space: Any) -> int:
    from gymnasium import spaces as gym_spaces
    if not isinstance(space, gym_spaces.Box) or len(space.shape) != 1:
        raise PettingZooError(f"PettingZoo environment {name!r}: agent {agent!r} observes "
                              f"{_space_text(space)}; rlfast's multi-agent models need 1-D Box "
                              f"(vector) observations")
    return int(space.shape[0])


def image_shape(env: Any) -> tuple[int, ...] | None:
    """The shape of the env's image observations when every agent observes one 3-D uint8
    Box (frames, height, width), else None."""
    from gymnasium import spaces as gym_spaces
    spaces_ = [env.observation_space(a) for a in env.possible_agents]
    first = spaces_[0] if spaces_ else None
    if not isinstance(first, gym_spaces.Box) or len(first.shape) != 3 or \
            np.dtype(first.dtype) != np.uint8 or any(s != first for s in spaces_):
        return None
    return tuple(int(n) for n in first.shape)


def _agent_spaces(name: str, env: Any, pad: bool) -> tuple[list[int], Any, list[int] | None]:
    """Per-agent observation sizes (0 for image observations), the common action space
    (gymnasium) and, for padded Discrete actions, each agent's action count."""
    from gymnasium import spaces as gym_spaces
    agents = list(env.possible_agents)
    obs_spaces = [env.observation_space(a) for a in agents]
    act_spaces = [env.action_space(a) for a in agents]
    if image_shape(env) is not None:
        sizes = [0] * len(agents)
    else:
        sizes = [_observation_size(name, a, s) for a, s in zip(agents, obs_spaces)]
    differ = [a for a, s in zip(agents, obs_spaces) if s != obs_spaces[0]]
    if differ and not pad:
        raise PettingZooError(
            f"PettingZoo environment {name!r}: agents observe different spaces "
            f"({agents[0]}: {_space_text(obs_spaces[0])}, {differ[0]}: "
            f"{_space_text(env.observation_space(differ[0]))}); set env.pad=True to zero-pad "
            f"them to one size")
    act_differ = [a for a, s in zip(agents, act_spaces) if s != act_spaces[0]]
    if not act_differ:
        return sizes, act_spaces[0], None
    discrete = all(isinstance(s, gym_spaces.Discrete) and int(s.start) == 0 for s in act_spaces)
    if not pad or not discrete:
        how = ("set env.pad=True to use the largest" if discrete else
               "only Discrete action spaces can be padded")
        raise PettingZooError(
            f"PettingZoo environment {name!r}: agents act in different spaces "
            f"({agents[0]}: {_space_text(act_spaces[0])}, {act_differ[0]}: "
            f"{_space_text(env.action_space(act_differ[0]))}); {how}")
    counts = [int(s.n) for s in act_spaces]
    return sizes, gym_spaces.Discrete(max(counts)), counts


def _rlfast_action_space(name: str, space: Any) -> Any:
    from gymnasium import spaces as gym_spaces
    if isinstance(space, gym_spaces.Discrete):
        return IntBox(int(space.start), int(space.start) + int(space.n))
    if isinstance(space, gym_spaces.Box) and np.dtype(space.dtype).kind == "f" and \
            len(space.shape) == 1:
        return FloatBox(space.low, space.high, dtype="float32")
    raise PettingZooError(f"PettingZoo environment {name!r}: action space {_space_text(space)} "
                          f"is not supported (Discrete or a 1-D float Box)")


class PettingZooEnv(MultiAgentEnv):
    """A PettingZoo parallel env as a :class:`~rlfast.envs.multiagent.MultiAgentEnv` (see
    the module docstring). ``env``: the module path; ``env_kwargs``: its arguments
    (``N``, ``max_cycles``, ``render_mode``...). ``make_env(env, env_kwargs)`` builds the
    PettingZoo parallel env instead of the module's own constructor (PettingZoo Atari's
    processed games, :func:`~rlfast.envs.pettingzoo_atari.pettingzoo_atari_env`), and
    ``horizon`` then gives its episode cut. With an ``opponent``
    (:class:`~rlfast.envs.opponents.Opponent`), only ``learners`` (a player's name or a list
    of names; None: the game's first player) are agents and columns; the other players act by
    the opponent (:class:`~rlfast.envs.opponents.OpponentParallelEnv`)."""

    def __init__(self, env: str, env_kwargs: dict | None = None, agent_id: bool = True,
                 global_state: bool = False, pad: bool = False, seed: int | None = None,
                 render_mode: str | None = None,
                 make_env: Callable[[str, dict], Any] | None = None,
                 horizon: int | None = None, opponent: Any = None,
                 learners: str | list[str] | None = None):
        self.env_name = env
        self.env_kwargs = dict(env_kwargs or {})
        self._make = make_env or make_parallel_env
        self._opponent = opponent
        self._learners = learners
        self._horizon = horizon
        if render_mode is not None:  # rlfast watch: frames from the PettingZoo env
            self.env_kwargs["render_mode"] = render_mode
        self._env = self._make_env()
        self.agent_names = list(self._env.possible_agents)
        self.n_agents = len(self.agent_names)
        if self.n_agents == 0:
            raise PettingZooError(f"PettingZoo environment {env!r} has no agents")
        sizes, action_space, self._action_counts = _agent_spaces(env, self._env, pad)
        self._local = max(sizes)
        self._agent_id = bool(agent_id)
        self._global_state = bool(global_state)
        self._state_fn = None
        self._image = image_shape(self._env)
        if self._image is not None and (self._agent_id or self._global_state):
            raise PettingZooError(
                f"PettingZoo environment {env!r} observes images {self._image}, which carry "
                f"no agent id or global state; set env.agent_id=False and "
                f"env.global_state=False")
        state_size = 0
        if self._global_state:
            self._state_fn, state_size = self._find_state()
        if self._image is not None:
            self._observation_space = IntBox(0, 256, shape=self._image, dtype="uint8")
        else:
            self._observation_space = agent_observation_box(
                self._local, self.n_agents if self._agent_id else 0, state_size)
        self._gym_action_space = action_space
        self._action_space = _rlfast_action_space(env, action_space)
        self._discrete = isinstance(self._action_space, IntBox)
        self._obs = np.zeros((self.n_agents, *self._observation_space.shape),
                             self._observation_space.dtype)
        if self._agent_id:
            self._obs[:, self._local:self._local + self.n_agents] = np.eye(self.n_agents)
        self._alive = np.zeros(self.n_agents, bool)
        self._seed = seed

    def _make_env(self) -> Any:
        """The PettingZoo parallel env this wraps (``make_env``'s, when given), inside an
        :class:`~rlfast.envs.opponents.OpponentParallelEnv` when there is an opponent (a
        copy of it per environment: its random stream and memory are this env's own)."""
        game = self._make(self.env_name, self.env_kwargs)
        if self._opponent is None:
            return game
        import copy

        from rlfast.envs.opponents import OpponentParallelEnv
        try:
            return OpponentParallelEnv(game, copy.deepcopy(self._opponent), self._learners)
        except ValueError as e:
            game.close()
            raise PettingZooError(f"PettingZoo environment {self.env_name!r}: {e}") from None

    @classmethod
    def agents_per_env(cls, env: str, env_kwargs: dict | None = None, opponent: Any = None,
                       learners: str | list[str] | None = None, **_: Any) -> int:
        """The number of agents (columns) of ``env`` built with ``env_kwargs``: every player,
        or with an ``opponent`` the ``learners`` alone."""
        made = make_parallel_env(env, env_kwargs)
        try:
            return learner_count(env, made.possible_agents, opponent, learners)
        finally:
            made.close()

    def _find_state(self) -> tuple[Any, int]:
        """The env's ``state()`` when it declares a 1-D ``state_space``, else the agents'
        observations concatenated (zeros for departed agents)."""
        state_space = getattr(self._env, "state_space", None)
        shape = getattr(state_space, "shape", None)
        if shape is not None and len(shape) == 1:
            env = self._env
            return (lambda obs: np.asarray(env.state(), np.float32).reshape(-1)), int(shape[0])
        local = self._local

        def concatenated(obs: dict) -> np.ndarray:
            state = np.zeros(self.n_agents * local, np.float32)
            for k, name in enumerate(self.agent_names):
                if name in obs:
                    o = np.asarray(obs[name], np.float32).reshape(-1)
                    state[k * local:k * local + o.shape[0]] = o
            return state
        return concatenated, self.n_agents * local

    # ---- the Env interface ---------------------------------------------------------------
    def _write_observations(self, obs: dict) -> np.ndarray:
        local = self._local
        out = self._obs
        if self._image is not None:  # uint8 frames; zeros for departed agents
            for k, name in enumerate(self.agent_names):
                o = obs.get(name) if self._alive[k] else None
                out[k] = 0 if o is None else o
            return out.copy()
        state = self._state_fn(obs) if self._state_fn is not None else None
        for k, name in enumerate(self.agent_names):
            o = obs.get(name) if self._alive[k] else None
            if o is None:
                out[k, :local] = 0.0
            else:
                o = np.asarray(o, np.float32).reshape(-1)
                out[k, :o.shape[0]] = o
                if o.shape[0] < local:
                    out[k, o.shape[0]:local] = 0.0
            if state is not None:
                out[k, out.shape[1] - state.shape[0]:] = state if self._alive[k] else 0.0
        return out.copy()

    def reset(self) -> np.ndarray:
        if self._seed is not None:
            obs, _ = self._env.reset(seed=self._seed)
            self._seed = None  # reseed once: later episodes continue the env's own RNG
        else:
            obs, _ = self._env.reset()
        live = set(self._env.agents)
        self._alive[:] = [name in live for name in self.agent_names]
        observation = self._write_observations(obs)
        return observation[0] if self.n_agents == 1 else observation

    def _env_action(self, k: int, a: Any) -> Any:
        if self._discrete:
            a = int(a)
            if self._action_counts is not None:
                a = min(a, self._action_counts[k] - 1)
            return a
        # Clipped to the Box's bounds for the env alone (the sampler keeps the action as drawn,
        # so a Gaussian policy's likelihood ratios stay unbiased), as gymnasium's ClipAction.
        space = self._gym_action_space
        return np.clip(np.asarray(a, dtype=space.dtype), space.low, space.high)

    def step(self, action: Any) -> EnvStep:
        """Step every live agent with its column of ``action``. A game with one agent (one
        learner against an opponent) is a single-agent env to the samplers: its action,
        observation, reward, done and info have no agent dimension."""
        if self.n_agents == 1:
            action = np.asarray(action)[None]
        actions = {name: self._env_action(k, action[k])
                   for k, name in enumerate(self.agent_names) if self._alive[k]}
        valid = self._alive.copy()
        obs, rewards, terminations, truncations, _ = self._env.step(actions)
        live = set(self._env.agents)
        reward = np.zeros(self.n_agents, np.float32)
        timeout = np.zeros(self.n_agents, bool)
        for k, name in enumerate(self.agent_names):
            if valid[k]:
                reward[k] = rewards.get(name, 0.0)
                timeout[k] = bool(truncations.get(name, False)) and \
                    not bool(terminations.get(name, False))
        observation = self._write_observations(obs)  # departed agents keep the step's last obs
        self._alive[:] = [name in live for name in self.agent_names]
        done = ~self._alive
        if not self._alive.any():
            done[:] = True
        if self.n_agents == 1:
            return EnvStep(observation[0], reward[0], bool(done[0]),
                           MultiAgentInfo(valid=bool(valid[0]), timeout=bool(timeout[0])))
        return EnvStep(observation, reward, done, MultiAgentInfo(valid=valid, timeout=timeout))

    def seed(self, seed: int | None) -> None:
        """Seed the next reset (PettingZoo seeds its env at reset)."""
        self._seed = None if seed is None else int(seed)

    def render(self) -> np.ndarray:
        frame = self._env.render()
        if frame is None:
            raise TypeError(f"PettingZoo environment {self.env_name!r} returned no frame; "
                            f"build it with env_kwargs render_mode='rgb_array'")
        return np.asarray(frame, dtype=np.uint8)

    @property
    def horizon(self) -> int | None:
        """``max_cycles`` (PettingZoo's episode cut) when the env has one, else None (or the
        ``horizon`` given)."""
        if self._horizon is not None:
            return self._horizon
        cycles = self.env_kwargs.get("max_cycles")
        if cycles is None:
            cycles = getattr(getattr(self._env, "unwrapped", self._env), "max_cycles", None)
        return int(cycles) if isinstance(cycles, (int, np.integer)) else None

    @property
    def name(self) -> str:
        return f"pz:{self.env_name}"

    def close(self) -> None:
        self._env.close()
