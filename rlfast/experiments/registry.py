"""The registries a run is assembled from: algorithms, samplers, env families, ES strategies.

Each entry is one immutable spec that holds everything the experiments layer knows of the
thing it names, so that adding an algorithm, a sampler or a family of environments is one
registration (``rlfast.register_algorithm``, ``register_sampler``, ``register_env_family``,
``register_es_strategy``), from inside rlfast or from a user's package. This module only
defines the specs and the registry container; rlfast's own entries are made in
:mod:`rlfast.experiments.builtin` and looked up through :mod:`rlfast.experiments.catalog`.
"""
from __future__ import annotations

import dataclasses
from collections import namedtuple
from collections.abc import Callable, Iterator, Mapping
from typing import Any, Generic, TypeVar

import numpy as np
from gymnasium import spaces as gym_spaces

__all__ = ["Registry", "AlgorithmSpec", "SamplerSpec", "EnvFamily", "EsStrategySpec",
           "EnvTraits", "RegistryError", "action_kind", "env_id_help"]

EnvTraits = namedtuple("EnvTraits", ["kind", "action_space", "observation_space", "horizon"],
                       defaults=(None,))
EnvTraits.__doc__ = ("What the presets need to know of an environment: the action ``kind`` "
                     "(``discrete``, ``multi_discrete``, ``continuous``, ``atari``, or None "
                     "for an action space no preset supports), the gymnasium spaces (None "
                     "for Atari games) and its time limit (None if none is known).")


def action_kind(space: Any) -> str | None:
    """The action kind of a gymnasium action space: ``"discrete"`` (Discrete),
    ``"multi_discrete"`` (1-D MultiDiscrete or MultiBinary), ``"continuous"`` (1-D float Box),
    else None (Dict, Tuple, integer Box, multi-dimensional spaces, ...)."""
    if isinstance(space, gym_spaces.Discrete):
        return "discrete"
    if isinstance(space, (gym_spaces.MultiDiscrete, gym_spaces.MultiBinary)):
        return "multi_discrete" if len(space.shape) == 1 else None
    if isinstance(space, gym_spaces.Box) and np.dtype(space.dtype).kind == "f" and \
            len(space.shape) == 1:
        return "continuous"
    return None


class RegistryError(ValueError):
    """A registration that clashes with an existing entry or is malformed."""


@dataclasses.dataclass(frozen=True)
class AlgorithmSpec:
    """One algorithm ``rlfast train`` can run.

    ``algo_cls(**config["algo"])`` builds it (``OptimCls`` given by name in presets);
    ``presets`` maps a preset family (``discrete``, ``continuous``, ``atari``, or a custom
    env family's own) to its nested configuration; ``agent_cls(kind, recurrent, sampler)``
    picks the agent class from the action kind, the ``agent.recurrent`` flag and the
    :class:`SamplerSpec`; ``replay`` says whether it learns from a replay buffer (and so can
    run under ``--runner async``); ``default_sampler`` is its sampler when the command line
    names none (None: the device rule); ``defaults`` are keys every configuration of it
    gains when its preset lacks them (settable with ``--set``); ``search_space`` is the
    space ``rlfast tune`` searches by default; ``multi_discrete`` says whether it can act in
    MultiDiscrete / MultiBinary action spaces."""

    name: str
    algo_cls: Callable[..., Any]
    presets: Mapping[str, dict]
    agent_cls: Callable[[str, bool, "SamplerSpec"], type]
    replay: bool = False
    default_sampler: str | None = None
    defaults: Mapping[str, dict] = dataclasses.field(default_factory=dict)
    search_space: Mapping[str, Any] | None = None
    multi_discrete: bool = False


@dataclasses.dataclass(frozen=True)
class SamplerSpec:
    """One sampler: the synchronous and asynchronous classes, the evaluation collector and the
    training collectors (``reset_collector`` for feed-forward agents, ``wait_reset_collector``
    for recurrent ones, whose environments wait for the batch end to reset).
    ``worker_processes``: steps environments in worker processes (``False`` for the serial
    sampler, which has none); ``min_workers``: the fewest workers it runs with (the
    alternating sampler needs two groups); ``alternating``: recurrent agents need the variant
    that keeps one state per worker group; ``action_server``: the master batches the agent's
    forward for every worker (on the learner's device), the workers only step environments."""

    name: str
    sync_cls: type
    async_cls: type | None
    eval_collector: type
    reset_collector: type
    wait_reset_collector: type
    worker_processes: bool = True
    min_workers: int = 1
    alternating: bool = False
    action_server: bool = False


@dataclasses.dataclass(frozen=True)
class EnvFamily:
    """A family of environment ids, ``<prefix>:<name>``; the gymnasium family has no prefix.

    ``factory(name, env_config)`` returns the samplers' ``(EnvCls, env_kwargs)``, where
    ``EnvCls(**env_kwargs)`` makes one rlfast ``Env`` in a worker (or ``(EnvCls, env_kwargs,
    TrajInfoCls)`` to give the run a TrajInfo class bound for this environment); ``traits(name)``
    returns the :class:`EnvTraits` the presets choose the agent by; ``check_id(name)`` raises
    ``ValueError`` for a name the family does not know (before anything is built); ``TrajInfoCls``
    collects its episode statistics (a class, or ``"module:Name"``, imported when a run is built so
    that a family's heavy imports wait until it is used; None: the samplers' ``TrajInfo``);
    ``preset_family`` names the preset family its algorithms use (None: from the action kind; a
    function of the :class:`EnvTraits` may choose per environment, returning None for the action
    kind's); ``pixels`` marks image observations (convolutional agents; the device rule picks their
    sampler; evolution strategies refuse them); ``render_kwargs`` are added to ``env_kwargs`` to
    draw RGB frames (``rlfast watch``). Families whose settings reach beyond the ``env`` section may
    also give: ``env_defaults(name)``, the ``env`` section every preset of ``name`` starts from (so
    that ``--set`` can check its keys); ``configure(config)``, the configuration a run is built
    from, given the resolved one (it may move settings between sections); ``agent_cls(kind,
    recurrent, sampler)``, the agent class for every algorithm of the family (None: the algorithm's
    own choice)."""

    prefix: str | None
    factory: Callable[[str, dict], tuple[Callable[..., Any], dict]]
    traits: Callable[[str], EnvTraits]
    check_id: Callable[[str], None] | None = None
    TrajInfoCls: type | str | None = None
    preset_family: str | Callable[[EnvTraits], str | None] | None = None
    pixels: bool = False
    render_kwargs: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    description: str = ""
    env_defaults: Callable[[str], dict] | None = None
    configure: Callable[[dict], dict] | None = None
    agent_cls: Callable[[str, bool, "SamplerSpec"], type] | None = None

    def env_id(self, name: str) -> str:
        """The full id of ``name`` in this family."""
        return name if self.prefix is None else f"{self.prefix}:{name}"


@dataclasses.dataclass(frozen=True)
class EsStrategySpec:
    """One evolution strategy: ``strategy_cls(x0, seed=, **config["strategy"])``, with its
    presets by action family (``discrete``, ``continuous``), sections ``strategy``,
    ``policy``, ``evaluator``, ``env`` and ``runner``."""

    name: str
    strategy_cls: Callable[..., Any]
    presets: Mapping[str, dict] = dataclasses.field(default_factory=dict)


T = TypeVar("T")


class Registry(Generic[T]):
    """Named specs of one kind, in registration order. A name registered twice is a
    :class:`RegistryError` unless ``replace=True`` (a user overriding rlfast's entry says so
    explicitly); a lookup of an unknown name is a ``ValueError`` listing the known ones."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, T] = {}

    def add(self, name: str, spec: T, replace: bool = False) -> T:
        """Register ``spec`` under ``name``; returns it."""
        if not isinstance(name, str) or not name or name != name.strip():
            raise RegistryError(f"a {self.kind} name must be a non-empty string without "
                                f"surrounding spaces; got {name!r}")
        if name in self._entries and not replace:
            raise RegistryError(f"{self.kind} {name!r} is already registered; pass "
                                f"replace=True to replace it")
        self._entries[name] = spec
        return spec

    def remove(self, name: str) -> T:
        """Unregister ``name`` (tests and plug-ins undoing themselves); returns its spec."""
        return self._entries.pop(name)

    def get(self, name: str, *also: Registry) -> T:
        """The spec registered as ``name``; a ``ValueError`` naming the choices otherwise,
        this registry's and those of the ``also`` registries that a caller accepts too
        (``rlfast train`` takes algorithms and evolution strategies)."""
        try:
            return self._entries[name]
        except KeyError:
            raise self.unknown(name, *also) from None

    def unknown(self, name: str, *also: Registry) -> ValueError:
        """The error for a name not registered here: the choices, with those of ``also``;
        a name one of ``also`` holds is named as what it is."""
        for other in also:
            if name in other:
                return ValueError(f"{name!r} is {_article(other.kind)}, not "
                                  f"{_article(self.kind)}; choose {_article(self.kind)} from "
                                  f"{self.names()}")
        extra = "".join(f" or {_article(other.kind)} from {other.names()}" for other in also)
        return ValueError(f"unknown {self.kind} {name!r}; choose from {self.names()}{extra}")

    def names(self) -> list[str]:
        """The registered names, in registration order."""
        return list(self._entries)

    def __contains__(self, name: object) -> bool:
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(list(self._entries))

    def __len__(self) -> int:
        return len(self._entries)


def _article(kind: str) -> str:
    """``kind`` with its indefinite article: "an algorithm", "a sampler"."""
    return f"{'an' if kind[:1] in 'aeiou' else 'a'} {kind}"


def env_id_help(families: Registry[EnvFamily]) -> str:
    """What an ENV argument takes, one clause per registered env family in registration
    order (``atari:<name>, rlfast's own AtariEnv (atari:pong)``): written from the registry,
    so the help of a command names the families plug-ins added as well as rlfast's own."""
    parts = []
    for key in families:
        family = families.get(key)
        what = family.description or "an env family registered by a plug-in"
        parts.append(what if family.prefix is None else f"{family.prefix}:<name>, {what}")
    return "environment id: " + "; ".join(parts)
