"""Agent base classes: the interface between sampler, neural network model and algorithm.

An agent owns the model, its device and (optionally) its shared-memory copy for sampler workers.
Samplers call ``step``/``reset``/``reset_one``; algorithms call ``__call__`` on training data and
read ``parameters()``; runners call ``to_device``, ``data_parallel`` and the mode switches.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlfast.models.utils import strip_ddp_state_dict
from rlfast.utils.buffer import buffer_func, buffer_method, buffer_to
from rlfast.utils.collections import namedarraytuple

AgentInputs = namedarraytuple("AgentInputs", ["observation", "prev_action", "prev_reward"])
AgentStep = namedarraytuple("AgentStep", ["action", "agent_info"])

_MODES = ("train", "sample", "eval")


class BaseAgent:
    """Holds one model (``ModelCls(**env_kwargs, **model_kwargs)``) and moves it between roles.

    Constructor arguments are saved; the model is built in :meth:`initialize`, once the
    environment spaces are known. Subclasses define ``step``, ``__call__`` and, for
    actor-critic agents, ``value``.
    """

    recurrent = False
    alternating = False

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

    def data_parallel(self) -> torch.device:
        """Wrap the model in DistributedDataParallel (torch.distributed must be initialized)."""
        if self.device.type == "cpu":
            self.model = torch.nn.parallel.DistributedDataParallel(self.model)
        else:
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.model, device_ids=[self.device.index], output_device=self.device.index)
        return self.device

    def async_cpu(self, share_memory: bool = True) -> None:
        """Give the sampler its own CPU model, separate from the optimizer's shared one."""
        if self.device.type != "cpu":
            return
        self.shared_model = self.model
        self.model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        self.model.load_state_dict(self.shared_model.state_dict())
        if share_memory:
            self.model.share_memory()

    # ---- parameters -----------------------------------------------------------------------
    def parameters(self):
        return self.model.parameters()

    def state_dict(self) -> dict:
        return strip_ddp_state_dict(self.model.state_dict())

    def load_state_dict(self, state_dict: dict) -> None:
        model = self.model.module if hasattr(self.model, "module") else self.model
        model.load_state_dict(strip_ddp_state_dict(state_dict))

    def sync_shared_memory(self) -> None:
        """Copy trained parameters into the shared CPU model (a no-op when they are the same)."""
        if self.shared_model is not None and self.shared_model is not self.model:
            self.shared_model.load_state_dict(self.state_dict())

    # ---- modes ----------------------------------------------------------------------------
    def _set_training(self, training: bool) -> None:
        # Module.train() walks every submodule; runners switch modes several times per
        # iteration, so only walk when the flag changes.
        if self.model.training != training:
            self.model.train(training)

    def train_mode(self, itr: int) -> None:
        self._set_training(True)
        self._mode = "train"

    def sample_mode(self, itr: int) -> None:
        self._set_training(False)
        self._mode = "sample"

    def eval_mode(self, itr: int) -> None:
        self._set_training(False)
        self._mode = "eval"

    # ---- sampler hooks (feedforward agents keep no per-env state) -------------------------
    def reset(self) -> None:
        pass

    def reset_one(self, idx: int) -> None:
        pass

    def collector_initialize(self, global_B: int = 1, env_ranks: list | None = None) -> None:
        pass

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
        self.env_spaces = env_spaces
        self.model = torch.nn.Module()  # parameter-free, so the mode switches still work
        self.share_memory = share_memory

    def to_device(self, cuda_idx: int | None = None) -> None:
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
            action = torch.from_numpy(np.random.randint(low, low + int(n), size=lead).astype(space.dtype))
        else:
            samples = [np.asarray(space.sample()) for _ in range(int(np.prod(lead, dtype=int)))]
            action = torch.as_tensor(np.stack(samples).reshape(lead + samples[0].shape)
                                     if lead else samples[0])
        return AgentStep(action=action, agent_info=None)

    def value(self, observation, prev_action, prev_reward):
        lead = prev_reward.shape
        return torch.zeros(lead)

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state_dict: dict) -> None:
        pass


class RecurrentAgentMixin:
    """Keeps the recurrent state between sampler steps so samplers stay agnostic of it.

    The state has cudnn layout ``[N, B, H]`` (any namedarraytuple of such tensors); ``None``
    means zeros. Sample-mode state is stashed while training or evaluating and restored after.
    Use as ``class MyAgent(RecurrentAgentMixin, MyBaseAgent)``.
    """

    recurrent = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._prev_rnn_state = None
        self._sample_rnn_state = None

    def reset(self) -> None:
        self._prev_rnn_state = None

    def reset_one(self, idx: int) -> None:
        if self._prev_rnn_state is not None:
            # Zero one environment's slot in place (B is dim 1 of every leaf).
            buffer_func(self._prev_rnn_state, _zero_column, idx)

    def advance_rnn_state(self, new_rnn_state) -> None:
        self._prev_rnn_state = new_rnn_state

    @property
    def prev_rnn_state(self):
        return self._prev_rnn_state

    def train_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state = self._prev_rnn_state
        self._prev_rnn_state = None
        super().train_mode(itr)

    def sample_mode(self, itr: int) -> None:
        if self._mode != "sample":
            self._prev_rnn_state = self._sample_rnn_state
        super().sample_mode(itr)

    def eval_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state = self._prev_rnn_state
        self._prev_rnn_state = None
        super().eval_mode(itr)


def _zero_column(x: torch.Tensor, idx: int) -> None:
    x[:, idx] = 0


class AlternatingRecurrentAgentMixin(RecurrentAgentMixin):
    """Two recurrent states, one per half of the environments, for alternating samplers.

    Each ``advance_rnn_state`` stores the new state for the group that just stepped and swaps
    in the other group's, so the agent otherwise behaves like a plain recurrent agent.
    """

    alternating = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._alt = 0
        self._prev_rnn_state_pair = [None, None]
        self._sample_rnn_state_pair = [None, None]

    def reset(self) -> None:
        self._prev_rnn_state_pair = [None, None]
        self._prev_rnn_state = None
        self._alt = 0

    def use_group(self, group: int) -> None:
        """Point the agent at one group's state (the action server calls this per group)."""
        self._alt = group
        self._prev_rnn_state = self._prev_rnn_state_pair[group]

    def advance_rnn_state(self, new_rnn_state) -> None:
        self._prev_rnn_state_pair[self._alt] = new_rnn_state
        self._alt ^= 1
        self._prev_rnn_state = self._prev_rnn_state_pair[self._alt]

    def train_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state_pair = self._prev_rnn_state_pair
        self._prev_rnn_state_pair = [None, None]
        self._prev_rnn_state = None
        self._alt = 0
        BaseAgent.train_mode(self, itr)

    def sample_mode(self, itr: int) -> None:
        if self._mode != "sample":
            self._prev_rnn_state_pair = self._sample_rnn_state_pair
            self._alt = 0
            self._prev_rnn_state = self._prev_rnn_state_pair[0]
        BaseAgent.sample_mode(self, itr)

    def eval_mode(self, itr: int) -> None:
        if self._mode == "sample":
            self._sample_rnn_state_pair = self._prev_rnn_state_pair
        self._prev_rnn_state_pair = [None, None]
        self._prev_rnn_state = None
        self._alt = 0
        BaseAgent.eval_mode(self, itr)


def rnn_state_for_storage(rnn_state):
    """[N, B, H] -> [B, N, H] so the state can be stored per environment in the samples buffer."""
    return buffer_method(rnn_state, "transpose", 0, 1)
