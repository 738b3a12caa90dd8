"""Fixed opponents for PettingZoo games: the players that do not learn act by a policy of their
own inside the environment, so a learner's return measures its play against a fixed opponent.

In a zero-sum game where every player learns (self-play with shared parameters), the players'
returns sum to zero whatever they learn, so the training return says nothing about progress.
:class:`OpponentParallelEnv` wraps a PettingZoo ``ParallelEnv`` and keeps only the
``learners`` as its agents; every other player takes the action the ``opponent`` gives for its
own observation of the step before. rlfast then batches the learners alone (one column each),
and their return is the score against that opponent.

Opponents (:class:`Opponent`): :class:`RandomOpponent` (uniform random actions from the
environment's seeded random stream) here, and a frozen snapshot of a trained policy,
:class:`rlfast.envs.policy_file.PolicyFileOpponent` (the TorchScript file of ``rlfast
export``). ``rlfast train ... pz:pettingzoo.atari.pong_v3 --set env.opponent=random`` selects
them from the command line (:mod:`rlfast.experiments.opponents`).
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

try:
    from pettingzoo import ParallelEnv
except ImportError:  # one line, naming the extra (built only for pz: environments)
    raise ImportError("fixed opponents wrap PettingZoo environments: "
                      "pip install 'rlfast[pettingzoo]'") from None

__all__ = ["Opponent", "RandomOpponent", "OpponentParallelEnv", "check_learners"]


class Opponent(Protocol):
    """What :class:`OpponentParallelEnv` asks of an opponent policy."""

    def reset(self, seed: int | None) -> None:
        """A new episode starts; ``seed`` (None but for the env's first seeded reset) seeds
        the opponent's own random choices."""

    def act(self, player: str, observation: Any, action_space: Any) -> Any:
        """The action of ``player`` for its ``observation``, in its ``action_space``."""


class RandomOpponent:
    """Uniform random actions: every player it controls samples its action space with a
    numpy generator seeded at the environment's seeded reset (so a seeded run replays)."""

    def __init__(self) -> None:
        self._rng = np.random.default_rng()

    def reset(self, seed: int | None) -> None:
        if seed is not None:
            self._rng = np.random.default_rng([int(seed), 0x0990])

    def act(self, player: str, observation: Any, action_space: Any) -> Any:
        n = getattr(action_space, "n", None)
        if n is not None:  # Discrete: the common case, without gymnasium's own RNG
            return int(getattr(action_space, "start", 0)) + int(self._rng.integers(int(n)))
        low, high = np.asarray(action_space.low), np.asarray(action_space.high)
        return self._rng.uniform(low, high).astype(action_space.dtype)

    def __repr__(self) -> str:
        return "RandomOpponent()"


def check_learners(learners: str | Sequence[str] | None, players: Sequence[str],
                   where: str = "env.learners") -> list[str]:
    """The learning players, in the game's order: ``learners`` as one name or a list of names
    (None: the game's first player). Names that are not players, an empty list, or every
    player (then nobody is left to be the opponent) are a ``ValueError`` naming the players."""
    players = list(players)
    if learners is None:
        return players[:1]
    names = [learners] if isinstance(learners, str) else list(learners)
    unknown = [n for n in names if n not in players]
    if unknown or not names:
        raise ValueError(f"{where}={learners!r}: name one or more of the game's players "
                         f"{players}" + (f" ({unknown} are not players)" if unknown else ""))
    chosen = [p for p in players if p in names]
    if len(chosen) == len(players):
        raise ValueError(f"{where}={learners!r} names every player of the game, which leaves "
                         f"no player for the opponent; leave env.opponent unset to train them "
                         f"all")
    return chosen


class OpponentParallelEnv(ParallelEnv):
    """The PettingZoo parallel env ``game`` with only ``learners`` as agents; the other
    players act by ``opponent`` (see the module docstring). An opponent acts on the
    observation it was given at the previous step (or at the reset), as a learner does. The
    episode ends for this env when every learner is done, even if opponents play on."""

    def __init__(self, game: Any, opponent: Opponent,
                 learners: str | Sequence[str] | None = None):
        self.game = game
        self.opponent = opponent
        self.possible_agents = check_learners(learners, game.possible_agents)
        self.opponents = [p for p in game.possible_agents if p not in self.possible_agents]
        self.agents: list[str] = []
        self.metadata = dict(getattr(game, "metadata", {}))
        self.render_mode = getattr(game, "render_mode", None)
        self._observations: dict[str, Any] = {}
        players = game.possible_agents  # each space asked once: the same object every call
        self._observation_spaces = {p: game.observation_space(p) for p in players}
        self._action_spaces = {p: game.action_space(p) for p in players}

    def observation_space(self, agent: str) -> Any:
        return self._observation_spaces[agent]

    def action_space(self, agent: str) -> Any:
        return self._action_spaces[agent]

    def state(self) -> np.ndarray:
        return self.game.state()

    def _keep(self, observations: dict) -> None:
        for player in self.opponents:
            if player in observations:
                self._observations[player] = observations[player]

    def reset(self, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        observations, infos = self.game.reset(seed=seed, options=options)
        self.opponent.reset(seed)
        self._observations = {}
        self._keep(observations)
        self.agents = [a for a in self.game.agents if a in self.possible_agents]
        return ({a: observations[a] for a in self.agents},
                {a: infos.get(a, {}) for a in self.agents})

    def step(self, actions: dict) -> tuple[dict, dict, dict, dict, dict]:
        learners = list(self.agents)
        joint = {a: actions[a] for a in learners}
        for player in self.game.agents:
            if player not in joint:
                joint[player] = self.opponent.act(player, self._observations[player],
                                                  self._action_spaces[player])
        observations, rewards, terms, truncs, infos = self.game.step(joint)
        self._keep(observations)
        live = set(self.game.agents)
        self.agents = [a for a in learners if a in live]

        def mine(d: dict, default: Any) -> dict:
            return {a: d.get(a, default) for a in learners}
        return (mine(observations, None), mine(rewards, 0.0), mine(terms, False),
                mine(truncs, False), mine(infos, {}))

    def render(self) -> Any:
        return self.game.render()

    def close(self) -> None:
        self.game.close()

    def __str__(self) -> str:
        return f"OpponentParallelEnv<{self.game}, learners={self.possible_agents}>"
