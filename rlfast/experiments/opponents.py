"""The ``env.opponent`` of ``pz:`` runs: a fixed opponent for the players that do not learn.

``--set env.opponent=random`` makes every player outside ``env.learners`` (default: the game's
first player) act uniformly at random; ``--set env.opponent=<policy.pt>`` makes them play a
frozen snapshot of a learner: the TorchScript file that ``rlfast export RUN --format
torchscript`` writes from a run's snapshot (its greedy evaluation policy), loaded once per
process that steps environments. Only the learners are batch columns, so their return is their
score against that fixed opponent: in a zero-sum game where every player learns, the returns
sum to zero and show nothing.

A frozen snapshot plays the role it learned. In a two-player Atari game both players see the
same screen, so a policy that learned to move the first player's paddle cannot move the
second's: a run whose learner was ``first_0`` makes an opponent for ``first_0`` only, and the
run that plays against it learns as ``second_0``. Self-play by frozen snapshots alternates the
roles, each generation against the last one of the other role. A run that trained every
player (no opponent) may play any role. The file's record (:mod:`rlfast.envs.policy_file`)
lets these checks run before the run starts.
"""
from __future__ import annotations

from typing import Any

from rlfast.experiments.config import ConfigError

__all__ = ["make_opponent", "RANDOM"]

RANDOM = "random"


def _policy_file_opponent(value: str, env_id: str, players: list[str],
                          opponents: list[str]) -> Any:
    """A PolicyFileOpponent of the file ``value``, after checking its record: the same game,
    image observations, a feed-forward policy, and the opponents' role."""
    from rlfast.envs.policy_file import PolicyFileError, PolicyFileOpponent, read_policy_info
    where = f"env.opponent={value!r}"
    try:
        info = read_policy_info(value)
    except PolicyFileError as e:
        raise ConfigError(f"{where}: not '{RANDOM}' and not a policy file ({e}); write one "
                          f"with rlfast export RUN_DIR --format torchscript") from None
    if info.get("env") != f"pz:{env_id}":
        raise ConfigError(f"{where}: that policy learned {info.get('env')!r}, not pz:{env_id}; "
                          f"a frozen opponent plays the game it learned")
    if not env_id.startswith("pettingzoo.atari."):
        raise ConfigError(f"{where}: a frozen policy opponent needs image observations "
                          f"(pz:pettingzoo.atari.* games): a vector observation's agent id "
                          f"and layout differ between roles; use env.opponent={RANDOM}")
    if info.get("recurrent"):
        raise ConfigError(f"{where}: a recurrent policy cannot be a fixed opponent (its memory "
                          f"state is not kept between steps here); export a feed-forward run")
    roles = info.get("learners")
    if roles is not None:
        roles = list(roles) or players[:1]
        if sorted(roles) != sorted(opponents):
            raise ConfigError(f"{where}: that policy learned as {roles}, but here the opponent "
                              f"plays {opponents}; a frozen policy plays only the role it "
                              f"learned (set env.learners to the other player(s))")
    return PolicyFileOpponent(value)


def make_opponent(value: Any, env_id: str, players: list[str], learners: Any) -> Any:
    """The opponent object of ``env.opponent=value`` for the game ``env_id`` (a ``pz:`` id
    without its prefix) with ``players``: None (no opponent: every player learns),
    :class:`~rlfast.envs.opponents.RandomOpponent` for ``"random"``, or a
    :class:`~rlfast.envs.policy_file.PolicyFileOpponent` for an exported policy file. Bad
    values are a :class:`ConfigError` that names them."""
    if value is None:
        if learners is not None:
            raise ConfigError(f"env.learners={learners!r} needs env.opponent ('{RANDOM}' or an "
                              f"exported policy file) for the other players")
        return None
    from rlfast.envs.opponents import RandomOpponent, check_learners
    try:
        chosen = check_learners(learners, players)
    except ValueError as e:
        raise ConfigError(str(e)) from None
    if value == RANDOM:
        return RandomOpponent()
    if not isinstance(value, str) or not value:
        raise ConfigError(f"env.opponent={value!r}: '{RANDOM}' or the path of a policy file "
                          f"(rlfast export RUN_DIR --format torchscript)")
    return _policy_file_opponent(value, env_id, players,
                                 [p for p in players if p not in chosen])
