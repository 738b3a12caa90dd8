"""The environment interface the samplers step: numpy in, numpy out."""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections import namedtuple
from typing import Any

EnvStep = namedtuple("EnvStep", ["observation", "reward", "done", "env_info"])
EnvSpaces = namedtuple("EnvSpaces", ["observation", "action"])


class Env(ABC):
    """The learning task: an MDP with an observation space and an action space that inputs and
    outputs numpy arrays. ``step(action)`` advances the dynamics and returns an ``EnvStep`` of
    (observation, reward, done, env_info) where ``env_info`` is a namedtuple whose fields stay
    the same at every step, because the sampler pre-allocates buffer memory for them.
    ``reset()`` starts a new episode and returns its first observation. Subclasses set
    ``self._observation_space`` and ``self._action_space`` (rlfast spaces)."""

    _observation_space: Any = None
    _action_space: Any = None

    @abstractmethod
    def step(self, action: Any) -> EnvStep:
        """Run one timestep with ``action`` (an element of the action space)."""

    @abstractmethod
    def reset(self) -> Any:
        """Reset the environment and return the first observation of the new episode."""

    @property
    def action_space(self) -> Any:
        """The rlfast space of actions."""
        return self._action_space

    @property
    def observation_space(self) -> Any:
        """The rlfast space of observations."""
        return self._observation_space

    @property
    def spaces(self) -> EnvSpaces:
        """``EnvSpaces(observation, action)``, what agents are initialized with."""
        return EnvSpaces(observation=self.observation_space, action=self.action_space)

    @property
    def horizon(self) -> int | None:
        """Maximum episode length (steps before a time-limit cut), or None if unlimited."""
        return None

    def seed(self, seed: int | None) -> None:
        """Seed the environment's randomness; the base environment has none, so this does
        nothing. Subclasses with stochastic dynamics override it."""

    def render(self) -> Any:
        """The current frame as an RGB ``uint8`` array ``(height, width, 3)``, for watching an
        agent and recording videos (``rlfast watch``). Environments that draw frames override
        it; this one has no picture, so it says so."""
        raise TypeError(f"{type(self).__name__} does not render frames; rlfast watch needs an "
                        f"environment with an RGB render (a gymnasium environment made with "
                        f"render_mode='rgb_array', or atari:<game>)")

    def get_state(self) -> dict | None:
        """Everything needed to continue this environment exactly where it is (mid-episode
        included), as plain data a snapshot can hold: numbers, strings, bytes, numpy arrays
        and lists, tuples and dicts of them. None (this base implementation): the state
        cannot be captured, and a resumed run starts new, reseeded episodes in this
        environment instead. Environments that can be continued override both methods."""
        return None

    def set_state(self, state: dict) -> None:
        """Restore what :meth:`get_state` returned (the environment was built with the same
        arguments)."""
        raise TypeError(f"{type(self).__name__} cannot restore a saved state (its get_state "
                        f"returns None)")

    def close(self) -> None:
        """Release resources (windows, emulators, subprocesses); nothing to release here."""


def trajectory_done(env_info: Any, done: bool) -> bool:
    """``env_info.traj_done`` when the environment reports it (Atari episodic lives: a lost
    life is ``done`` but not the end of the trajectory), else ``done``.

    Namedtuple infos are checked through their ``_fields``: looking up a missing field on
    them raises (and formats) an AttributeError, which cost microseconds at every step."""
    fields = getattr(env_info, "_fields", None)
    if fields is not None:
        return env_info.traj_done if "traj_done" in fields else done
    return getattr(env_info, "traj_done", done)
