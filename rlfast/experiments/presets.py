"""Presets for ``rlfast train ALGO ENV``, matched to the environment, and the builder that
assembles a run from one.

A preset is a nested dict with sections ``agent``, ``algo``, ``sampler`` and ``runner``;
every leaf can be overridden from the command line by its dotted key. The presets are data
(:mod:`rlfast.experiments.preset_data`) held by the algorithms' registry entries
(:mod:`rlfast.experiments.catalog`). The agent and model are chosen from the environment's
gymnasium spaces, matched exactly: categorical on Discrete actions, one categorical per
dimension on (1-D) MultiDiscrete and MultiBinary actions (PPO and A2C only), Gaussian on 1-D
float Box actions, and the convolutional Atari agent for ``atari:<game>`` (rlfast's own
AtariEnv). An algorithm that cannot act in the space is a ``ValueError`` naming the space and
the algorithms that can. Dict and Tuple observations are flattened into one vector for the MLP
agents (``env.flatten_observation``).

This module says what a run is built from and builds it (:func:`get_preset`,
:func:`build_experiment`); where it computes (the default sampler, the affinity) is
:mod:`rlfast.experiments.placement`'s, and what its step budget buys is
:mod:`rlfast.experiments.budget`'s.
"""
from __future__ import annotations

import torch
from gymnasium import spaces as gym_spaces

from rlfast.algos import RLAlgorithm
from rlfast.experiments import catalog
from rlfast.experiments.builtin import action_kind
from rlfast.experiments.config import ConfigError
from rlfast.experiments.env_overrides import ENV_TUNED
from rlfast.experiments.es_presets import ES_ENV_TUNED
from rlfast.experiments.placement import run_affinity
from rlfast.experiments.preset_data import (ASYNC_DEFAULTS, DISTRIBUTED_DEFAULTS, PRESETS,
                                           RUNNER_DEFAULTS, SAMPLER_SAFETY)
from rlfast.experiments.registry import EnvTraits
from rlfast.models.memory import check_core
from rlfast.runners import AsyncRl, AsyncRlEval, MinibatchRl, MinibatchRlEval, SyncRl, SyncRlEval
from rlfast.utils.checks import check_choice, check_int
from rlfast.utils.misc import deep_merge

__all__ = ["PRESETS", "ASYNC_DEFAULTS", "DISTRIBUTED_DEFAULTS", "SAMPLER_SAFETY",
           "RUNNER_DEFAULTS", "RUNNERS",
           "EnvTraits", "action_kind", "inspect_env", "env_kind", "algos_for",
           "check_algo_fits", "needs_flat_observation", "fit_evaluation_to_horizon",
           "get_preset", "check_es_task", "get_es_preset", "check_runner", "run_params",
           "memory_core_kwargs", "build_experiment", "runner_settings"]

RUNNERS = ("sync", "async")


# Action kinds (``EnvTraits.kind``), the preset family each uses, the algorithms that can act
# in them and how messages name them. MultiDiscrete actions use the "discrete" hyperparameters
# with the per-dimension categorical agent, which only the policy-gradient algorithms have.
ACTION_KIND_FAMILY = {"atari": "atari", "discrete": "discrete", "multi_discrete": "discrete",
                      "continuous": "continuous"}
_KIND_LABEL = {"atari": "Atari (discrete)", "discrete": "Discrete",
               "multi_discrete": "MultiDiscrete / MultiBinary", "continuous": "continuous Box"}


def inspect_env(env_id: str) -> EnvTraits:
    """The ``EnvTraits`` of ``env_id`` from its registered env family: ``atari:<game>`` is an
    Atari game (nothing is made); a gymnasium id is made once, its spaces read and the env
    closed again."""
    return catalog.env_traits(env_id)


def env_kind(env_id: str) -> str | None:
    """The action kind of ``env_id`` (see ``inspect_env`` and ``action_kind``)."""
    return inspect_env(env_id).kind


def algos_for(kind: str, family: str | None = None) -> list[str]:
    """The registered algorithms that can act in action spaces of ``kind`` (with presets for
    the preset ``family``, by default the kind's), sorted."""
    family = family or ACTION_KIND_FAMILY[kind]
    able = []
    for name in catalog.algorithm_names():
        spec = catalog.algorithm(name)
        if family in spec.presets and (kind != "multi_discrete" or spec.multi_discrete):
            able.append(name)
    return sorted(able)


def preset_family(traits: EnvTraits, env_id: str) -> str | None:
    """The preset family an environment's algorithms use: its env family's own, else the
    one of its action kind (None for an action space no preset supports)."""
    family, _ = catalog.env_family(env_id)
    own = family.preset_family
    if callable(own):  # chosen per environment, None: the action kind's
        own = own(traits)
    if own is not None:
        return own
    return ACTION_KIND_FAMILY.get(traits.kind)


def check_algo_fits(algo: str, traits: EnvTraits, env_id: str) -> str:
    """The preset family of ``algo`` for this environment, or a ``ValueError`` that names the
    action space and the algorithms that can act in it."""
    catalog.algorithm(algo)  # ValueError: unknown algorithm, with the choices
    space = "" if traits.action_space is None else " " + " ".join(str(traits.action_space).split())
    family = preset_family(traits, env_id)
    if traits.kind is None or family is None:
        supported = "; ".join(f"{label} ({', '.join(algos_for(kind))})"
                              for kind, label in _KIND_LABEL.items() if kind != "atari")
        raise ValueError(f"no rlfast algorithm can act in the action space{space} of {env_id}; "
                         f"the presets support these action spaces: {supported} (MultiDiscrete, "
                         f"MultiBinary and Box ones 1-D)")
    able = algos_for(traits.kind, family)
    if algo not in able and family != ACTION_KIND_FAMILY.get(traits.kind):
        raise ValueError(f"{algo!r} has no preset for the {family} environments ({env_id}); "
                         f"algorithms that have one: {', '.join(able) or 'none registered'}")
    if algo not in able:
        own = ", ".join(label for kind, label in _KIND_LABEL.items() if algo in algos_for(kind))
        label = _KIND_LABEL.get(traits.kind, traits.kind)
        raise ValueError(f"{algo!r} cannot act in the {label} action "
                         f"space{space} of {env_id} (it acts in {own or 'no preset'} action "
                         f"spaces); algorithms that can: {', '.join(able) or 'none registered'}")
    return family


def needs_flat_observation(traits: EnvTraits) -> bool:
    """Whether the MLP agents need ``env.flatten_observation``: a Dict or Tuple observation
    space, which they read flattened into one vector, or a Discrete / MultiDiscrete /
    MultiBinary one, which they read one-hot (a bare integer would reach the model as one
    ordinal feature)."""
    return isinstance(traits.observation_space, (gym_spaces.Dict, gym_spaces.Tuple,
                                                 gym_spaces.Discrete, gym_spaces.MultiDiscrete,
                                                 gym_spaces.MultiBinary))


def fit_evaluation_to_horizon(sampler: dict, horizon: int | None) -> None:
    """Raise ``sampler["eval_max_steps"]`` (in place) so that every evaluation environment can
    play one whole episode of ``horizon`` steps. The presets' budgets assume CartPole's 500
    (on-policy and DQN) or MuJoCo's 1000 (SAC, TD3, DDPG); with LunarLander's 1000 or
    BipedalWalker's 1600 an evaluation would end before any episode did and log no return.
    Never lowers a budget; ``--set sampler.eval_max_steps`` still applies afterwards."""
    n_envs, budget = sampler.get("eval_n_envs"), sampler.get("eval_max_steps")
    if horizon and n_envs and budget is not None and budget < n_envs * horizon:
        sampler["eval_max_steps"] = n_envs * horizon


def _set_defaults(config: dict, defaults: dict) -> None:
    """Add ``defaults``' keys that ``config`` lacks (recursively, in place)."""
    for key, value in defaults.items():
        if isinstance(value, dict):
            _set_defaults(config.setdefault(key, {}), value)
        else:
            config.setdefault(key, value)


def get_preset(algo: str, env_id: str) -> dict:
    """The preset for ``algo`` matched to ``env_id``: a fresh nested dict that the caller
    may change freely.

    The family preset (from the env family or the action space, ``check_algo_fits``) comes
    first, then any per-environment tuning from ``ENV_TUNED``; Dict and Tuple observations
    add ``env.flatten_observation=True``; then the keys every configuration of the algorithm
    has (its registry entry's ``defaults``). An unknown algorithm, or one that cannot act in
    this action space, is a ``ValueError`` naming the valid choices.
    """
    spec = catalog.algorithm(algo)
    traits = inspect_env(env_id)
    family = check_algo_fits(algo, traits, env_id)
    config = deep_merge(spec.presets[family], ENV_TUNED.get((algo, env_id), {}))
    env_family, name = catalog.env_family(env_id)
    if env_family.env_defaults is not None:  # e.g. a PettingZoo env's constructor arguments
        config["env"] = deep_merge(env_family.env_defaults(name), config.get("env", {}))
    if needs_flat_observation(traits):
        config["env"] = dict(config.get("env", {}), flatten_observation=True)
    fit_evaluation_to_horizon(config["sampler"], traits.horizon)
    for key, value in SAMPLER_SAFETY.items():  # every preset can set them with --set
        config["sampler"].setdefault(key, value)
    for key, value in RUNNER_DEFAULTS.items():
        config["runner"].setdefault(key, value)
    _set_defaults(config, deep_merge({}, dict(spec.defaults)))
    config.setdefault("distributed", dict(DISTRIBUTED_DEFAULTS))  # read by multi-rank runs
    return config


def check_es_task(algo: str, env_id: str) -> None:
    """Refuse an unknown strategy, or an image game, with the reason (``ValueError``)."""
    catalog.es_strategy(algo)
    family, _ = catalog.env_family(env_id)
    if family.pixels:
        raise ValueError(f"evolution strategies search vector-observation policies; "
                         f"{env_id} is an image game (train it with ppo, dqn or r2d1)")


def get_es_preset(algo: str, env_id: str) -> dict:
    """The ES preset for ``algo`` on ``env_id``: a fresh nested dict. The family comes from
    the environment's action space (Discrete or a 1-D Box); anything else is a
    ``ValueError`` naming the space."""
    check_es_task(algo, env_id)
    traits = inspect_env(env_id)
    family = {"discrete": "discrete", "continuous": "continuous"}.get(traits.kind)
    if family is None:
        raise ValueError(f"{algo} needs a Discrete or a 1-D Box action space; {env_id} has "
                         f"{traits.action_space!r}")
    presets = catalog.es_strategy(algo).presets
    return deep_merge(presets[family], ES_ENV_TUNED.get((algo, env_id), {}))


def check_runner(algo_name: str, runner: str) -> None:
    """Refuse an asynchronous run of an algorithm without replay, saying why."""
    check_choice(runner, "runner", RUNNERS)
    if runner == "async" and not catalog.algorithm(algo_name).replay:
        replay = [n for n in catalog.algorithm_names() if catalog.algorithm(n).replay]
        raise ValueError(f"--runner async needs a replay-based algorithm ({', '.join(replay)}); "
                         f"{algo_name!r} learns on-policy from each batch once, so there is no "
                         f"replay buffer for an asynchronous sampler to fill")


def _algo(algo_name: str, algo_cfg: dict) -> RLAlgorithm:
    """The algorithm object; ``OptimCls`` is given by name (``"RMSprop"``) in presets."""
    algo_cfg = dict(algo_cfg)
    optim = algo_cfg.pop("OptimCls", None)
    if optim is not None:
        algo_cfg["OptimCls"] = getattr(torch.optim, optim)
    return catalog.algorithm(algo_name).algo_cls(**algo_cfg)


def run_params(algo: str, env: str, config: dict, sampler: str, seed: int,
               affinity: str | None = None, runner: str = "sync", world_size: int = 1,
               backend: str | None = None, launcher: str | None = None,
               device: str | None = None) -> dict:
    """What a run records in ``params.json`` so that ``rlfast resume``, ``rlfast eval`` and
    ``rlfast watch`` can rebuild it: the preset name, environment id, the fully resolved
    ``config``, sampler, seed, affinity code (a string or None), runner kind, the
    distributed settings, and ``device``, where the learner ran (``"cpu"``, ``"cuda:0"``;
    a record: ``rlfast resume`` resolves the device again). ``rlfast train`` logs exactly
    this; a launch script that builds its run with :func:`build_experiment` logs it too
    (``logger_context(..., log_params=run_params(...))``) to make its runs resumable."""
    if affinity is not None and not isinstance(affinity, str):
        raise TypeError(f"run_params: affinity is the affinity code string (or None); got "
                        f"{type(affinity).__name__}")
    return dict(algo=algo, env=env, sampler=sampler, seed=seed, affinity=affinity,
                runner=runner, config=config, world_size=world_size, backend=backend,
                launcher=launcher, device=device)


def memory_core_kwargs(agent_cfg: dict) -> dict:
    """The agent section with ``core``, ``core_size`` and ``memory_len`` moved into
    ``model_kwargs`` (``core``, ``lstm_size``, ``memory_len``) for a recurrent agent, checked:
    a core other than the LSTM needs ``agent.recurrent=True``."""
    core = agent_cfg.pop("core", None)
    memory_len = agent_cfg.pop("memory_len", None)
    core_size = agent_cfg.pop("core_size", None)
    if core is None:
        return agent_cfg
    check_core(core, "agent.core")
    if not agent_cfg.get("recurrent", False):
        if core != "lstm":
            raise ConfigError(f"agent.core={core} is a recurrent agent's memory core; add "
                              f"--set agent.recurrent=True")
        return agent_cfg
    model_kwargs = dict(agent_cfg.get("model_kwargs") or {})
    model_kwargs.setdefault("core", core)
    if memory_len is not None:
        model_kwargs.setdefault("memory_len", check_int(memory_len, "agent.memory_len", minimum=1))
    if core_size is not None:
        model_kwargs["lstm_size"] = check_int(core_size, "agent.core_size", minimum=1)
    agent_cfg["model_kwargs"] = model_kwargs
    return agent_cfg


def build_experiment(algo_name: str, env_id: str, config: dict, sampler: str = "cpu",
                     seed: int | None = None, affinity: dict | list | None = None,
                     runner: str = "sync", world_size: int | None = None,
                     backend: str | None = None, distributed: bool = False,
                     device: str | None = "auto"
                     ) -> (MinibatchRl | MinibatchRlEval | SyncRl | SyncRlEval | AsyncRl
                           | AsyncRlEval):
    """Assemble sampler, agent, algorithm and runner from a (possibly overridden) preset.

    Everything is constructed but nothing is started: no process, environment step or
    gradient step happens until ``runner.train()``. Errors in the configuration (unknown
    sampler, unknown Atari game, an algorithm that cannot act in the action space, a
    combination without an agent) surface here. Dict and Tuple observations are flattened for
    the MLP agents unless the config says ``env.flatten_observation=False``. Without
    ``affinity`` the run uses every available core (``default_affinity``) and puts its
    learner on ``device`` (``auto``, the default: GPU 0 when CUDA is available; ``cpu``;
    ``cuda``; ``cuda:N``); with one, the affinity decides and an explicit ``device`` that
    contradicts it is a ``ValueError`` (see :func:`run_affinity`).

    ``distributed`` (or ``world_size`` > 1, or an affinity list of one dict per rank) makes
    a synchronous run a :class:`SyncRlEval`: ``world_size`` ranks spawned by the run, or the
    ranks a launcher (torchrun, srun) started; each rank's share of the cores and GPUs comes
    from the affinity (see :func:`rlfast.runners.sync_rl.rank_affinity`). ``backend``
    overrides the automatic choice (NCCL on CUDA, gloo on CPU). ``sampler.eval_n_envs=0``
    turns evaluation off: the runner then logs its recent training returns
    (:func:`runner_settings`).
    """
    sampler_spec = catalog.sampler(sampler)
    algo_spec = catalog.algorithm(algo_name)
    traits = inspect_env(env_id)
    check_algo_fits(algo_name, traits, env_id)
    env_family = catalog.env_family(env_id)[0]
    if env_family.configure is not None:  # settings the family moves between sections
        config = env_family.configure(config)
    agent_cfg = memory_core_kwargs(dict(config["agent"]))
    recurrent = agent_cfg.pop("recurrent", False)
    choose_agent = env_family.agent_cls or algo_spec.agent_cls
    agent = choose_agent(traits.kind, recurrent, sampler_spec)(**agent_cfg)
    env_cfg = dict(config.get("env", {}))
    if needs_flat_observation(traits):  # also for configs not made by get_preset
        env_cfg.setdefault("flatten_observation", True)
    EnvCls, env_kwargs, TrajInfoCls = catalog.env_factory(env_id, env_cfg)
    # Replayed recurrent sequences (R2D1) start from a stored state, so their environments wait
    # for the batch end to reset; on-policy recurrent agents reset mid-batch and their losses
    # zero the state where an episode starts.
    collector = (sampler_spec.wait_reset_collector if recurrent and algo_spec.replay
                 else sampler_spec.reset_collector)
    SamplerCls = sampler_spec.sync_cls
    runner_cfg = runner_settings(config)
    evaluating = bool(config["sampler"].get("eval_n_envs"))
    if runner == "async":
        if sampler_spec.async_cls is None:
            able = [n for n in catalog.sampler_names() if catalog.sampler(n).async_cls]
            raise ValueError(f"the {sampler} sampler has no asynchronous variant; --runner "
                             f"async needs one of {', '.join(able)}")
        SamplerCls = sampler_spec.async_cls
    sampler_obj = SamplerCls(EnvCls=EnvCls, env_kwargs=env_kwargs, CollectorCls=collector,
                             eval_CollectorCls=sampler_spec.eval_collector,
                             TrajInfoCls=TrajInfoCls, **dict(config["sampler"]))
    distributed = distributed or (world_size or 1) > 1 or isinstance(affinity, list)
    if runner == "async" and not affinity:
        affinity = None  # {} too: the async default
    affinity = run_affinity(config, sampler, runner, affinity, device,
                            multi_rank=distributed and runner != "async")
    if runner == "async":
        AsyncCls = AsyncRlEval if evaluating else AsyncRl
        return AsyncCls(algo=_algo(algo_name, config["algo"]), agent=agent,
                        sampler=sampler_obj, seed=seed, affinity=affinity,
                        **runner_cfg, **config.get("async", {}))
    if distributed:
        SyncCls = SyncRlEval if evaluating else SyncRl
        return SyncCls(algo=_algo(algo_name, config["algo"]), agent=agent, sampler=sampler_obj,
                       seed=seed, affinity=affinity, world_size=world_size, backend=backend,
                       **runner_cfg, **config.get("distributed", {}))
    MinibatchCls = MinibatchRlEval if evaluating else MinibatchRl
    return MinibatchCls(algo=_algo(algo_name, config["algo"]), agent=agent,
                        sampler=sampler_obj, seed=seed, affinity=affinity, **runner_cfg)


def runner_settings(config: dict) -> dict:
    """``config["runner"]`` for the runner class the sampler's evaluation picks. With
    ``sampler.eval_n_envs=0`` the run does not evaluate: it logs the returns of its recent
    training episodes (``MinibatchRl`` and its sync / async twins), so ``runner.stop_return``,
    which reads evaluations, is a ``ValueError``; a negative ``eval_n_envs`` is one too."""
    runner_cfg = dict(config["runner"])
    n_eval = config["sampler"].get("eval_n_envs") or 0
    if not isinstance(n_eval, int) or isinstance(n_eval, bool) or n_eval < 0:
        raise ValueError(f"sampler.eval_n_envs must be an int >= 0 (0: no evaluation, log "
                         f"the training returns); got {n_eval!r}")
    if n_eval == 0:
        if runner_cfg.pop("stop_return", None) is not None:
            raise ValueError("runner.stop_return stops at an evaluation return, but "
                             "sampler.eval_n_envs=0 turns evaluation off: set "
                             "sampler.eval_n_envs > 0 or drop runner.stop_return")
    return runner_cfg
