"""Saving and restoring a gymnasium environment's state as plain data, for resumed runs.

A resumed run continues its environments mid-episode only when their whole state can be
written into a snapshot, which is loaded with ``torch.load(weights_only=True)`` and so may
hold plain data only. For most gymnasium environments that written in Python (classic
control, toy text) the state is exactly the plain attributes of the environment and of its
wrappers: ``state`` arrays, counters such as ``TimeLimit._elapsed_steps``, flags, and the
``np_random`` generator. :func:`gym_env_state` walks the wrapper chain and collects those;
it returns None when the innermost environment holds anything else (a physics engine's
data, a Box2D world, an emulator) or a wrapper holds a deque of frames, since restoring only part of
such a state would not continue the episode but corrupt it. The caller then starts fresh episodes
instead.
"""
from __future__ import annotations

from typing import Any

import gymnasium
import numpy as np

__all__ = ["gym_env_state", "set_gym_env_state", "is_plain"]

_GENERATOR_KEY = "__numpy_generator_state__"
_CLASS_KEY = "__class__"  # each layer's class, checked on restore
# Attributes that are configuration, caches or references rather than state.
_SKIPPED = frozenset({"env", "spec", "_cached_spec", "_metadata", "metadata", "_saved_kwargs",
                      "_previous_data", "_action_space", "_observation_space", "action_space",
                      "observation_space", "render_mode", "screen", "clock", "surf", "viewer"})
# Types an environment may hold that carry no episode state (skipped, not a reason to give up).
_INERT_TYPES: tuple = (gymnasium.spaces.Space, gymnasium.envs.registration.EnvSpec, type)


def is_plain(value: Any) -> bool:
    """True for data a ``weights_only`` snapshot can hold: None, bool, int, float, str,
    bytes, numeric numpy arrays and scalars, and lists, tuples and str-keyed dicts of them."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return True
    if isinstance(value, np.ndarray):
        return not value.dtype.hasobject
    if isinstance(value, np.generic):
        return not isinstance(value, np.object_)
    if type(value) in (list, tuple):
        return all(is_plain(v) for v in value)
    if type(value) is dict:
        return all(isinstance(k, str) and is_plain(v) for k, v in value.items())
    return False


def _copy(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        return value.copy()
    if type(value) in (list, tuple):
        return type(value)(_copy(v) for v in value)
    if type(value) is dict:
        return {k: _copy(v) for k, v in value.items()}
    return value


def _layers(env: gymnasium.Env) -> list:
    layers = [env]
    while isinstance(layers[-1], gymnasium.Wrapper):
        layers.append(layers[-1].env)
    return layers


def _class_name(layer: Any) -> str:
    return f"{type(layer).__module__}.{type(layer).__qualname__}"


def _layer_state(layer: Any) -> dict | None:
    state = {_CLASS_KEY: _class_name(layer)}
    for name, value in vars(layer).items():
        if name in _SKIPPED:
            continue
        if isinstance(value, np.random.Generator):
            state[name] = {_GENERATOR_KEY: value.bit_generator.state}
        elif is_plain(value):
            state[name] = _copy(value)
        elif isinstance(value, _INERT_TYPES):
            continue
        else:
            return None  # state we cannot write down (a physics engine, a deque of frames)
    return state


def gym_env_state(env: gymnasium.Env) -> list | None:
    """The plain-data state of ``env`` and every wrapper around it (one dict per layer,
    outermost first), or None when any layer holds state that is not plain data."""
    layers = _layers(env)
    states = []
    for layer in layers:
        state = _layer_state(layer)
        if state is None:
            return None
        states.append(state)
    return states


def set_gym_env_state(env: gymnasium.Env, states: list) -> None:
    """Restore what :func:`gym_env_state` returned into an environment built the same way
    (same id, arguments and wrappers); a different wrapper chain is refused by name."""
    layers = _layers(env)
    saved = [state.get(_CLASS_KEY, "?") for state in states]
    actual = [_class_name(layer) for layer in layers]
    if saved != actual:
        raise ValueError(f"saved environment state is of the wrapper chain {saved}, but the "
                         f"environment is {actual}: was it made with another id or "
                         f"arguments?")
    for layer, state in zip(layers, states):
        for name, value in state.items():
            if name == _CLASS_KEY:
                continue
            if isinstance(value, dict) and _GENERATOR_KEY in value:
                generator = getattr(layer, name, None)
                if not isinstance(generator, np.random.Generator):
                    generator = np.random.Generator(
                        getattr(np.random, value[_GENERATOR_KEY]["bit_generator"])())
                generator.bit_generator.state = value[_GENERATOR_KEY]
                setattr(layer, name, generator)
            else:
                setattr(layer, name, _copy(value))
