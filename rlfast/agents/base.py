"""Agent base classes: the interface between sampler, neural network model and algorithm.

An agent owns the model, its device, its policy and its state (and, optionally, the shared-memory
model its sampler workers act with). Samplers call ``step``/``reset``/``reset_one``; algorithms
call ``__call__`` on training data and read ``parameters()``; runners call ``to_device`` and the
mode switches. Moving parameters between processes is ``rlfast.agents.param_sharing``'s job.
"""
from __future__ import annotations

from abc import ABC, abstractmethod

import numpy as np
import torch

from rlfast.agents.recurrent import (AlternatingRecurrentAgentMixin, RecurrentAgentMixin,
                                     RnnStateStore, rnn_state_for_storage, stored_rnn_state)
from rlfast.models.utils import strip_ddp_state_dict
from rlfast.utils.buffer import buffer_to
from rlfast.utils.collections import namedarraytuple

__all__ = ["AgentInputs", "AgentStep", "BaseAgent", "RandomAgent", "RecurrentAgentMixin",
           "AlternatingRecurrentAgentMixin", "rnn_state_for_storage", "stored_rnn_state",
           "array_observation_shape"]

AgentInputs = namedarraytuple("AgentInputs", ["observation", "prev_action", "prev_reward"])
AgentStep = namedarraytuple("AgentStep", ["action", "agent_info"])


def array_observation_shape(space, agent_name: str) -> tuple[int, ...]:
    """The shape of an array observation space, for models that read one array.

    A dict or tuple observation space (a ``Composite``, whose shape is a namedtuple of shapes)
    is a ``TypeError`` that names the space and the cure: flatten it into one vector with
    ``rlfast.envs.make(..., flatten_observation=True)`` (the presets do so for MLP agents).
    """
    shape = getattr(space, "shape", None)
    if shape is None or hasattr(shape, "_fields") or not all(
            isinstance(d, (int, np.integer)) for d in shape):
        raise TypeError(
            f"{agent_name} needs an array observation space, got {space!r}. Flatten dict or "
            f"tuple observations into one vector: rlfast.envs.make(id, flatten_observation=True) "
            f"(or GymEnvWrapper(env, flatten_observation=True)).")
    return tuple(int(d) for d in shape)


class BaseAgent(ABC):
    """Holds one model (``ModelCls(**env_kwargs, **model_kwargs)``) and moves it between roles.

    Constructor arguments are saved; the model is built in :meth:`initialize`, once the
    environment spaces are known. Subclasses define ``step`` (abstract here), ``__call__``
    and, for actor-critic agents, ``value``.  With a recurrent mixin the agent keeps the
    sampler's recurrent state in ``rnn_states`` (see ``rlfast.agents.recurrent``).
    """

    recurrent = False
    alternating = False
    rnn_groups = 1  # recurrent states kept (the alternating mixin keeps two)
    trained_model_names: tuple[str, ...] = ("model",)  # wrapped in DDP for multi-rank training

    def __init__(self, ModelCls: type | None = None, model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None):
        self.ModelCls = ModelCls
        self.model_kwargs = dict(model_kwargs or {})
        self.initial_model_state_dict = initial_model_state_dict
        self.model: torch.nn.Module | None = None
        self.shared_model: torch.nn.Module | None = None
        self.distribution = None
        self.device = torch.device("cpu")
        self.env_spaces = None
        self.env_model_kwargs: dict = {}
        self._mode: str | None = None
        self.rnn_states = RnnStateStore(self.rnn_groups) if self.recurrent else None

    # ---- construction -------------------------------------------------------------------
    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """Model keyword arguments that depend on the environment (e.g. observation shape)."""
        return {}

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: list | None = None) -> None:
        """Build the model; with ``share_memory`` its parameters live in OS shared memory so
        forked sampler workers always see the latest values without copying."""
        if self.ModelCls is None:
            raise ValueError(f"{type(self).__name__} needs a ModelCls")
        self.env_spaces = env_spaces
        self.env_model_kwargs = self.make_env_to_model_kwargs(env_spaces)
        self.model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        if self.initial_model_state_dict is not None:
            self.model.load_state_dict(self.initial_model_state_dict)
        if share_memory:
            self.model.share_memory()
            self.shared_model = self.model
        self.share_memory = share_memory
        self.global_B = global_B
        self.env_ranks = env_ranks

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Move the model to ``cuda:cuda_idx``; a shared CPU model is kept for the workers."""
        if cuda_idx is None:
            return
        if self.shared_model is not None:
            self.model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
            self.model.load_state_dict(self.shared_model.state_dict())
        self.device = torch.device("cuda", index=cuda_idx)
        self.model.to(self.device)

    def on_models_replaced(self) -> None:
        """Called by :mod:`rlfast.agents.param_sharing` after it replaced model attributes
        (wrapped or unwrapped them in DistributedDataParallel): drop anything cached about
        the old module objects. Nothing is cached here."""

    # ---- parameters -----------------------------------------------------------------------
    def parameters(self):
        """The model's parameters (what the algorithm optimizes)."""
        return self.model.parameters()

    def state_dict(self) -> dict:
        """The model's state dict, without a DistributedDataParallel ``module.`` prefix."""
        return strip_ddp_state_dict(self.model.state_dict())

    def load_state_dict(self, state_dict: dict) -> None:
        """Load a (possibly DDP-prefixed) model state dict."""
        model = self.model.module if hasattr(self.model, "module") else self.model
        model.load_state_dict(strip_ddp_state_dict(state_dict))

    # ---- modes ----------------------------------------------------------------------------
    def _set_training(self, training: bool) -> None:
        # Module.train() walks every submodule (~40 us for a small MLP actor-critic, twice per
        # iteration of an on-policy runner), so only switch when the flag changes, and when no
        # module overrides train(), set the flags on a list of the modules made once per model
        # (a model's modules are fixed once the agent is initialized).
        model = self.model
        if model.training == training:
            return
        cached = self.__dict__.get("_mode_modules")
        if cached is None or cached[0] is not model:
            modules = list(model.modules())
            plain = all(type(m).train is torch.nn.Module.train for m in modules)
            cached = self._mode_modules = (model, modules if plain else None)
        if cached[1] is None:
            model.train(training)
        else:
            for module in cached[1]:
                module.__dict__["training"] = training

    def _switch_mode(self, mode: str, training: bool) -> None:
        if self.rnn_states is not None:  # stash / restore the sampling state
            self.rnn_states.switch_mode(self._mode, mode)
        self._set_training(training)
        self._mode = mode

    def train_mode(self, itr: int) -> None:
        """Switch to training (the algorithm's forward passes, with gradient)."""
        self._switch_mode("train", training=True)

    def sample_mode(self, itr: int) -> None:
        """Switch to sampling (exploratory actions for training data)."""
        self._switch_mode("sample", training=False)

    def eval_mode(self, itr: int) -> None:
        """Switch to evaluation (e.g. greedy or low-epsilon actions)."""
        self._switch_mode("eval", training=False)

    # ---- sampler hooks (recurrent agents keep per-environment state) ------------------------
    @abstractmethod
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Actions (and agent_info) for one step of every environment; CPU tensors in and out."""

    def reset(self) -> None:
        """Called by samplers when all environments reset: forget the recurrent state."""
        if self.rnn_states is not None:
            self.rnn_states.clear()

    def reset_one(self, idx: int) -> None:
        """Called by samplers when environment ``idx`` resets: zero its recurrent state."""
        if self.rnn_states is not None:
            self.rnn_states.zero_env(idx)

    @property
    def prev_rnn_state(self):
        """The recurrent state the next step starts from (``None``: zeros; always ``None`` for
        feedforward agents)."""
        return None if self.rnn_states is None else self.rnn_states.current

    def advance_rnn_state(self, new_rnn_state) -> None:
        """Keep the state a recurrent step returned for the next step (of the next group)."""
        self.rnn_states.advance(new_rnn_state)

    def collector_initialize(self, global_B: int = 1, env_ranks: list | None = None) -> None:
        """Called in each sampler worker with its environments' ranks; nothing to do here."""

    # ---- settings the algorithm gives the agent after sampler workers forked ----------------
    def sampling_state(self) -> dict:
        """Attributes that steer sampling and are set by the algorithm's ``initialize`` (which
        runs after parallel samplers fork their workers' agent copies); the parallel samplers
        send them with every batch command so the workers' agents follow the master's."""
        return {}

    def load_sampling_state(self, state: dict) -> None:
        """Apply a ``sampling_state()`` received from the master."""
        for name, value in state.items():
            setattr(self, name, value)

    def to_model_inputs(self, *inputs) -> tuple:
        """``inputs`` moved to the model's device."""
        return buffer_to(inputs, device=self.device)


class RandomAgent(BaseAgent):
    """Uniformly random actions from the action space; no model, no agent_info.

    Used as a baseline and by sampler benchmarks, where it measures pure environment and
    sampling throughput.
    """

    def __init__(self, **kwargs):
        super().__init__(ModelCls=None, **kwargs)

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: list | None = None) -> None:
        """Keep the spaces; the model is an empty module, so the mode switches still work."""
        self.env_spaces = env_spaces
        self.model = torch.nn.Module()  # parameter-free, so the mode switches still work
        self.share_memory = share_memory

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Only record the device: there is no model to move."""
        if cuda_idx is not None:
            self.device = torch.device("cuda", index=cuda_idx)

    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """One uniform action per environment; the leading dims are those of ``prev_reward``."""
        lead = tuple(prev_reward.shape)
        space = self.env_spaces.action
        n = getattr(space, "n", None)
        if isinstance(n, (int, np.integer)) and tuple(space.shape) == ():
            # Discrete: one vectorized draw from numpy's global RNG (seeded by set_seed).
            low = int(np.asarray(space.low)) if getattr(space, "low", None) is not None else 0
            action = torch.from_numpy(np.random.randint(low, low + int(n), size=lead)
                                      .astype(space.dtype))
        else:
            samples = [np.asarray(space.sample()) for _ in range(int(np.prod(lead, dtype=int)))]
            action = torch.as_tensor(np.stack(samples).reshape(lead + samples[0].shape)
                                     if lead else samples[0])
        return AgentStep(action=action, agent_info=None)

    def value(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """Zeros with the leading dims of ``prev_reward`` (a random agent has no critic)."""
        lead = prev_reward.shape
        return torch.zeros(lead)

    def state_dict(self) -> dict:
        """Empty: a random agent has no parameters."""
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        """Nothing to load."""
