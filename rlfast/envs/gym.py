"""Run gymnasium environments under the rlfast ``Env`` interface.

The samplers pre-allocate buffer memory for every ``env_info`` field, so ``env_info`` must be a
namedtuple whose fields, shapes and dtypes never change. ``GymEnvWrapper`` fixes that layout
from the info dict of the first step after construction and then holds every later step to
it; ``EnvInfoWrapper`` helps environments whose info keys come and go (and drops keys whose
values change shape). Warnings and errors about env_info name the key, the env and the cure.
"""
from __future__ import annotations

import keyword
import warnings
from collections.abc import Mapping
from typing import Any

import gymnasium
import numpy as np
from gymnasium.utils import RecordConstructorArgs
from gymnasium.wrappers import TimeLimit

from rlfast.envs.base import Env, EnvSpaces, EnvStep
from rlfast.envs.state import gym_env_state, set_gym_env_state
from rlfast.spaces.gym_wrapper import GymSpaceWrapper
from rlfast.utils.collections import NamedTupleSchema

# Keys gymnasium's vector environments and autoreset wrappers add; never per-step data.
_VECTOR_KEYS = frozenset({"final_observation", "final_info", "final_obs"})
# Signed and unsigned integers count as one kind: a later value is cast to the first dtype.
_KIND_CLASS = {"b": "bool", "i": "integer", "u": "integer", "f": "float", "c": "complex"}


def _skipped_silently(key: Any) -> bool:
    return isinstance(key, str) and (key.startswith("_") or key in _VECTOR_KEYS)


_CURE = ("make it present at every step with rlfast.envs.EnvInfoWrapper(env, "
         "info_example={{{key!r}: <default value>}}) (or rlfast.envs.make(id, info_example=...))")


class _InfoLayout:
    """The fixed field layout of ``env_info``, built from the first step's info dict.

    Each field is ``(key, dtype, shape, kind_class, nested)``; ``nested`` is an
    ``_InfoLayout`` for dict values (which become nested namedtuples). Converting a step's
    info walks this precomputed list once, so the per-step cost is a dict lookup and an
    ``np.asarray`` per field, plus one set difference to detect new keys. ``env_name`` names
    the environment in warnings and errors."""

    def __init__(self, info: Mapping, typename: str, env_name: str = "the environment",
                 path: str = "", trailing: tuple = ()) -> None:
        self._path = path
        self._env_name = env_name
        self._fields: list = []
        self._known = frozenset(info.keys()) | frozenset(trailing)
        self._warned: set = set()
        for key, value in info.items():
            if _skipped_silently(key) or key in trailing:
                continue
            where = f"{path}{key}"
            if not isinstance(key, str) or not key.isidentifier() or keyword.iskeyword(key):
                self._warn(f"env_info key {where!r} of {env_name} is not a valid namedtuple "
                           f"field name; it is ignored at every step")
                continue
            if isinstance(value, Mapping):
                nested = _InfoLayout(value, f"{typename}_{key}", env_name, f"{where}.")
                if not nested._fields:
                    self._warn(f"env_info key {where!r} of {env_name} holds a dict with no "
                               f"numeric entries; it is ignored at every step")
                    continue
                self._fields.append((key, None, None, None, nested))
                continue
            arr = _as_numeric(value)
            if arr is None:
                self._warn(f"env_info key {where!r} of {env_name} has non-numeric value "
                           f"{value!r} (type {type(value).__name__}) at the first step; it is "
                           f"ignored at every step")
                continue
            self._fields.append((key, arr.dtype, arr.shape, _KIND_CLASS[arr.dtype.kind], None))
        names = [field[0] for field in self._fields] + list(trailing)
        self.schema = NamedTupleSchema(typename, names)
        self._make = self.schema._make

    @staticmethod
    def _warn(message: str) -> None:
        warnings.warn(message, UserWarning, stacklevel=4)

    def zero(self) -> Any:
        """A namedtuple of zeros for this layout (trailing fields excluded: nested only)."""
        return self._make(self._zero_value(f) for f in self._fields)

    @staticmethod
    def _zero_value(field: tuple) -> Any:
        _, dtype, shape, _, nested = field
        if nested is not None:
            return nested.zero()
        zero = np.zeros(shape, dtype=dtype)
        return zero[()] if shape == () else zero

    def convert(self, info: Mapping, *trailing_values: Any) -> Any:
        """Turn one step's info dict into this layout's namedtuple (trailing values last)."""
        if not info:
            if not self._fields:  # the common case of classic control: trailing values only
                return self._make(trailing_values)
            info = {}
        elif not self._known.issuperset(info):  # no set built at steps without new keys
            self._warn_new_keys(info.keys() - self._known)
        values = []
        append = values.append
        for field in self._fields:
            key, dtype, shape, kind_class, nested = field
            if key not in info:
                self._warn_missing(key)
                append(self._zero_value(field))
                continue
            value = info[key]
            if nested is not None:
                if not isinstance(value, Mapping):
                    raise ValueError(f"env_info key {self._path + key!r} of {self._env_name} was "
                                     f"a dict at the first step but is {type(value).__name__} "
                                     f"{value!r} now; {self._keep_out(key)}")
                append(nested.convert(value))
                continue
            arr = np.asarray(value)
            if arr.shape != shape or _KIND_CLASS.get(arr.dtype.kind) != kind_class:
                raise ValueError(
                    f"env_info key {self._path + key!r} of {self._env_name} changed from shape "
                    f"{shape} dtype {dtype} at the first step to shape {arr.shape} dtype "
                    f"{arr.dtype}; env_info fields must keep their shape and dtype kind at every "
                    f"step. Give it one shape at every step (e.g. pad it), or "
                    f"{self._keep_out(key)}"
                )
            if arr.dtype != dtype:
                arr = arr.astype(dtype)
            append(arr[()] if shape == () else arr)
        values.extend(trailing_values)
        return self._make(values)

    def _keep_out(self, key: str) -> str:
        top = (self._path + key).split(".")[0]
        return (f"keep {top!r} out of env_info with rlfast.envs.EnvInfoWrapper(env, "
                f"info_example={{...the keys you need...}}, drop_other_keys=True)")

    def _warn_missing(self, key: str) -> None:
        if key in self._warned:
            return
        self._warned.add(key)
        self._warn(f"env_info key {self._path + key!r} of {self._env_name} was present at the "
                   f"first step but is missing now, so it is filled with zeros here. Info keys "
                   f"that come and go can give other instances of this env a different env_info "
                   f"layout from the samples buffer's (an error when their env_info is written); "
                   + _CURE.format(key=key))

    def _warn_new_keys(self, new_keys: set) -> None:
        for key in new_keys:
            if key in self._warned or _skipped_silently(key):
                continue
            self._warned.add(key)
            self._warn(f"env_info key {self._path}{key!r} of {self._env_name} was not present at "
                       f"the first step, so it has no buffer space and is dropped; "
                       + _CURE.format(key=key))


def _as_numeric(value: Any) -> np.ndarray | None:
    """``value`` as a numeric numpy array, or None if it is not numeric."""
    if value is None or isinstance(value, (str, bytes)):
        return None
    try:
        arr = np.asarray(value)
    except (ValueError, TypeError):  # ragged sequences
        return None
    return arr if arr.dtype.kind in _KIND_CLASS else None


def _env_name(env: Any) -> str:
    """The env's gymnasium id, else the class name of the innermost env."""
    try:
        spec = env.spec
    except Exception:  # a wrapper whose spec cannot be built
        spec = None
    env_id = getattr(spec, "id", None)
    return str(env_id) if env_id else type(getattr(env, "unwrapped", env)).__name__


def find_horizon(env: Any) -> int | None:
    """Max episode steps of the first ``TimeLimit`` in the wrapper chain, else the spec's."""
    layer = env
    while layer is not None:
        if isinstance(layer, TimeLimit):
            return int(layer._max_episode_steps)
        layer = getattr(layer, "env", None)
    return _spec_horizon(getattr(env, "spec", None))


def _spec_horizon(spec: Any) -> int | None:
    """The ``max_episode_steps`` of a gymnasium ``EnvSpec`` (or None) as an int, else None."""
    steps = getattr(spec, "max_episode_steps", None)
    return None if steps is None else int(steps)


def _box_clip(space: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``(low, high)`` to clip actions of a float ``Box`` space into; None for other spaces
    and for a Box that is unbounded everywhere."""
    if not isinstance(space, gymnasium.spaces.Box) or np.dtype(space.dtype).kind != "f":
        return None
    low, high = np.asarray(space.low), np.asarray(space.high)
    if not (np.isfinite(low).any() or np.isfinite(high).any()):
        return None
    return low, high


class GymEnvWrapper(Env):
    """Runs a gymnasium environment as an rlfast ``Env``. Spaces are wrapped with
    ``GymSpaceWrapper`` (dict observations become namedtuples, float64 becomes float32 when
    ``force_float32``). ``step`` reverts the action to gym form, steps, and returns
    ``EnvStep(observation, reward, done, env_info)`` with ``done = terminated or truncated``
    and ``env_info.timeout = truncated and not terminated``, so algorithms can bootstrap
    through time-limit cuts. ``env_info`` fields are fixed at the first step after
    construction (see the module docstring). ``seed(s)`` applies at the next ``reset``,
    which is where gymnasium takes seeds.

    With ``final_observation=True`` (array observations only), ``env_info`` also carries
    ``final_observation``: the observation the step returned when it ended the episode (zeros
    on other steps). The sampler resets the env on ``done``, so this is the only record of the
    state a time limit cut the episode in; time-limit replay buffers bootstrap from it.

    With ``flatten_observation=True`` observations are flattened into one float vector
    (``gymnasium.spaces.flatten``; Dict entries in the Dict space's key order, Discrete ones
    one-hot): how dict and tuple observations reach the MLP agents.

    With ``clip_action=True`` (the default) actions of a ``Box`` action space are clipped to
    its bounds before the env steps, as gymnasium's ``ClipAction`` wrapper and SB3 do: a
    Gaussian policy's samples are stored as drawn (their likelihood ratios stay unbiased) and
    only the env sees them clipped."""

    def __init__(self, env: gymnasium.Env, act_null_value: Any = 0, obs_null_value: Any = 0,
                 force_float32: bool = True, final_observation: bool = False,
                 flatten_observation: bool = False, clip_action: bool = True) -> None:
        if not isinstance(env, gymnasium.Env):
            raise TypeError(f"GymEnvWrapper needs a gymnasium.Env, got {type(env).__name__}")
        self.env = env
        self._name = _env_name(env)
        self._action_space = GymSpaceWrapper(env.action_space, null_value=act_null_value,
                                             name="act", force_float32=force_float32)
        self._observation_space = GymSpaceWrapper(env.observation_space,
                                                  null_value=obs_null_value, name="obs",
                                                  force_float32=force_float32,
                                                  flatten=flatten_observation)
        self._revert_action = self._action_space.revert
        self._action_clip = _box_clip(env.action_space) if clip_action else None
        self._convert_observation = self._observation_space.convert
        self._info_layout: _InfoLayout | None = None
        self._final_zero = None
        if final_observation:
            null = self._observation_space.null_value()
            zero = None if isinstance(null, tuple) else np.asarray(null)
            if zero is None or zero.dtype.kind not in "biuf":
                raise ValueError(f"final_observation=True needs an array observation space; got "
                                 f"{env.observation_space!r}")
            self._final_zero = np.zeros_like(zero)
        self._pending_seed: int | None = None
        self._horizon = find_horizon(env)

    def step(self, action: Any) -> EnvStep:
        """Step the gym env with ``action`` (rlfast form); see the class docstring."""
        gym_action = self._revert_action(action)
        if self._action_clip is not None:
            # A new array: the reverted action may be a view of the sampler's buffer, which
            # keeps the action as drawn, and an env may hold on to the array it is given.
            gym_action = np.clip(gym_action, *self._action_clip)
        obs, reward, terminated, truncated, info = self.env.step(gym_action)
        terminated = bool(terminated)
        truncated = bool(truncated)
        layout = self._info_layout
        observation = self._convert_observation(obs)
        done = terminated or truncated
        if self._final_zero is None:
            if layout is None:
                layout = self._info_layout = _InfoLayout(info or {}, "EnvInfo", self._name,
                                                         trailing=("timeout",))
            env_info = layout.convert(info, truncated and not terminated)
        else:
            if layout is None:
                layout = self._info_layout = _InfoLayout(
                    info or {}, "EnvInfo", self._name, trailing=("timeout", "final_observation"))
            env_info = layout.convert(info, truncated and not terminated,
                                      observation if done else self._final_zero)
        return EnvStep(observation, float(reward), done, env_info)

    def reset(self) -> Any:
        """Reset the gym env (with the pending seed, if ``seed`` was called) and return the
        converted first observation."""
        if self._pending_seed is not None:
            obs, _ = self.env.reset(seed=self._pending_seed)
            self._pending_seed = None
        else:
            obs, _ = self.env.reset()
        return self._convert_observation(obs)

    def seed(self, seed: int | None) -> None:
        """Seed the next ``reset`` and the gym action space (for gym-side action sampling)."""
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int or None, got {seed!r}")
        self._pending_seed = None if seed is None else int(seed)
        if seed is not None:
            self.env.action_space.seed(int(seed))

    def render(self) -> np.ndarray:
        """The gymnasium environment's frame; it must have been made with
        ``render_mode="rgb_array"`` (``rlfast watch`` does so)."""
        mode = getattr(self.env, "render_mode", None)
        if mode != "rgb_array":
            raise ValueError(f"{self._name} was made with render_mode={mode!r}; frames need "
                             f"render_mode='rgb_array' (pass it in the env kwargs)")
        return np.asarray(self.env.render())

    def get_state(self) -> dict | None:
        """The plain-data state of the gymnasium environment and its wrappers (see
        ``rlfast.envs.state``), with the seed still to apply; None when the environment
        holds state that is not plain data (MuJoCo, Box2D, frame-stacking wrappers)."""
        layers = gym_env_state(self.env)
        if layers is None:
            return None
        return dict(layers=layers, pending_seed=self._pending_seed)

    def set_state(self, state: dict) -> None:
        """Restore :meth:`get_state`'s output into an environment made the same way."""
        set_gym_env_state(self.env, state["layers"])
        self._pending_seed = state["pending_seed"]

    @property
    def horizon(self) -> int | None:
        """The time limit (``max_episode_steps``) of the wrapped env, or None."""
        return self._horizon

    @property
    def name(self) -> str:
        """The gymnasium id of the wrapped env (its class name when it has no spec); error
        messages use it."""
        return self._name

    def close(self) -> None:
        """Close the wrapped gym env."""
        self.env.close()

    def __repr__(self) -> str:
        return f"GymEnvWrapper({self.env!r})"


def _infill(info: Mapping, example: Mapping) -> dict:
    """Copy of ``info`` with every key of ``example`` present (nested dicts recursively)."""
    filled = dict(info) if info is not None else {}
    for key, default in example.items():
        if key not in filled:
            filled[key] = _infill({}, default) if isinstance(default, Mapping) else default
        elif isinstance(default, Mapping) and isinstance(filled[key], Mapping):
            filled[key] = _infill(filled[key], default)
    return filled


class EnvInfoWrapper(gymnasium.Wrapper, RecordConstructorArgs):
    """A gymnasium wrapper that puts every key of ``info_example`` into the info dict of every
    ``step`` (and ``reset``), using the example's value where the env left a key out. Put it
    under ``GymEnvWrapper`` when an env reports some info keys only on some steps (e.g. at
    episode end), so that those keys exist at every step, in every instance of the env, and
    get buffer space. With ``drop_other_keys=True`` the info dict keeps only the example's
    (top-level) keys, which removes keys whose values change shape."""

    def __init__(self, env: gymnasium.Env, info_example: Mapping,
                 drop_other_keys: bool = False) -> None:
        if not isinstance(info_example, Mapping):
            raise TypeError(f"info_example must be a dict of default info values, got "
                            f"{type(info_example).__name__}")
        RecordConstructorArgs.__init__(self, info_example=dict(info_example),
                                       drop_other_keys=bool(drop_other_keys))
        gymnasium.Wrapper.__init__(self, env)
        self.info_example = dict(info_example)
        self.drop_other_keys = bool(drop_other_keys)

    def _fill(self, info: Mapping) -> dict:
        filled = _infill(info, self.info_example)
        if self.drop_other_keys:
            filled = {key: filled[key] for key in self.info_example}
        return filled

    def step(self, action: Any) -> tuple:
        """Step the env; the info dict holds every key of ``info_example``."""
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated, truncated, self._fill(info)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple:
        """Reset the env; the info dict holds every key of ``info_example``."""
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, self._fill(info)


def _gym_make(id: Any, **kwargs: Any) -> gymnasium.Env:
    """``gymnasium.make(id, **kwargs)``; its errors name the id."""
    try:
        return gymnasium.make(id, **kwargs)
    except gymnasium.error.Error as err:
        message = f"rlfast.envs.make could not make gymnasium environment {id!r}: {err}"
        try:
            wrapped = type(err)(message)
        except Exception:  # an error type with an unusual constructor
            raise gymnasium.error.Error(message) from err
        raise wrapped from err


def gym_spaces(id: Any, **kwargs: Any) -> EnvSpaces:
    """The gymnasium (not rlfast) observation and action spaces of ``gymnasium.make(id,
    **kwargs)``, as ``EnvSpaces``; the env is closed again. For choosing an agent before any
    wrapping (the presets use it), so spaces rlfast cannot wrap are still reported."""
    env = _gym_make(id, **kwargs)
    try:
        return EnvSpaces(observation=env.observation_space, action=env.action_space)
    finally:
        env.close()


def gym_horizon(id: Any) -> int | None:
    """The time limit ``gymnasium.make(id)`` applies: its registered ``max_episode_steps``,
    or None for an id registered without one or unknown to the registry (nothing is made)."""
    try:
        return _spec_horizon(gymnasium.spec(id))
    except gymnasium.error.Error:
        return None


def make(id: Any, info_example: Mapping | None = None, seed: int | None = None,
         final_observation: bool = False, flatten_observation: bool = False,
         **kwargs: Any) -> GymEnvWrapper:
    """``gymnasium.make(id, **kwargs)``, wrapped in ``EnvInfoWrapper(info_example)`` if one is
    given, then in ``GymEnvWrapper`` (``final_observation`` and ``flatten_observation`` passed
    on); seeded with ``seed`` (applied at the first reset). Use as the ``EnvCls`` of a
    sampler, e.g. ``env_kwargs=dict(id="CartPole-v1")``."""
    return _wrap(_gym_make(id, **kwargs), info_example, seed, final_observation,
                 flatten_observation)


def make_with(make_env: Any, name: str, info_example: Mapping | None = None,
              seed: int | None = None, final_observation: bool = False,
              flatten_observation: bool = False, **kwargs: Any) -> GymEnvWrapper:
    """``make_env(name, **kwargs)`` (a gymnasium environment from a registered env family's
    maker), wrapped and seeded as :func:`make` wraps ``gymnasium.make``."""
    env = make_env(name, **kwargs)
    if not isinstance(env, gymnasium.Env):
        raise TypeError(f"{getattr(make_env, '__qualname__', make_env)}({name!r}) returned "
                        f"{type(env).__name__}, not a gymnasium.Env")
    return _wrap(env, info_example, seed, final_observation, flatten_observation)


def _wrap(env: gymnasium.Env, info_example: Mapping | None, seed: int | None,
          final_observation: bool, flatten_observation: bool) -> GymEnvWrapper:
    if info_example is not None:
        env = EnvInfoWrapper(env, info_example)
    wrapper = GymEnvWrapper(env, final_observation=final_observation,
                            flatten_observation=flatten_observation)
    if seed is not None:
        wrapper.seed(seed)
    return wrapper
