"""The ``pz:<module>`` env family: PettingZoo parallel environments, one column per agent.

``rlfast train mappo pz:mpe2.simple_spread_v3 --set env.kwargs.N=3``: the name after ``pz:``
is the module path of a PettingZoo environment; ``env.kwargs`` are its constructor's keyword
arguments (filled from its signature, so ``--set`` checks them); ``env.agent_id``,
``env.global_state`` and ``env.pad`` are :class:`rlfast.envs.pettingzoo.PettingZooEnv`'s
options. The algorithms with a ``multiagent`` preset (ppo, a2c, mappo) act through
:class:`rlfast.agents.MultiAgentPgAgent`: ``agent.shared=False`` gives one policy per agent,
``algo.central_critic=True`` a value function on the global state (this family turns it
into ``agent.central_critic`` and ``env.global_state``). ``--set agent.recurrent=True --set
agent.core=gru`` gives each agent column a memory state
(:class:`rlfast.agents.pg.multiagent.RecurrentMultiAgentPgAgent`, shared parameters), reset
when that agent's episode ends.

PettingZoo's Atari games (``pz:pettingzoo.atari.pong_v3``) observe images: every player gets
the Atari frame processing of :mod:`rlfast.envs.pettingzoo_atari` (``env.frame_skip``,
``env.num_img_obs``, ``env.clip_reward``, ``env.max_start_noops``, ``env.horizon``,
``env.obs_type``), their algorithms take the ``atari`` presets and the convolutional
feed-forward agent (:class:`rlfast.agents.AtariFfAgent`, one set of parameters for every
player, no agent id). The Atari presets' ``episodic_lives`` and
``repeat_action_probability=0`` are dropped: multi-agent ALE has no per-player lives and no
sticky actions.

``--set env.opponent=random`` (or the TorchScript file ``rlfast export`` writes from a
trained run: a frozen snapshot of its learner) gives the players outside ``env.learners``
(default: the game's first player) a fixed opponent, and only the learners are batch columns:
their return is then their score against that opponent (:mod:`rlfast.experiments.opponents`).
"""
from __future__ import annotations

import copy
import functools
import inspect
from typing import Any

from rlfast.experiments.config import ConfigError
from rlfast.experiments.registry import EnvFamily, EnvTraits, SamplerSpec

__all__ = ["PETTINGZOO", "pettingzoo_agent_class", "configure_pettingzoo"]

_OPTIONS = ("agent_id", "global_state", "pad", "opponent", "learners")
_ATARI_OPTIONS = ("frame_skip", "num_img_obs", "clip_reward", "max_start_noops", "horizon",
                  "obs_type")
_ATARI_PREFIX = "pettingzoo.atari."


def _is_atari(name: str) -> bool:
    return name.startswith(_ATARI_PREFIX)


def _check(name: str) -> Any:
    from rlfast.envs.pettingzoo import PettingZooError, check_pettingzoo_id
    try:
        return check_pettingzoo_id(name)
    except PettingZooError as e:
        raise ConfigError(str(e)) from None


def _constructor_kwargs(module: Any) -> dict:
    """The keyword arguments (with defaults) of the module's env constructor: ``raw_env``
    or ``env``, whose signatures PettingZoo's ``parallel_env`` wrappers hide."""
    for attr in ("raw_env", "env", "parallel_env"):
        fn = getattr(module, attr, None)
        if fn is None:
            continue
        try:
            params = inspect.signature(fn).parameters.values()
        except (TypeError, ValueError):
            continue
        kwargs = {p.name: p.default for p in params
                  if p.default is not inspect.Parameter.empty
                  and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
                  and p.name != "render_mode"}
        if kwargs:
            return kwargs
    return {}


def env_defaults(name: str) -> dict:
    """The ``env`` section of a ``pz:<name>`` preset."""
    module = _check(name)
    kwargs = _constructor_kwargs(module)
    if _is_atari(name):
        return dict(kwargs=kwargs, agent_id=False, global_state=False, pad=False, frame_skip=4,
                    num_img_obs=4, clip_reward=True, max_start_noops=30, horizon=27_000,
                    obs_type="rlpyt", opponent=None, learners=None)
    return dict(kwargs=kwargs, agent_id=True, global_state=False, pad=False, opponent=None,
                learners=None)


def _factory(name: str, env_cfg: dict) -> tuple[Any, dict, Any]:
    from rlfast.envs.multiagent import MultiAgentTrajInfo
    from rlfast.envs.pettingzoo import PettingZooEnv, PettingZooError, make_parallel_env
    cfg = dict(env_cfg)
    kwargs = dict(cfg.pop("kwargs", {}) or {})
    if "render_mode" in cfg:  # rlfast watch's render_kwargs go to the PettingZoo constructor
        kwargs["render_mode"] = cfg.pop("render_mode")
    options = _OPTIONS + (_ATARI_OPTIONS if _is_atari(name) else ())
    unknown = sorted(set(cfg) - set(options))
    if unknown:
        raise ConfigError(f"pz:{name}: unknown env option(s) {unknown}; the env section holds "
                          f"kwargs (the environment's arguments) and {', '.join(options)}")
    EnvCls: Any = PettingZooEnv
    try:
        if _is_atari(name):
            from rlfast.envs.pettingzoo_atari import pettingzoo_atari_env, player_names
            EnvCls = pettingzoo_atari_env
            agents = player_names(name, kwargs)
            made = None
        else:
            made = make_parallel_env(name, kwargs)
    except PettingZooError as e:
        raise ConfigError(str(e)) from None
    if made is not None:
        try:
            agents = list(made.possible_agents)
        finally:
            made.close()
    cfg["opponent"], agents = _opponent(name, agents, cfg.get("opponent"), cfg.get("learners"))
    TrajInfoCls = functools.partial(MultiAgentTrajInfo, _agents=agents)
    return EnvCls, dict(env=name, env_kwargs=kwargs, **cfg), TrajInfoCls


def _opponent(name: str, players: list[str], value: Any, learners: Any) -> tuple[Any, list]:
    """``env.opponent`` as the env's opponent object (None: every player learns) and the
    players that are batch columns (:mod:`rlfast.experiments.opponents`)."""
    from rlfast.envs.opponents import check_learners
    from rlfast.experiments.opponents import make_opponent
    opponent = make_opponent(value, name, players, learners)
    if opponent is None:
        return None, players
    return opponent, check_learners(learners, players)


def _traits(name: str) -> EnvTraits:
    _check(name)
    return EnvTraits("atari" if _is_atari(name) else "multiagent", None, None, None)


def _preset_family(traits: EnvTraits) -> str:
    """``atari`` for PettingZoo's Atari games (image observations), else ``multiagent``."""
    return "atari" if traits.kind == "atari" else "multiagent"


def configure_pettingzoo(config: dict) -> dict:
    """The configuration a ``pz:`` run is built from: ``algo.central_critic`` becomes
    ``agent.central_critic`` and ``env.global_state`` (the critic's input comes from the
    env), and separate per-agent parameters turn on the agent id they need. For an Atari
    game the Atari presets' ``episodic_lives`` and ``repeat_action_probability`` (0) are
    dropped."""
    config = copy.deepcopy(config)
    algo, agent = config.setdefault("algo", {}), config.setdefault("agent", {})
    env = config.setdefault("env", {})
    if "frame_skip" in env:  # an Atari game: what multi-agent ALE does not have
        env.pop("episodic_lives", None)
        sticky = env.pop("repeat_action_probability", 0.0)
        if sticky:
            raise ConfigError(f"env.repeat_action_probability={sticky}: PettingZoo's "
                              f"multi-agent Atari games have no sticky actions (use 0)")
    if algo.pop("central_critic", False):
        agent["central_critic"] = True
        env["global_state"] = True
    if agent.get("shared", True) is False and not env.get("agent_id", True):
        raise ConfigError("agent.shared=False (one policy per agent) needs env.agent_id=True: "
                          "the agent id in each observation picks the agent's parameters")
    return config


def pettingzoo_agent_class(kind: str, recurrent: bool, sampler: SamplerSpec) -> type:
    """:class:`rlfast.agents.MultiAgentPgAgent`, or for image observations (PettingZoo's
    Atari games, ``kind="atari"``) the convolutional :class:`rlfast.agents.AtariFfAgent`.
    ``agent.recurrent=True`` gives the recurrent multi-agent agent (one memory state per
    agent column; its alternating variant under the alternating sampler); recurrent agents
    on Atari games are refused."""
    if recurrent:
        if kind == "atari":
            raise ConfigError("pz: Atari games train feed-forward agents; agent.recurrent=True "
                              "is supported for vector-observation pz: environments only")
        from rlfast.agents.pg.multiagent import (AlternatingRecurrentMultiAgentPgAgent,
                                                 RecurrentMultiAgentPgAgent)
        return (AlternatingRecurrentMultiAgentPgAgent if sampler.alternating
                else RecurrentMultiAgentPgAgent)
    if kind == "atari":
        from rlfast.agents import AtariFfAgent
        return AtariFfAgent
    from rlfast.agents import MultiAgentPgAgent
    return MultiAgentPgAgent


def _make_agent(kind: str, recurrent: bool, sampler: SamplerSpec, **agent_cfg: Any) -> Any:
    """The agent of a ``pz:`` run from its configuration: the DQN family's presets (their
    agent section has ``eps_init``) get independent Q agents
    (:class:`rlfast.agents.dqn.multiagent.MultiAgentDqnAgent`, categorical with
    ``n_atoms``; on Atari games the Atari DQN agents, one network for every player), every
    other algorithm :func:`pettingzoo_agent_class`'s."""
    if "eps_init" not in agent_cfg:
        return pettingzoo_agent_class(kind, recurrent, sampler)(**agent_cfg)
    if recurrent:
        raise ConfigError("pz: environments train feed-forward value-based agents; "
                          "agent.recurrent=True is for ppo / a2c / mappo")
    from rlfast.agents import AtariCatDqnAgent, AtariDqnAgent
    from rlfast.agents.dqn.multiagent import MultiAgentDqnAgent
    if kind == "atari":
        return (AtariCatDqnAgent if "n_atoms" in agent_cfg else AtariDqnAgent)(**agent_cfg)
    return MultiAgentDqnAgent(**agent_cfg)


def _agent_class(kind: str, recurrent: bool, sampler: SamplerSpec) -> Any:
    """The family's agent chooser: :func:`_make_agent` bound to the run's settings."""
    return functools.partial(_make_agent, kind, recurrent, sampler)


PETTINGZOO = EnvFamily(
    prefix="pz", factory=_factory, traits=_traits, check_id=_check,
    TrajInfoCls="rlfast.envs.multiagent:MultiAgentTrajInfo", preset_family=_preset_family,
    render_kwargs=dict(render_mode="rgb_array"), env_defaults=env_defaults,
    configure=configure_pettingzoo, agent_cls=_agent_class,
    description="a PettingZoo parallel env by module path, one column per agent "
                "(pz:mpe2.simple_spread_v3)")
