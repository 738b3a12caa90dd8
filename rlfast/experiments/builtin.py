"""rlfast's own registry entries: its algorithms, samplers, env families and evolution
strategies, each registered once here exactly as a user's package registers its own (see
:mod:`rlfast.experiments.catalog`). Importing this module makes the registries."""
from __future__ import annotations

import difflib
import importlib
from typing import Any

from rlfast import agents
from rlfast import samplers as smp
from rlfast.agents.pg.base import PgAgent
from rlfast.algos import A2C, PPO
from rlfast.algos.dqn import DQN, R2D1, CategoricalDQN
from rlfast.algos.qpg import DDPG, SAC, TD3
from rlfast.es import CEM, CMAES, OpenAIES
from rlfast.experiments.class_defaults import class_defaults
from rlfast.experiments.config import ConfigError
from rlfast.experiments.es_presets import ES_PRESETS
from rlfast.experiments.minatar_family import MINATAR as _MINATAR
from rlfast.experiments.pettingzoo_family import PETTINGZOO as _PETTINGZOO
from rlfast.experiments.popgym_family import POPGYM as _POPGYM
from rlfast.experiments.preset_data import ASYNC_DEFAULTS, PRESETS
from rlfast.experiments.registry import (AlgorithmSpec, EnvFamily, EnvTraits, EsStrategySpec,
                                         Registry, SamplerSpec, action_kind)
from rlfast.experiments.search_spaces import SEARCH_SPACES
from rlfast.models.dqn import R2d1MlpModel
from rlfast.models.pg.recurrent_body import RecurrentPgModel
from rlfast.runners import MinibatchRlEval

__all__ = ["ALGORITHMS", "SAMPLERS", "ENV_FAMILIES", "ES_STRATEGIES", "action_kind",
           "GYMNASIUM", "ATARI", "PETTINGZOO", "POPGYM", "MINATAR"]

ALGORITHMS: Registry[AlgorithmSpec] = Registry("algorithm")
SAMPLERS: Registry[SamplerSpec] = Registry("sampler")
ENV_FAMILIES: Registry[EnvFamily] = Registry("env family")
ES_STRATEGIES: Registry[EsStrategySpec] = Registry("evolution strategy")


# ---- env families --------------------------------------------------------------------------
def _gym_factory(name: str, env_cfg: dict) -> tuple[Any, dict]:
    from rlfast.envs import make as make_gym_env
    return make_gym_env, dict(id=name, **env_cfg)


def _gym_traits(name: str) -> EnvTraits:
    from rlfast.envs.gym import gym_horizon
    from rlfast.envs.gym import gym_spaces as make_gym_spaces
    spaces = make_gym_spaces(name)
    return EnvTraits(action_kind(spaces.action), spaces.action, spaces.observation,
                     gym_horizon(name))


def _check_gym_id(env_id: str) -> None:
    """Refuse (``ConfigError``) a gymnasium id that is not registered, naming close matches;
    ``module:Env-v0`` ids import their module first, as ``gymnasium.make`` does."""
    import gymnasium
    from gymnasium.envs.registration import find_highest_version, parse_env_id

    module, _, name = env_id.rpartition(":")
    reason = ""
    if module:
        try:
            importlib.import_module(module)  # registers its environments
        except ImportError as e:
            reason = f" (importing {module!r} failed: {e})"
    if not reason:
        if name in gymnasium.registry:
            return
        try:
            namespace, base, version = parse_env_id(name)
        except gymnasium.error.Error:
            pass  # not even shaped like an id
        else:
            if version is None and find_highest_version(namespace, base) is not None:
                return  # gymnasium.make takes the latest version
    by_lower = {registered.lower(): registered for registered in gymnasium.registry}
    close = [by_lower[m] for m in difflib.get_close_matches(name.lower(), by_lower, n=3,
                                                            cutoff=0.6)]
    if close:
        hint = f"did you mean {' or '.join(close)}?"
    else:
        others = [f"{p}:<name>" for p in ENV_FAMILIES if p not in ("gymnasium", "atari")]
        hint = ("gymnasium.pprint_registry() lists the registered ids; use atari:<game> for "
                "Atari" + (f"; other env families: {', '.join(others)}" if others else ""))
    raise ConfigError(f"unknown gymnasium environment {env_id!r}{reason}; {hint}")


def _atari_factory(game: str, env_cfg: dict) -> tuple[Any, dict]:
    from rlfast.envs import AtariEnv
    from rlfast.envs.atari import resolve_game
    resolve_game(game)  # an unknown game: ValueError now, not in a worker later
    return AtariEnv, dict(game=game, **env_cfg)


def _atari_traits(game: str) -> EnvTraits:
    return EnvTraits("atari", None, None)


GYMNASIUM = ENV_FAMILIES.add("gymnasium", EnvFamily(
    prefix=None, factory=_gym_factory, traits=_gym_traits, check_id=_check_gym_id,
    TrajInfoCls=smp.TrajInfo, render_kwargs=dict(render_mode="rgb_array"),
    description="a gymnasium id (CartPole-v1, module:Env-v0)"))
PETTINGZOO = ENV_FAMILIES.add("pz", _PETTINGZOO)
POPGYM = ENV_FAMILIES.add("popgym", _POPGYM)
MINATAR = ENV_FAMILIES.add("minatar", _MINATAR)
ATARI = ENV_FAMILIES.add("atari", EnvFamily(
    prefix="atari", factory=_atari_factory, traits=_atari_traits, check_id=None,
    TrajInfoCls="rlfast.envs.atari:AtariTrajInfo", preset_family="atari", pixels=True,
    description="rlfast's own AtariEnv (atari:pong)"))


# ---- samplers --------------------------------------------------------------------------------
SAMPLERS.add("serial", SamplerSpec(
    "serial", smp.SerialSampler, smp.AsyncSerialSampler, smp.SerialEvalCollector,
    smp.CpuResetCollector, smp.CpuWaitResetCollector, worker_processes=False))
SAMPLERS.add("cpu", SamplerSpec(
    "cpu", smp.CpuSampler, smp.AsyncCpuSampler, smp.CpuEvalCollector,
    smp.CpuResetCollector, smp.CpuWaitResetCollector))
SAMPLERS.add("gpu", SamplerSpec(
    "gpu", smp.GpuSampler, smp.AsyncGpuSampler, smp.GpuEvalCollector,
    smp.GpuResetCollector, smp.GpuWaitResetCollector, action_server=True))
SAMPLERS.add("alternating", SamplerSpec(
    "alternating", smp.AlternatingSampler, smp.AsyncAlternatingSampler, smp.GpuEvalCollector,
    smp.GpuResetCollector, smp.GpuWaitResetCollector, min_workers=2, alternating=True,
    action_server=True))


# ---- algorithms ------------------------------------------------------------------------------
def pg_agent_class(kind: str, recurrent: bool, sampler: SamplerSpec) -> type:
    """The policy-gradient agent class for the action kind; recurrent agents under the
    alternating sampler get the variant that keeps one recurrent state per worker group."""
    alternating = sampler.alternating
    if kind == "atari":
        if recurrent:
            return agents.AlternatingAtariLstmAgent if alternating else agents.AtariLstmAgent
        return agents.AtariFfAgent
    if kind == "discrete":
        if recurrent:
            return (agents.AlternatingRecurrentCategoricalPgAgent if alternating
                    else agents.RecurrentCategoricalPgAgent)
        return agents.CategoricalPgAgent
    if kind == "multi_discrete":
        if recurrent:
            return (agents.AlternatingRecurrentMultiCategoricalPgAgent if alternating
                    else agents.RecurrentMultiCategoricalPgAgent)
        return agents.MultiCategoricalPgAgent
    if recurrent:
        if alternating:
            raise ValueError("no alternating recurrent Gaussian preset agent; use --sampler gpu")
        return agents.MujocoLstmAgent
    return agents.MujocoFfAgent


def _dqn_agent_class(categorical: bool):
    def choose(kind: str, recurrent: bool, sampler: SamplerSpec) -> type:
        if kind == "atari":
            return agents.AtariCatDqnAgent if categorical else agents.AtariDqnAgent
        return agents.CatDqnAgent if categorical else agents.DqnAgent
    return choose


def r2d1_agent_class(kind: str, recurrent: bool, sampler: SamplerSpec) -> type:
    """R2D1's agent; under the alternating sampler the variant that keeps one recurrent state
    per worker group."""
    if sampler.alternating:
        return (agents.AlternatingAtariR2d1Agent if kind == "atari"
                else agents.AlternatingR2d1Agent)
    return agents.AtariR2d1Agent if kind == "atari" else agents.R2d1Agent


def _fixed_agent(cls: type):
    def choose(kind: str, recurrent: bool, sampler: SamplerSpec) -> type:
        return cls
    return choose


# ---- the keys every configuration of an algorithm has ------------------------------------------
# Settings no preset chooses, added to every configuration of the algorithm (so that --set
# reaches them and the run records them) at the default of the class that takes them:
# runner.overlap: sampling may overlap learning; agent.autocast: the agent may run its model in
# bf16; algo.normalize_reward: VecNormalize-style reward scaling; algo.compile: torch.compile
# of the loss (on CUDA PPO's whole step, and the replay algorithms' whole update, in one CUDA
# graph, LeanRL); algo.target_kl (PPO): stop an iteration's epochs once their KL passes it
# (None: off); algo.replay_device: where replay lives (host, device, or host + prefetcher,
# rlfast.algos.replay_choice); algo.value_norm, algo.value_loss, algo.huber_delta (A2C, PPO):
# the MAPPO code's value normalization and Huber value loss; the async section is read by
# --runner async only.
_ON_POLICY_KEYS = ("normalize_reward", "compile", "value_norm", "value_loss", "huber_delta")
_PPO_KEYS = _ON_POLICY_KEYS + ("target_kl",)
_REPLAY_KEYS = ("replay_device", "compile")


def memory_defaults(model_cls: type) -> dict:
    """``agent.core``, ``agent.core_size`` and ``agent.memory_len``: a recurrent agent's memory
    core (rlfast.models.memory), its width (None: the model's lstm_size) and the attention
    window, read with agent.recurrent=True (--set agent.core=gru, or model.core=gru); the core
    and the window at the defaults of ``model_cls``, the agents' recurrent model."""
    model = class_defaults(model_cls, "core", "memory_len")
    return dict(core=model["core"], core_size=None, memory_len=model["memory_len"])


def on_policy_defaults(algo_cls: type, algo_keys: tuple[str, ...], recurrent: bool) -> dict:
    """The keys of an on-policy algorithm's configurations beyond its presets': the runner's
    ``overlap``, the agent's ``autocast`` (and the memory-core keys where its agents may be
    recurrent), and ``algo_keys`` of ``algo_cls``."""
    agent = class_defaults(PgAgent, "autocast")
    if recurrent:
        agent.update(memory_defaults(RecurrentPgModel))
    return dict(runner=class_defaults(MinibatchRlEval, "overlap"), agent=agent,
                algo=class_defaults(algo_cls, *algo_keys))


def replay_defaults(algo_cls: type, memory_model: type | None = None) -> dict:
    """The keys of a replay algorithm's configurations beyond its presets': the async
    runner's settings, ``algo_cls``'s replay device and compilation, and the memory-core
    keys of ``memory_model``'s agents (R2D1's)."""
    defaults = {"async": dict(ASYNC_DEFAULTS), "algo": class_defaults(algo_cls, *_REPLAY_KEYS)}
    if memory_model is not None:
        defaults["agent"] = memory_defaults(memory_model)
    return defaults


# ---- the algorithms' entries -----------------------------------------------------------------
# The multi-agent agents (mappo) may be recurrent too (agent.recurrent=True, agent.core=gru).
for _name, _cls, _keys, _recurrent in (("ppo", PPO, _PPO_KEYS, True),
                                       ("a2c", A2C, _ON_POLICY_KEYS, True),
                                       ("mappo", PPO, _PPO_KEYS, True)):
    ALGORITHMS.add(_name, AlgorithmSpec(
        _name, _cls, PRESETS[_name], pg_agent_class,
        defaults=on_policy_defaults(_cls, _keys, _recurrent),
        search_space=SEARCH_SPACES.get(_name), multi_discrete=True))
for _name, _cls, _agent, _memory in (("dqn", DQN, _dqn_agent_class(False), None),
                                     ("cat_dqn", CategoricalDQN, _dqn_agent_class(True), None),
                                     ("rainbow", CategoricalDQN, _dqn_agent_class(True), None),
                                     ("r2d1", R2D1, r2d1_agent_class, R2d1MlpModel)):
    ALGORITHMS.add(_name, AlgorithmSpec(
        _name, _cls, PRESETS[_name], _agent, replay=True,
        defaults=replay_defaults(_cls, _memory), search_space=SEARCH_SPACES.get(_name)))
for _name, _cls, _agent_cls in (("ddpg", DDPG, agents.DdpgAgent), ("td3", TD3, agents.Td3Agent),
                                ("sac", SAC, agents.SacAgent)):
    # one environment and many updates per step leave nothing for parallel workers to hide
    ALGORITHMS.add(_name, AlgorithmSpec(
        _name, _cls, PRESETS[_name], _fixed_agent(_agent_cls), replay=True,
        default_sampler="serial", defaults=replay_defaults(_cls),
        search_space=SEARCH_SPACES.get(_name)))

# ---- evolution strategies ----------------------------------------------------------------------
for _name, _cls in (("cem", CEM), ("cmaes", CMAES), ("openai_es", OpenAIES)):
    ES_STRATEGIES.add(_name, EsStrategySpec(_name, _cls, ES_PRESETS[_name]))
