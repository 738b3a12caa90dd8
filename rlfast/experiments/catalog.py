"""Looking up and registering algorithms, samplers, env families and evolution strategies.

rlfast's own entries come from :mod:`rlfast.experiments.builtin`. A user's package adds its
own with the ``register_*`` functions below (also importable from the top-level ``rlfast``
package). ``rlfast train`` finds such a package in one of two ways:

- an installed package declares an entry point in the ``rlfast.plugins`` group; its target
  is imported, and called if it is a function;
- the environment variable ``RLFAST_PLUGINS`` names modules to import (comma-separated),
  for example ``RLFAST_PLUGINS=my_envs rlfast train ppo myenv:Maze-v0``.

Plug-ins load once, at the first lookup. A plug-in that fails to import is an error that
names it, not a silent omission. Every registration remembers the plug-in module that made it
(or the module that called ``register_*``), so that a run records, with :func:`run_plugins`,
the modules its algorithm, sampler and env family came from: ``rlfast eval``, ``watch``,
``resume`` and ``export`` import them again (see :mod:`rlfast.experiments.run_dir`).
"""
from __future__ import annotations

import functools
import importlib
import os
import sys
from collections.abc import Callable, Mapping
from importlib import metadata
from typing import Any

from rlfast.experiments.builtin import (ALGORITHMS, ENV_FAMILIES, ES_STRATEGIES, SAMPLERS,
                                        action_kind)
from rlfast.experiments.config import ConfigError
from rlfast.experiments.registry import (AlgorithmSpec, EnvFamily, EnvTraits, EsStrategySpec,
                                         RegistryError, SamplerSpec)

__all__ = ["algorithm", "algorithm_names", "sampler", "sampler_names", "env_family",
           "env_traits", "env_factory", "es_strategy", "es_strategy_names",
           "register_algorithm", "register_sampler", "register_env_family",
           "register_es_strategy", "load_plugins", "run_plugins", "import_root",
           "PLUGIN_GROUP", "PLUGIN_ENV"]

PLUGIN_GROUP = "rlfast.plugins"
PLUGIN_ENV = "RLFAST_PLUGINS"
_loaded: set[str] = set()
# (kind, name) of a registration -> the plug-in that made it: module, call (an entry point's
# function, or None), source (how it was loaded: RLFAST_PLUGINS, an entry point, an import).
_origins: dict[tuple[str, str], dict] = {}
_loading: list[dict] = []  # the plug-ins being loaded now, innermost last
# The last scan of the entry points: (sys.path it was made on, the entry points found).
_scanned: tuple[tuple[str, ...], list] | None = None


def _plugin_entry_points() -> list:
    """The ``rlfast.plugins`` entry points of the distributions on ``sys.path``, scanned again
    only when ``sys.path`` has changed. A scan reads the metadata of every installed
    distribution (about 6 ms here), and one ``rlfast train`` looks up its algorithm, sampler
    and env family some 60 times: a third of a second of every run's start-up."""
    global _scanned
    key = tuple(sys.path)
    if _scanned is None or _scanned[0] != key:
        _scanned = (key, list(metadata.entry_points(group=PLUGIN_GROUP)))
    return _scanned[1]


def load_plugins() -> list[str]:
    """Import the plug-ins of the ``rlfast.plugins`` entry points and of ``RLFAST_PLUGINS``
    not imported yet; returns their names. A failing one is a ``ConfigError`` naming it."""
    found: list[tuple[str, Callable[[], Any], dict]] = []
    for entry in _plugin_entry_points():
        module, _, call = entry.value.partition(":")
        found.append((f"entry point {entry.name} ({entry.value})", entry.load,
                      dict(module=module.strip(), call=call.strip() or None,
                           source=f"entry point {entry.name}")))
    for module in filter(None, (m.strip() for m in os.environ.get(PLUGIN_ENV, "").split(","))):
        found.append((f"{PLUGIN_ENV} module {module}",
                      functools.partial(importlib.import_module, module),
                      dict(module=module, call=None, source=PLUGIN_ENV)))
    new = []
    for label, load, origin in found:
        if label in _loaded:
            continue
        _loaded.add(label)
        _loading.append(origin)
        try:
            target = load()
            if callable(target) and not isinstance(target, type):
                target()
        except Exception as e:
            _loaded.discard(label)
            raise ConfigError(f"rlfast plug-in {label} failed to load: "
                              f"{type(e).__name__}: {e}") from e
        finally:
            _loading.pop()
        new.append(label)
    return new


def _note_origin(kind: str, name: str, depth: int = 2) -> None:
    """Remember which plug-in registered ``kind`` ``name``: the one :func:`load_plugins` is
    loading, else the module that called the ``register_*`` function (``depth`` frames up),
    unless that is a script (``__main__``), which cannot be imported again by name."""
    if _loading:
        _origins[(kind, name)] = dict(_loading[-1])
        return
    caller = sys._getframe(depth).f_globals.get("__name__")
    if not caller or caller == "__main__" or caller.split(".")[0] == "rlfast":
        _origins.pop((kind, name), None)
        return
    _origins[(kind, name)] = dict(module=caller, call=None, source="import")


def import_root(module_name: str) -> str | None:
    """The directory on ``sys.path`` that the imported module ``module_name`` was found in
    (``/x`` for ``/x/pkg/mod.py`` named ``pkg.mod``), or None when it has no file (a
    namespace package, a built-in) or is not imported."""
    module = sys.modules.get(module_name)
    path = getattr(module, "__file__", None)
    if not isinstance(path, str):
        return None
    root = os.path.dirname(os.path.abspath(path))
    for _ in range(module_name.count(".") + (1 if hasattr(module, "__path__") else 0)):
        root = os.path.dirname(root)
    return root


def run_plugins(algo: str, env_id: str, sampler: str | None = None) -> list[dict]:
    """The plug-in modules a run of ``algo`` (an algorithm or an evolution strategy) on
    ``env_id`` with ``sampler`` needs, for its ``params.json``: one dict per module with
    ``module``, ``path`` (the directory it was imported from, or None), ``call`` (an entry
    point's function to call after the import, or None), ``source`` (``RLFAST_PLUGINS``,
    ``entry point NAME`` or ``import``) and ``provides`` (what it registered, e.g.
    ``["env family corridor"]``). Empty for rlfast's own entries."""
    family, _ = env_family(env_id)
    wanted = [("algorithm", algo), ("ES strategy", algo), ("env family", family.prefix),
              ("sampler", sampler)]
    records: dict[str, dict] = {}
    for kind, name in wanted:
        origin = _origins.get((kind, name)) if name else None
        if origin is None:
            continue
        record = records.setdefault(origin["module"], dict(
            module=origin["module"], path=import_root(origin["module"]), call=origin["call"],
            source=origin["source"], provides=[]))
        record["provides"].append(f"{kind} {name}")
    return list(records.values())


# ---- lookups --------------------------------------------------------------------------------
def algorithm(name: str) -> AlgorithmSpec:
    """The registered algorithm ``name`` (``ValueError`` listing the choices)."""
    load_plugins()
    return ALGORITHMS.get(name, ES_STRATEGIES)  # rlfast train takes either kind


def algorithm_names() -> list[str]:
    load_plugins()
    return ALGORITHMS.names()


def sampler(name: str) -> SamplerSpec:
    """The registered sampler ``name`` (``ValueError`` listing the choices)."""
    load_plugins()
    return SAMPLERS.get(name)


def sampler_names() -> list[str]:
    load_plugins()
    return SAMPLERS.names()


def es_strategy(name: str) -> EsStrategySpec:
    """The registered evolution strategy ``name`` (``ValueError`` listing the choices)."""
    load_plugins()
    return ES_STRATEGIES.get(name)


def es_strategy_names() -> list[str]:
    load_plugins()
    return ES_STRATEGIES.names()


def env_family(env_id: str) -> tuple[EnvFamily, str]:
    """``(family, name)`` of an environment id: the registered family whose prefix the id
    starts with (``atari:pong`` -> Atari, ``pong``), else gymnasium with the id itself
    (gymnasium's own ``module:Env-v0`` ids included)."""
    load_plugins()
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(f"an environment id must be a non-empty string; got {env_id!r}")
    head, sep, rest = env_id.partition(":")
    if sep:
        for key in ENV_FAMILIES:
            family = ENV_FAMILIES.get(key)
            if family.prefix == head:
                return family, rest
    return ENV_FAMILIES.get("gymnasium"), env_id


def env_traits(env_id: str) -> EnvTraits:
    """What the presets need to know of ``env_id`` (its family's ``traits``)."""
    family, name = env_family(env_id)
    return family.traits(name)


def check_env_id(env_id: str) -> None:
    """Refuse an id its family does not know (``ConfigError`` / ``ValueError`` naming it)."""
    family, name = env_family(env_id)
    if family.check_id is not None:
        family.check_id(name)


def traj_info_cls(family: EnvFamily) -> type:
    """The family's TrajInfo class (imported now when registered as ``"module:Name"``)."""
    cls = family.TrajInfoCls
    if cls is None:
        from rlfast.samplers import TrajInfo
        return TrajInfo
    if isinstance(cls, str):
        module, _, attr = cls.partition(":")
        return getattr(importlib.import_module(module), attr)
    return cls


def env_factory(env_id: str, env_cfg: Mapping[str, Any]) -> tuple[Any, dict, type]:
    """``(EnvCls, env_kwargs, TrajInfoCls)`` of ``env_id`` for the samplers."""
    family, name = env_family(env_id)
    made = family.factory(name, dict(env_cfg))
    if len(made) == 3:  # the factory bound its own TrajInfo (e.g. with the agents' names)
        return made
    EnvCls, env_kwargs = made
    return EnvCls, env_kwargs, traj_info_cls(family)


# ---- registration ---------------------------------------------------------------------------
def register_algorithm(name: str, algo_cls: Callable[..., Any], presets: Mapping[str, dict],
                       agent_cls: type | Callable[[str, bool, SamplerSpec], type], *,
                       replay: bool = False, default_sampler: str | None = None,
                       defaults: Mapping[str, dict] | None = None,
                       search_space: Mapping[str, Any] | None = None,
                       multi_discrete: bool = False, replace: bool = False) -> AlgorithmSpec:
    """Register an algorithm for ``rlfast train NAME ENV`` (see :class:`AlgorithmSpec`).

    ``presets`` maps preset families (``discrete``, ``continuous``, ``atari``, or an env
    family's own) to nested configs with ``agent``, ``algo``, ``sampler`` and ``runner``
    sections. ``agent_cls`` is an agent class, or a function ``(kind, recurrent, sampler
    spec) -> agent class``.
    """
    for family, preset in presets.items():
        missing = {"agent", "algo", "sampler", "runner"} - set(preset)
        if missing:
            raise RegistryError(f"register_algorithm({name!r}): preset {family!r} lacks the "
                                f"sections {sorted(missing)}")
    if isinstance(agent_cls, type):
        agent_cls = functools.partial(_fixed_agent, agent_cls)
    spec = ALGORITHMS.add(name, AlgorithmSpec(
        name, algo_cls, dict(presets), agent_cls, replay=replay,
        default_sampler=default_sampler, defaults=dict(defaults or {}),
        search_space=search_space, multi_discrete=multi_discrete), replace=replace)
    _note_origin("algorithm", name)  # after add: a refused registration changes nothing
    return spec


def _fixed_agent(cls: type, kind: str, recurrent: bool, sampler: SamplerSpec) -> type:
    return cls


def register_sampler(name: str, sync_cls: type, eval_collector: type, reset_collector: type,
                     wait_reset_collector: type | None = None, *, async_cls: type | None = None,
                     worker_processes: bool = True, min_workers: int = 1,
                     alternating: bool = False, action_server: bool = False,
                     replace: bool = False) -> SamplerSpec:
    """Register a sampler for ``--sampler NAME`` (see :class:`SamplerSpec`); without
    ``async_cls`` it cannot run under ``--runner async``."""
    spec = SAMPLERS.add(name, SamplerSpec(
        name, sync_cls, async_cls, eval_collector, reset_collector,
        wait_reset_collector or reset_collector, worker_processes=worker_processes,
        min_workers=min_workers, alternating=alternating, action_server=action_server),
        replace=replace)
    _note_origin("sampler", name)
    return spec


def register_env_family(prefix: str, make_env: Callable[..., Any] | None = None, *,
                        factory: Callable[[str, dict], tuple[Any, dict]] | None = None,
                        traits: Callable[[str], EnvTraits] | None = None,
                        check_id: Callable[[str], None] | None = None,
                        TrajInfoCls: type | str | None = None,
                        preset_family: str | None = None, pixels: bool = False,
                        description: str = "", replace: bool = False) -> EnvFamily:
    """Register the env ids ``PREFIX:<name>``.

    The usual case gives ``make_env(name, **env_kwargs)``, returning a gymnasium
    environment: rlfast wraps it as it wraps ``gymnasium.make`` (``--set env.KEY=VALUE``
    reaches ``make_env`` as keywords), reads the agent's spaces and time limit from one
    instance, and draws frames with ``render_mode="rgb_array"``. ``make_env`` must be
    importable by name (a module-level function) so that worker processes can call it.
    Environments that already speak rlfast's ``Env`` interface give ``factory(name,
    env_config) -> (EnvCls, env_kwargs)`` and ``traits(name)`` instead. ``check_id(name)``
    may refuse unknown names early with a ``ValueError``.
    """
    if not isinstance(prefix, str) or not prefix.isidentifier():
        raise RegistryError(f"an env family prefix is a name like 'myenvs' (ids are "
                            f"'myenvs:<name>'); got {prefix!r}")
    if (make_env is None) == (factory is None):
        raise RegistryError(f"register_env_family({prefix!r}) takes make_env (a gymnasium "
                            f"environment maker) or factory, exactly one")
    if factory is not None and traits is None:
        raise RegistryError(f"register_env_family({prefix!r}, factory=...) also needs traits")
    render_kwargs: dict = {}
    if make_env is not None:
        factory = functools.partial(_gymnasium_factory, make_env)
        traits = traits or functools.partial(_gymnasium_traits, make_env)
        render_kwargs = dict(render_mode="rgb_array")
    spec = ENV_FAMILIES.add(prefix, EnvFamily(
        prefix=prefix, factory=factory, traits=traits, check_id=check_id,
        TrajInfoCls=TrajInfoCls, preset_family=preset_family, pixels=pixels,
        render_kwargs=render_kwargs, description=description), replace=replace)
    _note_origin("env family", prefix)
    return spec


def _gymnasium_factory(make_env: Callable[..., Any], name: str, env_cfg: dict
                       ) -> tuple[Any, dict]:
    from rlfast.envs.gym import make_with
    return functools.partial(make_with, make_env), dict(name=name, **env_cfg)


def _gymnasium_traits(make_env: Callable[..., Any], name: str) -> EnvTraits:
    from rlfast.envs.gym import find_horizon
    env = make_env(name)
    try:
        return EnvTraits(action_kind(env.action_space), env.action_space,
                         env.observation_space, find_horizon(env))
    finally:
        env.close()


def register_es_strategy(name: str, strategy_cls: Callable[..., Any],
                         presets: Mapping[str, dict], *, replace: bool = False
                         ) -> EsStrategySpec:
    """Register an evolution strategy for ``rlfast train NAME ENV`` (an ``rlfast.es.BaseES``:
    ``strategy_cls(x0, seed=, **config["strategy"])``), with its presets for the
    ``discrete`` and ``continuous`` action families."""
    spec = ES_STRATEGIES.add(name, EsStrategySpec(name, strategy_cls, dict(presets)),
                             replace=replace)
    _note_origin("ES strategy", name)
    return spec
