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
"""
from __future__ import annotations

import math
from typing import Any

import torch
from gymnasium import spaces as gym_spaces

from rlfast.algos import RLAlgorithm
from rlfast.algos.dqn.r2d1 import R2D1
from rlfast.experiments import catalog
from rlfast.experiments.builtin import action_kind
from rlfast.experiments.config import ConfigError
from rlfast.experiments.device import (device_label, learner_device, resolve_device,
                                      sampler_for_device)
from rlfast.experiments.env_overrides import ENV_SAMPLER, ENV_TUNED
from rlfast.experiments.es_presets import ES_ENV_TUNED
from rlfast.experiments.preset_data import (ASYNC_DEFAULTS, DISTRIBUTED_DEFAULTS, PRESETS,
                                           SAMPLER_SAFETY)
from rlfast.experiments.registry import EnvTraits
from rlfast.runners import AsyncRl, AsyncRlEval, MinibatchRl, MinibatchRlEval, SyncRl, SyncRlEval
from rlfast.runners.cadence import LogCadence
from rlfast.models.memory import check_core
from rlfast.utils.checks import check_choice, check_int
from rlfast.utils.misc import available_cpus, deep_merge

__all__ = ["PRESETS", "ASYNC_DEFAULTS", "DISTRIBUTED_DEFAULTS", "SAMPLER_SAFETY", "RUNNERS",
           "EnvTraits", "action_kind", "inspect_env", "env_kind", "algos_for",
           "check_algo_fits", "needs_flat_observation", "fit_evaluation_to_horizon",
           "get_preset", "check_es_task", "get_es_preset", "default_sampler",
           "default_affinity", "default_async_affinity", "run_affinity", "threads_in_slot",
           "check_runner",
           "run_params", "build_experiment", "LEARNING_START_KEYS", "SEQUENCE_KEYS",
           "run_iterations", "learning_start_keys", "first_learning_iteration",
           "async_update_lag", "learning_budget_warning", "step_rounding_note"]

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
    # --set runner.stop_return=X ends training at the first evaluation averaging X or more.
    config["runner"].setdefault("stop_return", None)
    # Training episodes averaged in a row's training return (TrainReturnWindow with evaluation).
    config["runner"].setdefault("log_traj_window", 100)
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


def default_sampler(algo: str, env_id: str | None = None, cuda_idx: int | None = None,
                    n_envs: int | None = None, n_cpus: int | None = None,
                    runner: str = "sync") -> str:
    """The sampler ``rlfast train`` uses without ``--sampler``.

    In this order: the per-environment choice of ``ENV_SAMPLER`` (``env_overrides``) where it
    has one for (``algo``, ``env_id``); serial for the replay-based continuous-control
    algorithms (their registry entry's ``default_sampler``: one environment and many updates
    per step leave nothing for parallel workers to hide); with the learner on a GPU (``cuda_idx``) and a convolutional agent
    (an env family of images, ``atari:<game>``) in a synchronous run, the measured rule of
    :func:`rlfast.experiments.device.sampler_for_device` (the GPU action server or
    worker-side inference, whichever measured faster at ``n_envs`` environments, default the
    preset's ``batch_B``, on ``n_cpus`` cores, default the available ones); else ``"cpu"``.
    """
    if env_id is not None and (algo, env_id) in ENV_SAMPLER:
        return ENV_SAMPLER[(algo, env_id)]
    spec = catalog.algorithm(algo)
    if spec.default_sampler is not None:
        return spec.default_sampler
    family = catalog.env_family(env_id)[0] if env_id is not None else None
    if family is not None and family.pixels and cuda_idx is not None and runner == "sync":
        if n_envs is None:
            own = family.preset_family
            preset = spec.presets.get((None if callable(own) else own) or "")
            n_envs = preset["sampler"]["batch_B"] if preset else 1
        n_cpus = len(available_cpus()) if n_cpus is None else n_cpus
        measured = sampler_for_device(True, n_envs, n_cpus, cuda_idx)
        if measured is not None:
            return measured
    return "cpu"


def default_affinity(n_envs: int, sampler: str, master_threads: int | None = None,
                     device: str | None = "auto") -> dict:
    """The affinity dict of a single-machine run that uses every available core.

    One worker per core (at most one per environment; the alternating sampler needs two),
    and the learner on the GPU that ``device`` names (``--device``: ``auto``, the default,
    is GPU 0 when CUDA is available; ``cpu``; ``cuda``; ``cuda:N``), for every sampler; the
    gpu and alternating samplers serve their actions on that device too.
    ``master_threads`` sets the master's torch threads while the algorithm optimizes
    (default None: every core, since the synchronous samplers' workers are idle then; the
    master samples on one thread, see ``MinibatchRlBase``).
    """
    cpus = available_cpus()
    cuda_idx = resolve_device(device)
    spec = catalog.sampler(sampler)
    if not spec.worker_processes:
        return dict(master_cpus=cpus, master_torch_threads=master_threads, cuda_idx=cuda_idx)
    n_workers = max(spec.min_workers, min(len(cpus), n_envs))
    workers = [[cpus[i % len(cpus)]] for i in range(n_workers)]
    return dict(master_cpus=cpus, master_torch_threads=master_threads, workers_cpus=workers,
                worker_torch_threads=1, cuda_idx=cuda_idx)


def default_async_affinity(sampler: str, device: str | None = "auto") -> dict:
    """The async affinity of a single-machine run: the optimizer on the GPU that ``device``
    names (``auto``, the default: GPU 0 when CUDA is available, else the CPU), the sampler
    process and its workers on every core (one worker per core, two at least for the
    alternating sampler). The sampler process acts on the CPU (``cuda_idx=None``), also for
    the gpu and alternating samplers."""
    cpus = available_cpus()
    cuda_idx = resolve_device(device)
    n_workers = max(catalog.sampler(sampler).min_workers, len(cpus))
    sampler_affinity = dict(master_cpus=cpus, master_torch_threads=1,
                            workers_cpus=[[cpus[i % len(cpus)]] for i in range(n_workers)],
                            worker_torch_threads=1, cuda_idx=None, set_affinity=True)
    return dict(optimizer=[dict(cuda_idx=cuda_idx, master_cpus=cpus,
                                master_torch_threads=1)], sampler=sampler_affinity)


def run_affinity(config: dict, sampler: str, runner: str = "sync",
                 affinity: dict | list | None = None, device: str | None = "auto",
                 multi_rank: bool = False, code: str | None = None) -> dict | list:
    """The affinity a run of ``config`` uses: ``affinity`` when given (decoded from the
    affinity ``code``), checked against ``device`` (an explicit ``--device`` that
    contradicts it is a ``ValueError``, see :func:`rlfast.experiments.device.learner_device`);
    else the default for the runner on ``device``: :func:`default_async_affinity`, or
    :func:`default_affinity` with ``batch_B`` workers at most and the master's optimizing
    threads from the config's ``affinity.master_torch_threads`` (0: every core).
    ``multi_rank``: several ranks share the default affinity, each on its own GPU."""
    cuda_idx = learner_device(device, affinity, code=code, multi_rank=multi_rank)
    if affinity is not None:
        return threads_in_slot(affinity, config)
    if runner == "async":
        return default_async_affinity(sampler, device_label(cuda_idx))
    # A preset's "affinity" section may set the master's torch threads (0: every core).
    threads = config.get("affinity", {}).get("master_torch_threads")
    if threads == 0:
        threads = len(available_cpus())
    return default_affinity(config["sampler"]["batch_B"], sampler, master_threads=threads,
                            device=device_label(cuda_idx))


def threads_in_slot(affinity: dict | list, config: dict) -> dict | list:
    """``affinity`` (decoded from an affinity code) with the master's optimizing torch threads
    chosen as without a code, within the slot's cores. A code gives the master one thread per
    core of its slot; instead, the config's ``affinity.master_torch_threads`` applies (0:
    every core of ``master_cpus``, N: at most N), and without that key the master decides by
    its model on the CPU, as it does without a code (:class:`rlfast.runners.master_affinity.
    MasterAffinity`: a convolutional model on every core of the slot, an MLP on one, since its
    operations last microseconds and each extra thread waits at a barrier). Measured
    (``scripts/bench_threads.py``, 2 cores, ``0slt_2cpu_0gpu_2cpr_0hto`` beside one busy
    process): SAC, TD3 and DDPG on Pendulum-v1 made 99, 149 and 105 steps/s on the code's two
    pinned threads against 260-466 without the code, and DQN on CartPole 1,106-1,426 against
    4,360-4,733. Async affinities and GPU learners are returned as they are."""
    threads = config.get("affinity", {}).get("master_torch_threads")

    def fit(part: dict) -> dict:
        if "optimizer" in part or not part.get("master_cpus") or \
                part.get("cuda_idx") is not None:
            return part
        cores = len(part["master_cpus"])
        if threads is None:  # the model decides (None), unless nothing is set already
            return part if part.get("master_torch_threads") is None else \
                dict(part, master_torch_threads=None)
        return dict(part, master_torch_threads=cores if threads == 0 else min(int(threads), cores))

    return [fit(part) for part in affinity] if isinstance(affinity, list) else fit(affinity)


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
            raise ValueError(f"the {sampler} sampler has no asynchronous variant; --runner "
                             f"async needs one of "
                             f"{', '.join(n for n in catalog.sampler_names() if catalog.sampler(n).async_cls)}")
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


# ---- what a run's budget buys ------------------------------------------------------------------
# The config keys that decide whether a replay-based run learns within its budget (see
# first_learning_iteration), and R2D1's sequence keys that also do: rlfast tune refuses a
# search whose fixed budget cannot learn unless its space draws one of them.
LEARNING_START_KEYS = ("runner.n_steps", "algo.min_steps_learn", "sampler.batch_T",
                       "sampler.batch_B")
SEQUENCE_KEYS = ("algo.warmup_T", "algo.batch_T", "algo.n_step_return",
                 "algo.store_rnn_state_interval")


def run_iterations(runner: Any, world_size: int = 1) -> tuple[int, int]:
    """(iterations, environment steps per iteration) that a built, not yet started
    ``runner`` will train: its ``n_steps`` rounded up to whole iterations of every rank's
    batch (an asynchronous run samples as one rank), planned as the runner plans them at
    start-up (:class:`rlfast.runners.cadence.LogCadence`)."""
    ranks = 1 if getattr(runner.sampler, "is_async", False) else int(world_size)
    itr_steps = runner.sampler.env_steps_per_batch * ranks
    return LogCadence.plan(runner.n_steps, 1, itr_steps).n_itr, itr_steps


def _sequence_steps(algo: Any) -> int:
    """Steps of each environment that R2D1 needs before one whole replayed sequence (burn-in,
    training steps and n-step targets, from a stored state) exists; 0 for other algorithms."""
    if not isinstance(algo, R2D1):
        return 0
    return algo.warmup_T + algo.batch_T + algo.n_step_return + algo.store_rnn_state_interval


def learning_start_keys(algo: Any) -> tuple[str, ...]:
    """The config keys that move ``algo``'s first update (:func:`first_learning_iteration`):
    ``LEARNING_START_KEYS``, and ``SEQUENCE_KEYS`` for R2D1; none for an algorithm that
    learns from its first batch."""
    if getattr(algo, "min_steps_learn", None) is None:
        return ()
    return LEARNING_START_KEYS + (SEQUENCE_KEYS if isinstance(algo, R2D1) else ())


def first_learning_iteration(algo: Any, batch_spec: Any, ranks: int = 1) -> int:
    """The first iteration in which ``algo`` updates the agent, known before the run starts.

    A replay-based algorithm (one with ``min_steps_learn``: the DQN family, R2D1, DDPG, TD3,
    SAC) waits until ``min_steps_learn`` samples, ``batch_spec.size`` per rank and
    iteration, are in replay; R2D1 also until one whole sequence is (``_sequence_steps``).
    This is the ``min_itr_learn`` that their ``initialize`` computes; 0 for algorithms that
    learn from the first batch (PPO, A2C)."""
    min_steps = getattr(algo, "min_steps_learn", None)
    if min_steps is None:
        return 0
    first = int(min_steps) // (batch_spec.size * int(ranks))
    sequence = _sequence_steps(algo)
    if sequence:
        first = max(first, -(-sequence // batch_spec.T))
    return first


def async_update_lag(algo: Any, batch_spec: Any, itr_steps: int) -> int:
    """Iterations in replay from the first learning one on before an asynchronous run's
    optimizer may make its first ``optimize_agent`` call: its replay ratio must allow the
    call's ``updates_per_optimize`` updates (``round(replay_ratio * batch / batch_size)``,
    at least one) first, counting ``itr_steps`` steps per iteration, as
    :class:`rlfast.runners.replay_pace.ReplayPace` does; 1 for algorithms without a replay
    ratio. (A synchronous run updates in its first learning iteration: no lag.)"""
    ratio, batch_size = getattr(algo, "replay_ratio", None), getattr(algo, "batch_size", None)
    if not ratio or not batch_size:
        return 1
    per_call = max(1, round(ratio * batch_spec.size / batch_size))
    # Start just below the exact answer, then count up with ReplayPace's own rounding.
    lag = max(1, math.ceil(per_call * batch_size / (ratio * itr_steps)) - 1)
    while math.floor(ratio * lag * itr_steps / batch_size + 1e-9) < per_call:
        lag += 1
    return lag


def learning_budget_warning(algo_name: str, runner: Any, world_size: int = 1,
                            steps_label: str | None = None) -> str | None:
    """Why a built ``runner`` of ``algo_name`` would end before its algorithm's first
    update (its losses all empty), naming the budget (``steps_label``, default
    ``runner.n_steps=N``), where learning starts and what to change; None when it learns.
    ``rlfast train`` prints it as a warning and ``rlfast tune`` prunes such a trial."""
    algo, batch_spec = runner.algo, runner.sampler.batch_spec
    if getattr(algo, "min_steps_learn", None) is None:
        return None  # it learns from its first batch
    n_itr, itr_steps = run_iterations(runner, world_size)
    is_async = getattr(runner.sampler, "is_async", False)
    ranks = 1 if is_async else int(world_size)
    first = first_learning_iteration(algo, batch_spec, ranks)
    lag = async_update_lag(algo, batch_spec, itr_steps) if is_async else 1
    needed = first + lag - 1  # the iteration whose batch the first update needs in replay
    if n_itr > needed:
        return None
    label = steps_label or f"runner.n_steps={runner.n_steps}"
    sequence = _sequence_steps(algo)
    if sequence and first > int(algo.min_steps_learn) // (batch_spec.size * ranks):
        why = (f"{type(algo).__name__} replays whole sequences of algo.warmup_T + batch_T + "
               f"n_step_return + store_rnn_state_interval = {sequence} steps of each "
               f"environment")
        fix = "shorten those sequences"
    else:
        why, fix = f"algo.min_steps_learn={algo.min_steps_learn}", "lower algo.min_steps_learn"
    if lag > 1:
        why += (f"; then the asynchronous optimizer waits {lag} iterations for "
                f"algo.replay_ratio={algo.replay_ratio} to allow its first updates")
    return (f"{label} ends before {algo_name} starts learning: its first update comes after "
            f"{(needed + 1) * itr_steps} steps ({why}), so no loss would be logged; train "
            f"{needed * itr_steps + 1} steps or more, or {fix}")


def step_rounding_note(runner: Any, world_size: int = 1,
                       steps_label: str | None = None) -> str | None:
    """The line saying that a built ``runner`` trains more than its ``n_steps`` (named by
    ``steps_label``, default ``runner.n_steps=N``) because it trains whole iterations of
    ``batch_T x batch_B`` steps (times the ranks); None when the budget is a whole number
    of iterations."""
    n_itr, itr_steps = run_iterations(runner, world_size)
    if n_itr * itr_steps == runner.n_steps:
        return None
    sampler = runner.sampler
    ranks = itr_steps // sampler.env_steps_per_batch
    label = steps_label or f"runner.n_steps={runner.n_steps}"
    shape = f"sampler.batch_T={sampler.batch_spec.T} x sampler.batch_B={sampler.n_envs}"
    if ranks > 1:
        shape += f" x {ranks} ranks"
    return (f"{label} is rounded up to {n_itr * itr_steps} steps: whole iterations of "
            f"{itr_steps} steps ({shape})")
