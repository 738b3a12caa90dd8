"""Build the samples buffer from one example step of the environment and the agent.

The example step is also where two startup checks happen: the agent's example action must lie
in the environment's action space (``check_example_action``), and the buffer's ``env_info``
checks every whole ``env_info`` written into it against the example's fields
(``EnvInfoBuffer``), so that an environment whose info keys come and go is named, with the
cure, instead of failing deep inside numpy.
"""
from __future__ import annotations

import warnings
from typing import Any, Iterable

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.samplers.collections import (AgentSamples, AgentSamplesBsv, BatchSpec, EnvSamples,
                                         Samples)
from rlfast.utils.buffer import buffer_from_example, numpify_buffer, torchify_buffer
from rlfast.utils.collections import AttrDict, NamedArrayTuple

__all__ = ["get_example_outputs", "build_samples_buffer", "check_example_action",
           "EnvInfoBuffer"]

_AGENTS_BY_SPACE = ("Choose an agent for this action space: CategoricalPgAgent, DqnAgent (and the "
                    "other DQN-family agents) for Discrete; MultiCategoricalPgAgent for "
                    "MultiDiscrete and MultiBinary; GaussianPgAgent, MujocoFfAgent, DdpgAgent, "
                    "Td3Agent, SacAgent for continuous Box actions.")


def _env_name(env: Any) -> str:
    name = getattr(env, "name", None)
    return name if isinstance(name, str) and name else type(env).__name__


def get_example_outputs(agent, env) -> AttrDict:
    """One reset + step of ``env`` and one ``agent.step``: examples of every sampled field.

    The examples carry no leading dims; they size every buffer (samples, replay) downstream.
    A multi-agent environment (``n_agents`` > 1, :mod:`rlfast.envs.multiagent`) steps every
    agent with a random action, and the examples are its first agent's column.
    """
    n_agents = int(getattr(env, "n_agents", 1))
    observation = env.reset()
    if n_agents > 1:
        action = np.stack([env.action_space.sample() for _ in range(n_agents)])
        observation, reward, done, env_info = env.step(action)
        observation, reward, done, action = observation[0], reward[0], done[0], action[0]
        env_info = type(env_info)(*(np.asarray(v)[0] for v in env_info))
    else:
        action = env.action_space.sample()
        observation, reward, done, env_info = env.step(action)
    reward = np.asarray(reward, dtype=np.float32)
    agent.reset()
    agent_inputs = torchify_buffer(AgentInputs(
        np.asarray(observation) if not hasattr(observation, "_fields") else observation,
        np.asarray(action), reward))
    agent_action, agent_info = agent.step(*agent_inputs)
    agent_info = numpify_buffer(agent_info)
    if agent_info is not None and "prev_rnn_state" in agent_info:
        # Stored per environment as [N, H]: drop the B=1 dim the model added.
        agent_info = agent_info._replace(prev_rnn_state=agent_info.prev_rnn_state[0])
    agent.reset()
    return AttrDict(observation=observation, action=np.asarray(numpify_buffer(agent_action)),
                    reward=reward, done=np.asarray(done, dtype=bool), env_info=env_info,
                    agent_info=agent_info)


def _why_not_in_box(space: Any, action: np.ndarray) -> tuple[str | None, bool]:
    """``(problem, fatal)`` for an action a box space does not contain; ``problem`` is None
    when the space is not a box. Out-of-bounds float actions are not fatal: Gaussian policies
    sample beyond the bounds and many environments clip."""
    shape, low, high = getattr(space, "shape", None), getattr(space, "low", None), \
        getattr(space, "high", None)
    kinds = getattr(space, "value_kinds", None)
    if not isinstance(shape, tuple) or low is None or high is None or kinds is None:
        return None, True
    integer_space = np.dtype(space.dtype).kind in "biu"
    if action.dtype.kind not in kinds or (integer_space and action.dtype.kind not in "biu"):
        held = "integers" if integer_space else "numbers"
        return f"it holds {action.dtype} values, but the space holds {held} ({space.dtype})", True
    if action.shape != shape:
        return f"its shape {action.shape} is not the space's shape {shape}", True
    if action.dtype.kind == "f" and not np.all(np.isfinite(action)):
        return "it is not finite", True
    if integer_space:
        return (f"some entries lie outside the valid values [low, high) = "
                f"[{np.asarray(low).tolist()}, {np.asarray(high).tolist()})"), True
    return (f"some entries lie outside the bounds [low, high] = [{np.asarray(low).tolist()}, "
            f"{np.asarray(high).tolist()}]"), False


def check_example_action(agent: Any, env: Any, action: Any) -> None:
    """Check, once at startup, that ``agent``'s example ``action`` lies in ``env``'s action
    space: its shape, dtype kind and range (bounds for float actions).

    A violation is a ``ValueError`` naming the agent class, the action and the space (a float
    action outside the bounds of a continuous space is only a warning: Gaussian policies
    sample there and many environments clip). Spaces without ``contains`` are not checked.
    """
    action_space = env.action_space
    space = getattr(action_space, "space", action_space)  # a GymSpaceWrapper's rlfast space
    contains = getattr(space, "contains", None)
    if contains is None or contains(action):
        return
    arr = np.asarray(action)
    problem, fatal = _why_not_in_box(space, arr)
    if problem is None:
        problem = f"{type(space).__name__}.contains() is False for it"
    message = (f"{type(agent).__name__} returned the example action {arr.tolist()!r} (shape "
               f"{arr.shape}, dtype {arr.dtype}), which is not in the action space "
               f"{action_space!r} of {_env_name(env)}: {problem}.")
    if not fatal:
        warnings.warn(message + " The environment gets such actions unless it clips them.",
                      UserWarning, stacklevel=3)
        return
    raise ValueError(f"{message} {_AGENTS_BY_SPACE}")


def _short_repr(value: Any, limit: int = 300) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _fields_detail(expected: Iterable[str], got: Iterable[str], path: str) -> str:
    expected, got = tuple(expected), tuple(got)
    missing = [f"{path}{f}" for f in expected if f not in got]
    extra = [f"{path}{f}" for f in got if f not in expected]
    parts = []
    if missing:
        parts.append(f"key(s) {missing} of the example step are missing")
    if extra:
        parts.append(f"key(s) {extra} were not in the example step")
    if not parts:
        parts.append(f"its keys {list(got)} are in another order than the example's "
                     f"{list(expected)}")
    return " and ".join(parts)


def _mismatch_detail(destination: Any, value: Any, loc: Any, path: str = "") -> str | None:
    """Where ``value`` (one step's env_info) differs from the buffer ``destination`` at ``loc``:
    different keys, or a value whose shape differs from the buffer's."""
    fields = getattr(value, "_fields", None)
    if fields is None:
        return None
    if tuple(fields) != tuple(destination._fields):
        return _fields_detail(destination._fields, fields, path)
    for name, dest, v in zip(fields, destination, value):
        if dest is None:
            continue
        if hasattr(v, "_fields"):
            found = _mismatch_detail(dest, v, loc, f"{path}{name}.")
        else:
            dest_shape, shape = np.shape(dest[loc]), np.shape(v)
            found = None if dest_shape == shape else (
                f"key {path + name!r} has shape {shape} here but {dest_shape} in the example step")
        if found:
            return found
    return None


class EnvInfoBuffer(NamedArrayTuple):
    """The samples buffer's ``env_info`` (a ``NamedArrayTuple``) that checks every whole
    ``env_info`` written into it against the example step's fields.

    Each environment instance fixes its env_info layout at its own first step, so an env
    whose info keys (or their shapes) vary can give one instance a layout that differs from
    the example step's; writing it would fail inside numpy ("setting an array element with a
    sequence"). Here it is a ``ValueError`` naming the keys, the environment and the cure
    (``rlfast.envs.EnvInfoWrapper``). Matching writes cost one tuple comparison more.
    """

    def __new__(cls, typename: str, fields: tuple[str, ...], values: Iterable[Any],
                env_name: str = "the environment"):
        self = super().__new__(cls, typename, fields, values)
        object.__setattr__(self, "_env_name", env_name)
        return self

    @classmethod
    def wrap(cls, buffer: NamedArrayTuple, env_name: str) -> "EnvInfoBuffer":
        """The same arrays as ``buffer``, with checked writes that name ``env_name``."""
        return cls(buffer._typename, buffer._fields, tuple(buffer), env_name)

    def _make(self, iterable: Iterable[Any]) -> "EnvInfoBuffer":
        return type(self)(self._typename, self._fields, iterable, self._env_name)

    _new_like = _make

    def __reduce__(self):
        return type(self), (self._typename, self._fields, tuple(self), self._env_name)

    def _mismatch(self, value: Any, loc: Any, detail: str) -> ValueError:
        fields = getattr(value, "_fields", ())
        differing = [f for f in self._fields if f not in fields] + \
            [f for f in fields if f not in self._fields]
        example = ", ".join(f"{f!r}: <default value>" for f in differing) or "key: <default value>"
        return ValueError(
            f"env_info from {self._env_name} does not fit the samples buffer (writing index "
            f"{loc!r}): {detail}. The buffer was sized from one example step of another "
            f"instance of this env, so every instance must report the same info keys, with the "
            f"same shapes, at every step. Make keys present at every step with "
            f"rlfast.envs.EnvInfoWrapper(env, info_example={{{example}}}) (or "
            f"rlfast.envs.make(id, info_example=...)); keep keys whose shape changes out with "
            f"EnvInfoWrapper(env, info_example=..., drop_other_keys=True). This step's "
            f"env_info: {_short_repr(value)}")

    def __setitem__(self, loc: Any, value: Any) -> None:
        fields = getattr(value, "_fields", None)
        if fields is not None and fields != self._fields:
            raise self._mismatch(value, loc, _fields_detail(self._fields, fields, ""))
        try:
            NamedArrayTuple.__setitem__(self, loc, value)
        except (ValueError, TypeError) as err:
            detail = None if fields is None else _mismatch_detail(self, value, loc)
            if detail is None:
                raise
            raise self._mismatch(value, loc, detail) from err


def build_samples_buffer(agent, env, batch_spec: BatchSpec, bootstrap_value: bool = False,
                         agent_shared: bool = True, env_shared: bool = True,
                         n_slots: int | None = None):
    """Allocate the ``[T, B]`` samples buffer; returns (samples_pyt, samples_np, examples).

    ``samples_pyt`` and ``samples_np`` are torch and numpy views of the same memory, which lives
    in OS shared memory when ``*_shared`` so that worker processes write into it directly.
    The agent's example action is checked against the action space first
    (``check_example_action``), so an agent that does not fit the environment fails here, at
    startup, with a message that names both. With ``n_slots`` (the asynchronous samplers'
    double buffer) every array gets a leading ``[n_slots]`` dimension: slot ``k`` is
    ``samples_np[k]``, an ordinary ``[T, B]`` buffer.
    """
    examples = get_example_outputs(agent, env)
    check_example_action(agent, env, examples.action)
    T, B = batch_spec
    dims = (T, B) if n_slots is None else (int(n_slots), T, B)
    action = buffer_from_example(examples.action, dims, agent_shared)
    prev_action = buffer_from_example(examples.action, dims, agent_shared)
    agent_info = buffer_from_example(examples.agent_info, dims, agent_shared)
    if bootstrap_value:
        value_example = np.zeros((), dtype=np.float32)
        lead = (1, B) if n_slots is None else (int(n_slots), 1, B)
        bootstrap = buffer_from_example(value_example, lead, agent_shared)
        agent_buffer = AgentSamplesBsv(action=action, prev_action=prev_action,
                                       agent_info=agent_info, bootstrap_value=bootstrap)
    else:
        agent_buffer = AgentSamples(action=action, prev_action=prev_action, agent_info=agent_info)
    env_info = buffer_from_example(examples.env_info, dims, env_shared)
    if isinstance(env_info, NamedArrayTuple):
        env_info = EnvInfoBuffer.wrap(env_info, _env_name(env))
    env_buffer = EnvSamples(
        observation=buffer_from_example(examples.observation, dims, env_shared),
        reward=buffer_from_example(examples.reward, dims, env_shared),
        prev_reward=buffer_from_example(examples.reward, dims, env_shared),
        done=buffer_from_example(examples.done, dims, env_shared),
        env_info=env_info,
    )
    samples_np = Samples(agent=agent_buffer, env=env_buffer)
    samples_pyt = torchify_buffer(samples_np)
    return samples_pyt, samples_np, examples
