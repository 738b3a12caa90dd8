"""``rlfast train cem|cmaes|openai_es ENV``: build and run an evolution-strategies search.

The command line is the one of ``rlfast train``: ``--steps`` caps the population's
environment steps, ``--seed``, ``--log-dir``/``--overwrite``, ``--set`` (and ``--config``)
override the ES preset (``rlfast.experiments.es_presets``), ``--affinity CODE`` pins the
master and gives the workers their cores (one worker per entry of the code's
``workers_cpus``; by default one worker per available core), ``--snapshot-mode``,
``--verbose``. Options that only mean something for gradient-based training (``--sampler``,
``--n-envs``, ``--runner async``, ``--world-size``, ``--backend``, ``--snapshot-replay``,
``--snapshot-every``) are
refused with the reason; so is ``--device cuda[:N]`` (the candidates play on CPU workers;
``auto`` and ``cpu`` are accepted).
"""
from __future__ import annotations

import argparse
import functools
import os
from typing import Any

from rlfast.es.evaluator import EsEvaluator
from rlfast.es.policy import EsPolicy, policy_spec
from rlfast.es.runner import EsRunner
from rlfast.experiments import catalog
from rlfast.experiments.assembly import (TrainRun, affinity_for_run, check_env_id,
                                         resolve_config, run_command)
from rlfast.experiments.config import ConfigError
from rlfast.experiments.device import check_no_device
from rlfast.experiments.presets import check_es_task, get_es_preset, inspect_env, run_params
from rlfast.experiments.resume_changes import checked_changes, resume_record
from rlfast.experiments.run_dir import check_log_dir, log_dir_for_run

__all__ = ["es_train_main", "configure_es", "configure_es_resume", "build_es_runner",
           "resolve_es_config"]

_ES_DEVICE = "cpu (evolution strategies: candidates play on the ES workers)"


def _refuse_rl_options(args: argparse.Namespace) -> None:
    """Options of ``rlfast train`` that an ES run cannot honour: a clear error, not silence."""
    refused = []
    if getattr(args, "sampler", None) is not None:
        refused.append("--sampler (ES candidates play on the ES workers; give their cores "
                       "with --affinity)")
    if getattr(args, "n_envs", None) is not None:
        refused.append("--n-envs (each worker plays as many episodes at once as it has "
                       "lanes; set strategy.popsize or evaluator.episodes_per_candidate)")
    if getattr(args, "runner", "sync") != "sync":
        refused.append("--runner async (ES has no replay buffer)")
    if getattr(args, "world_size", None) not in (None, 1):
        refused.append("--world-size (ES runs on one machine's workers)")
    if getattr(args, "backend", None) is not None:
        refused.append("--backend (ES uses no torch.distributed group)")
    if getattr(args, "snapshot_replay", False):
        refused.append("--snapshot-replay (ES has no replay buffer)")
    if getattr(args, "snapshot_every", None) is not None:
        refused.append("--snapshot-every (ES snapshots at its log rows: "
                       "runner.log_interval_generations)")
    check_no_device(getattr(args, "device", None), f"rlfast train {args.algo}")
    if refused:
        raise ValueError(f"rlfast train {args.algo} does not take " + "; ".join(refused))


def _step_budget(steps: int | None, base: dict) -> dict:
    """The named options of ``--steps`` for an ES config: the population-step budget, and no
    generation cap below it."""
    if steps is None:
        return {}
    if steps < 1:
        raise ConfigError(f"--steps must be >= 1; got {steps}")
    return {"runner.n_steps": int(steps),
            "runner.n_generations": max(base["runner"]["n_generations"], 10**9)}


def resolve_es_config(args: argparse.Namespace) -> dict:
    """The preset for (algo, env), then ``--steps`` (``runner.n_steps``), the ``--config``
    file and the ``--set`` overrides, later ones winning (:func:`resolve_config`)."""
    preset = get_es_preset(args.algo, args.env)
    return resolve_config(preset, _step_budget(getattr(args, "steps", None), preset),
                          config_file=getattr(args, "config", None) or None,
                          overrides=list(getattr(args, "overrides", None) or []))


def _workers_cpus(affinity: dict | None) -> list[list[int]]:
    """One worker per available core without an affinity; else the affinity's
    ``workers_cpus`` (``[]``: play in this process)."""
    if affinity is None:
        from rlfast.utils.misc import available_cpus
        return [[cpu] for cpu in available_cpus()]
    return [list(c) if isinstance(c, (list, tuple)) else [int(c)]
            for c in affinity.get("workers_cpus") or []]


def build_es_runner(algo: str, env_id: str, config: dict, seed: int = 0,
                    affinity: dict | None = None) -> tuple[EsRunner, dict]:
    """The runner of one ES run (nothing started) and its policy's constructor arguments.
    ``affinity``: an affinity dict (``master_cpus``, ``workers_cpus``), or None for one
    worker per available core; ``workers_cpus=[]`` plays in this process."""
    check_es_task(algo, env_id)
    traits = inspect_env(env_id)
    policy_cfg = dict(config["policy"])
    init = policy_cfg.pop("init", "zeros")
    policy_kwargs = dict(policy_spec(traits.observation_space, traits.action_space),
                         hidden_sizes=list(policy_cfg.pop("hidden_sizes", [])))
    if policy_cfg:
        raise ConfigError(f"unknown policy settings {sorted(policy_cfg)}; the ES policy takes "
                          f"hidden_sizes and init")
    x0 = EsPolicy(**policy_kwargs).initial_vector(init, seed)
    strategy = catalog.es_strategy(algo).strategy_cls(x0, seed=seed, **config["strategy"])
    evaluator_cfg = dict(config["evaluator"])
    episodes = evaluator_cfg.pop("episodes_per_candidate")
    eval_episodes = evaluator_cfg.pop("eval_episodes")
    EnvCls, env_kwargs, TrajInfoCls = catalog.env_factory(env_id, config.get("env", {}))
    make_env = functools.partial(EnvCls, **env_kwargs)
    workers = _workers_cpus(affinity)
    evaluator = EsEvaluator(make_env, policy_kwargs, TrajInfoCls, workers_cpus=workers,
                            seed=seed, **evaluator_cfg)
    runner_cfg = dict(config["runner"])
    runner = EsRunner(strategy, evaluator, episodes_per_candidate=episodes,
                      eval_episodes=eval_episodes, seed=seed, affinity=affinity,
                      snapshot_info=dict(policy_kwargs=policy_kwargs, env=env_id, algo=algo),
                      **runner_cfg)
    return runner, policy_kwargs


def configure_es(args: argparse.Namespace) -> Any:
    """Check and build an ES run from ``rlfast train`` arguments, as a ``TrainRun`` that
    :func:`~rlfast.experiments.assembly.run_train` runs; nothing starts and no file is
    written (a mistake is a ``ConfigError`` / ``ValueError``)."""
    _refuse_rl_options(args)
    check_env_id(args.env)
    config = resolve_es_config(args)
    affinity = _one_process_affinity(args.affinity)
    exp_dir = log_dir_for_run(args)
    check_log_dir(exp_dir, "--log-dir" if args.log_dir is not None else "log directory",
                  overwrite=getattr(args, "overwrite", False))
    runner, _ = build_es_runner(args.algo, args.env, config, seed=args.seed, affinity=affinity)
    log_params = run_params(args.algo, args.env, config, "es", args.seed,
                            affinity=args.affinity, device="cpu")
    log_params.update(snapshot_mode=args.snapshot_mode, es=True,
                      tensorboard=bool(getattr(args, "tensorboard", False)))
    return TrainRun(args=args, config=config, runner=runner, log_params=log_params,
                    exp_dir=exp_dir, device=_ES_DEVICE)


def _one_process_affinity(code: str | None) -> dict | None:
    affinity = affinity_for_run(code) if code else None
    if isinstance(affinity, list):
        raise ValueError(f"--affinity {code} describes several ranks; an ES run takes a "
                         f"one-process code (its workers_cpus become the ES workers)")
    return affinity


def configure_es_resume(args: argparse.Namespace, params: dict, run_dir: str, snapshot: dict,
                        snapshot_path: str) -> Any:
    """``rlfast resume`` of an ES run: rebuild it from ``params.json``, load the snapshot's
    strategy state and counters, and continue up to ``--steps`` population steps (default:
    the run's own budget). A changed configuration needs ``--force`` and is recorded."""
    check_no_device(getattr(args, "device", None), f"{run_dir} (an evolution-strategies run)")
    for option, value in (("--n-envs", args.n_envs), ("--sampler", args.sampler),
                          ("--world-size", args.world_size if args.world_size != 1 else None),
                          ("--snapshot-replay", args.snapshot_replay),
                          ("--snapshot-every", getattr(args, "snapshot_every", None))):
        if value is not None:
            raise ConfigError(f"{run_dir} is an evolution-strategies run; {option} does not "
                              f"apply to it")
    old_config = params["config"]
    config = resolve_config(old_config, _step_budget(args.steps, old_config),
                            overrides=args.overrides)
    changes, affinity_code = checked_changes(run_dir, params, old_config, config, args,
                                             ignore=("runner.n_steps", "runner.n_generations"))
    runner, _ = build_es_runner(params["algo"], params["env"], config, seed=params["seed"],
                                affinity=_one_process_affinity(affinity_code))
    try:
        runner.resume_from(snapshot)
    except (KeyError, TypeError, ValueError) as e:
        raise ConfigError(f"snapshot {snapshot_path} does not resume this ES run: {e}") from e
    if not runner.work_left():
        raise ConfigError(f"{run_dir} already ran {runner.generations_done} generations and "
                          f"{runner.cum_steps} steps (snapshot {os.path.basename(snapshot_path)})"
                          f", its whole budget: pass a larger --steps to search on")
    log_params = {k: v for k, v in params.items() if k not in ("name", "run_ID")}
    log_params.update(config=config, affinity=affinity_code)
    log_params["resumes"], run_args = resume_record(
        params, args, run_dir, snapshot, snapshot_path, runner.cum_steps,
        config["runner"]["n_steps"], changes, sampler=None)
    return TrainRun(args=run_args, config=config, runner=runner, log_params=log_params,
                    exp_dir=run_dir, device=_ES_DEVICE,
                    resume=dict(itr=int(snapshot["itr"]), cum_steps=runner.cum_steps))


def es_train_main(args: argparse.Namespace) -> int:
    """``rlfast train`` for an ES algorithm; returns the exit status (2 for a configuration
    error, 128 + signal for an interrupted run, else 0)."""
    return run_command(configure_es, args)
