"""What DDPG, TD3 and SAC agents share: a policy model, a critic model, their target copies,
action scaling to the environment's bounds, and random-action pretraining.

``QpgAgentBase`` is combined with ``BaseAgent`` in each agent (``class DdpgAgent(QpgAgentBase,
BaseAgent)``) rather than derived from it, which keeps ``Td3Agent(DdpgAgent)`` three classes
deep.

The networks work in normalized action units ``[-1, 1]``; ``step`` maps the policy's action
to the environment's bounds (``low + (a + 1) * (high - low) / 2``) and the algorithm maps
replayed actions back with ``normalize_action``, so exploration noise, target smoothing and
entropy targets mean the same thing on every environment.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch

from rlfast.agents.base import AgentStep, array_observation_shape
from rlfast.models.utils import strip_ddp_state_dict
from rlfast.utils.checks import check_positive
from rlfast.utils.collections import namedarraytuple

__all__ = ["QpgAgentBase", "polyak_update", "positive_or_none", "AgentInfo"]

AgentInfo = namedarraytuple("AgentInfo", ["mu"])  # the policy's action before exploration noise


def _float_tensors(model: torch.nn.Module) -> list:
    return list(model.parameters()) + [b for b in model.buffers() if b.is_floating_point()]


def polyak_update(target: torch.nn.Module, source: torch.nn.Module, tau: float,
                  tensors: tuple | None = None) -> None:
    """``target <- tau * source + (1 - tau) * target`` for every parameter and float buffer
    (a plain copy when ``tau == 1``), in one fused call per tensor list. ``tensors`` may give
    the ``(target_list, source_list)`` pair precomputed, to skip walking the modules."""
    if not 0 < tau <= 1:
        raise ValueError(f"tau must be in (0, 1], got {tau!r}")
    targets, sources = tensors if tensors is not None else (_float_tensors(target),
                                                            _float_tensors(source))
    if len(targets) != len(sources):
        raise ValueError(f"polyak_update: target has {len(targets)} tensors, source "
                         f"{len(sources)}; the models must have the same architecture")
    with torch.no_grad():
        if tau == 1:
            torch._foreach_copy_(targets, sources)
        else:
            torch._foreach_lerp_(targets, sources, float(tau))


def positive_or_none(value: Any, name: str, owner: str) -> float | None:
    """``value`` as a float > 0, or None (for optional noise scales and clips)."""
    return None if value is None else check_positive(value, name, owner=owner)


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


class QpgAgentBase:
    """Policy (``model``), critic (``q_model``) and target copies of whichever the algorithm
    bootstraps from (``target_names``). Agents put it before ``BaseAgent`` in their bases,
    choose the models and define ``step``.

    ``state_dict()`` is a dict of the named models' state dicts; ``load_state_dict`` and
    ``initial_model_state_dict`` take that form (missing entries keep their initialization,
    a plain policy state dict loads the policy only).
    """

    target_names: tuple = ("target_q_model",)
    trained_model_names: tuple = ("model", "q_model")  # the targets follow by averaging

    def __init__(self, ModelCls: type, QModelCls: type, model_kwargs: dict | None = None,
                 q_model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None,
                 pretrain_std: float | None = None, pretrain_uniform: bool = False):
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self.QModelCls = QModelCls
        self.q_model_kwargs = dict(q_model_kwargs or {})
        self.pretrain_std = positive_or_none(pretrain_std, "pretrain_std", type(self).__name__)
        if not isinstance(pretrain_uniform, bool):
            raise TypeError(f"{type(self).__name__}: pretrain_uniform must be True or False; "
                            f"got {pretrain_uniform!r}")
        self.pretrain_uniform = pretrain_uniform  # uniform random actions before learning
        self.min_itr_learn = 0
        self._itr = 0
        self.q_model: torch.nn.Module | None = None
        self._target_pairs: list | None = None

    # ---- construction -------------------------------------------------------------------
    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(observation_shape, action_size)``; also keeps the action bounds for scaling."""
        space = env_spaces.action
        shape = tuple(getattr(space, "shape", ()))
        low, high = getattr(space, "low", None), getattr(space, "high", None)
        dtype = getattr(space, "dtype", None)
        floating = dtype is not None and np.issubdtype(np.dtype(dtype), np.floating)
        if len(shape) != 1 or low is None or high is None or not floating:
            raise TypeError(f"{type(self).__name__} needs a flat continuous action space "
                            f"(FloatBox of shape [A]); got {space!r}")
        low = np.broadcast_to(np.asarray(low, dtype=np.float64), shape)
        high = np.broadcast_to(np.asarray(high, dtype=np.float64), shape)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high)) and np.all(high > low)):
            raise ValueError(f"{type(self).__name__} needs finite action bounds low < high; got "
                             f"low={low.tolist()}, high={high.tolist()}")
        self._action_center = ((high + low) / 2).astype(np.float32)
        self._action_half = ((high - low) / 2).astype(np.float32)
        return dict(observation_shape=array_observation_shape(env_spaces.observation,
                                                              type(self).__name__),
                    action_size=shape[0])

    def q_model_extra_kwargs(self) -> dict:
        """Keyword arguments the subclass adds to the critic (e.g. ``ensemble_size=2``)."""
        return {}

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: list | None = None) -> None:
        """Build the policy, the critic and the target copies; ``initial_model_state_dict`` may
        be a plain policy state dict or this agent's ``state_dict()``."""
        initial = self.initial_model_state_dict
        nested = isinstance(initial, dict) and "model" in initial
        self.initial_model_state_dict = initial["model"] if nested else initial
        try:
            super().initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                               env_ranks=env_ranks)
        finally:
            self.initial_model_state_dict = initial
        self.q_model = self.QModelCls(**self._q_kwargs())
        for name in self.target_names:
            source = self._source_of(name)
            target = type(source)(**self._kwargs_of(source))
            target.load_state_dict(source.state_dict())
            target.requires_grad_(False)
            setattr(self, name, target)
        if nested:
            self.load_state_dict(initial)
        self._target_pairs = None
        self._center_t = torch.from_numpy(self._action_center)
        self._half_t = torch.from_numpy(self._action_half)
        self.make_distribution()

    def _source_of(self, target_name: str) -> torch.nn.Module:
        """The online model a target copy follows."""
        return self.model if target_name == "target_model" else self.q_model

    def _q_kwargs(self) -> dict:
        return dict(**self.env_model_kwargs, **self.q_model_kwargs, **self.q_model_extra_kwargs())

    def _kwargs_of(self, model: torch.nn.Module) -> dict:
        if model is self.model:
            return dict(**self.env_model_kwargs, **self.model_kwargs)
        return self._q_kwargs()

    def make_distribution(self) -> None:
        """Set ``self.distribution`` (called at the end of ``initialize``)."""

    def _models(self) -> dict:
        names = ("model", "q_model") + tuple(self.target_names)
        return {name: getattr(self, name) for name in names}

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Move every model and the action-scaling tensors to ``cuda:cuda_idx``."""
        super().to_device(cuda_idx)
        for name, model in self._models().items():
            if name != "model":
                model.to(self.device)
        self._center_t = self._center_t.to(self.device)
        self._target_pairs = None
        self._half_t = self._half_t.to(self.device)

    def on_models_replaced(self) -> None:
        """Forget the target/source tensor pairs (they are rebuilt from the current models)."""
        self._target_pairs = None

    def to_model_inputs(self, *inputs) -> tuple:
        """Inputs on the model's device (as they are on the CPU: no per-call tree walk)."""
        if self.device.type == "cpu":
            return inputs
        return super().to_model_inputs(*inputs)

    # ---- parameters ---------------------------------------------------------------------
    def pi_parameters(self):
        """The policy's parameters (the actor's optimizer group)."""
        return self.model.parameters()

    @property
    def q_ensemble_size(self) -> int | None:
        """How many critics the critic model holds (2 for TD3 / SAC), wrapped or not."""
        return getattr(_unwrap(self.q_model), "ensemble_size", None)

    def q_parameters(self):
        """The critic's parameters."""
        return self.q_model.parameters()

    def state_dict(self) -> dict:
        """Every named model's state dict (``model``, ``q_model`` and the targets)."""
        return {name: strip_ddp_state_dict(model.state_dict())
                for name, model in self._models().items()}

    def load_state_dict(self, state_dict: dict) -> None:
        """Load ``state_dict()``'s form (missing entries kept), or a plain policy state dict."""
        if "model" not in state_dict:  # a plain policy state dict
            _unwrap(self.model).load_state_dict(strip_ddp_state_dict(state_dict))
            return
        models = self._models()
        unknown = sorted(set(state_dict) - set(models))
        if unknown:
            raise KeyError(f"{type(self).__name__}.load_state_dict: unknown entries {unknown}; "
                           f"expected some of {sorted(models)}")
        for name, sd in state_dict.items():
            _unwrap(models[name]).load_state_dict(strip_ddp_state_dict(sd))

    def update_target(self, tau: float = 1) -> None:
        """Polyak-average every target model toward its online model."""
        if self._target_pairs is None:  # the same tensor objects for the agent's lifetime
            self._target_pairs = []
            for name in self.target_names:
                source = _unwrap(self._source_of(name))
                target = getattr(self, name)
                self._target_pairs.append((target, source, (_float_tensors(target),
                                                            _float_tensors(source))))
        for target, source, tensors in self._target_pairs:
            polyak_update(target, source, tau, tensors)

    # ---- modes --------------------------------------------------------------------------
    def give_min_itr_learn(self, min_itr_learn: int) -> None:
        """Iterations before learning starts; until then sampling uses ``pretrain_std``."""
        self.min_itr_learn = int(min_itr_learn)

    def sampling_state(self) -> dict:
        """``min_itr_learn`` (pretraining range), for sampler workers' agent copies."""
        return dict(super().sampling_state(), min_itr_learn=self.min_itr_learn)

    def sample_mode(self, itr: int) -> None:
        """Sampling mode; remembers ``itr`` to know whether pretraining is still on."""
        super().sample_mode(itr)
        self._itr = itr

    @property
    def pretraining(self) -> bool:
        """Sampling before learning starts, with random-action pretraining configured."""
        return (self.pretrain_std is not None or self.pretrain_uniform) \
            and self._mode == "sample" and self._itr < self.min_itr_learn

    # ---- action scaling -----------------------------------------------------------------
    def scale_action(self, action: torch.Tensor) -> torch.Tensor:
        """Normalized ``[-1, 1]`` -> environment units."""
        return self._center_t + self._half_t * action

    def normalize_action(self, action: Any) -> Any:
        """Environment units -> normalized ``[-1, 1]`` (numpy or torch)."""
        if isinstance(action, torch.Tensor):
            return (action - self._center_t.to(action.device)) / self._half_t.to(action.device)
        return (np.asarray(action, dtype=np.float32) - self._action_center) / self._action_half

    def _step_output(self, action: torch.Tensor, mu: torch.Tensor) -> AgentStep:
        return AgentStep(action=self.scale_action(action).cpu(),
                         agent_info=AgentInfo(mu=mu.cpu()))
