"""The policy that evolution strategies search over, as one flat parameter vector.

An ES candidate is a vector of ``EsPolicy.n_params`` numbers: for each linear layer its
weight (``[out, in]``, row-major) then its bias, in layer order, exactly the order of
``EsPolicy.parameters()``, so ``torch.nn.utils.vector_to_parameters`` loads a candidate into
the module. Actions are deterministic: the argmax of the logits for discrete actions; for a
bounded 1-D ``Box`` the output squashed by ``tanh`` into the bounds; unbounded outputs are used
as they are.

An ES worker evaluates many candidates at once, one environment each: :class:`BatchedPolicy`
splits a ``[L, n_params]`` block of candidate rows into per-layer ``[L, out, in]`` weights
once per command, and then one ``baddbmm`` per layer computes all ``L`` actions of a step,
so no Python loop over candidates runs per step and nothing is copied into a module.
"""
from __future__ import annotations

from typing import Any

import numpy as np
import torch
from torch import nn

__all__ = ["EsPolicy", "BatchedPolicy", "EsPlaybackAgent", "policy_spec"]


def policy_spec(observation_space: Any, action_space: Any) -> dict:
    """The sizes and action kind of a policy for these gymnasium spaces:
    ``dict(obs_dim, n_outputs, discrete, low, high)``. Observations must be a ``Box``
    (vectors of any shape, flattened); actions a ``Discrete`` or a 1-D float ``Box``."""
    from gymnasium import spaces
    if not isinstance(observation_space, spaces.Box):
        raise ValueError(f"evolution strategies need a Box observation space (a vector); got "
                         f"{observation_space!r}")
    obs_dim = int(np.prod(observation_space.shape))
    if isinstance(action_space, spaces.Discrete):
        return dict(obs_dim=obs_dim, n_outputs=int(action_space.n), discrete=True,
                    low=None, high=None)
    if isinstance(action_space, spaces.Box) and len(action_space.shape) == 1:
        low, high = action_space.low.astype(np.float64), action_space.high.astype(np.float64)
        bounded = bool(np.all(np.isfinite(low)) and np.all(np.isfinite(high)))
        return dict(obs_dim=obs_dim, n_outputs=int(action_space.shape[0]), discrete=False,
                    low=low.tolist() if bounded else None, high=high.tolist() if bounded else None)
    raise ValueError(f"evolution strategies need a Discrete or a 1-D Box action space; got "
                     f"{action_space!r}")


class EsPolicy(nn.Module):
    """A tanh MLP from flat observations to a deterministic action (``hidden_sizes=[]``: a
    linear policy). ``low``/``high`` (lists, continuous actions only) bound the action."""

    def __init__(self, obs_dim: int, n_outputs: int, discrete: bool,
                 hidden_sizes: list[int] | tuple[int, ...] = (),
                 low: list[float] | None = None, high: list[float] | None = None):
        super().__init__()
        if obs_dim < 1 or n_outputs < 1:
            raise ValueError(f"EsPolicy needs obs_dim >= 1 and n_outputs >= 1; got "
                             f"{obs_dim} and {n_outputs}")
        if any(int(h) < 1 for h in hidden_sizes):
            raise ValueError(f"hidden_sizes must be positive; got {list(hidden_sizes)}")
        sizes = [int(obs_dim), *[int(h) for h in hidden_sizes], int(n_outputs)]
        self.layers = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        self.discrete = bool(discrete)
        self.kwargs = dict(obs_dim=int(obs_dim), n_outputs=int(n_outputs),
                           discrete=self.discrete, hidden_sizes=list(sizes[1:-1]),
                           low=low, high=high)
        bounded = low is not None and high is not None
        if bounded:
            low_t = torch.as_tensor(low, dtype=torch.float32)
            high_t = torch.as_tensor(high, dtype=torch.float32)
            self.register_buffer("action_center", (high_t + low_t) / 2)
            self.register_buffer("action_scale", (high_t - low_t) / 2)
        self.bounded = bounded

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def layer_shapes(self) -> list[tuple[int, int]]:
        """``(out, in)`` of every linear layer, in parameter order."""
        return [(layer.out_features, layer.in_features) for layer in self.layers]

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """Raw outputs (logits or pre-squash actions) for ``[..., obs_dim]`` observations."""
        h = observation
        for i, layer in enumerate(self.layers):
            h = layer(h)
            if i < len(self.layers) - 1:
                h = torch.tanh(h)
        return h

    def act(self, observation: Any) -> np.ndarray:
        """The action for one observation, as the environment takes it."""
        with torch.no_grad():
            obs = torch.as_tensor(np.asarray(observation, dtype=np.float32).reshape(-1))
            return self.outputs_to_actions(self.forward(obs.unsqueeze(0)))[0]

    def outputs_to_actions(self, outputs: torch.Tensor) -> np.ndarray:
        """``[L, n_outputs]`` raw outputs to ``L`` actions (ints, or float rows in bounds)."""
        if self.discrete:
            return outputs.argmax(dim=-1).numpy()
        if self.bounded:
            outputs = self.action_center + self.action_scale * torch.tanh(outputs)
        return outputs.numpy()

    def initial_vector(self, init: str = "zeros", seed: int | None = None) -> np.ndarray:
        """The search's starting point: ``"zeros"``, or ``"torch"`` (PyTorch's default
        initialization of the layers, seeded)."""
        if init == "zeros":
            return np.zeros(self.n_params)
        if init == "torch":
            generator = torch.Generator().manual_seed(0 if seed is None else int(seed))
            parts = []
            for layer in self.layers:
                bound = 1.0 / np.sqrt(layer.in_features)  # nn.Linear's uniform bound
                parts.append((torch.rand(layer.weight.shape, generator=generator) * 2 - 1)
                             .mul(bound).reshape(-1))
                parts.append((torch.rand(layer.bias.shape, generator=generator) * 2 - 1)
                             .mul(bound))
            return torch.cat(parts).double().numpy()
        raise ValueError(f"unknown policy init {init!r}; choose 'zeros' or 'torch'")

    def load_vector(self, vector: Any) -> "EsPolicy":
        """Copy a flat candidate into the parameters; returns self."""
        vector = torch.as_tensor(np.asarray(vector), dtype=torch.float32).reshape(-1)
        if vector.numel() != self.n_params:
            raise ValueError(f"a candidate for this policy has {self.n_params} numbers; got "
                             f"{vector.numel()}")
        nn.utils.vector_to_parameters(vector, self.parameters())
        return self


class BatchedPolicy:
    """Acts for ``L`` candidates at once: :meth:`load` splits their ``[L, n_params]`` rows
    into per-layer weight and bias blocks (one copy per command), :meth:`actions` maps
    ``[L, obs_dim]`` observations to ``L`` actions with one batched matmul per layer."""

    def __init__(self, policy: EsPolicy):
        self.policy = policy
        self.shapes = policy.layer_shapes()
        self.weights: list[torch.Tensor] = []
        self.biases: list[torch.Tensor] = []

    def load(self, rows: torch.Tensor) -> None:
        """Take the candidates' flat parameters, ``[L, n_params]`` float32."""
        self.weights, self.biases = [], []
        offset, n = 0, rows.shape[0]
        for out_features, in_features in self.shapes:
            size = out_features * in_features
            self.weights.append(rows[:, offset:offset + size]
                                .reshape(n, out_features, in_features).contiguous())
            offset += size
            self.biases.append(rows[:, offset:offset + out_features].unsqueeze(2).contiguous())
            offset += out_features

    def outputs(self, observations: torch.Tensor) -> torch.Tensor:
        """Raw outputs ``[L, n_outputs]`` for observations ``[L, obs_dim]``: per layer,
        ``h <- tanh(W h + b)`` (no tanh after the last), all candidates in one ``baddbmm``."""
        h = observations.unsqueeze(2)
        last = len(self.weights) - 1
        for i, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            h = torch.baddbmm(bias, weight, h)
            if i < last:
                h = torch.tanh(h)
        return h.squeeze(2)

    def actions(self, observations: torch.Tensor) -> np.ndarray:
        with torch.no_grad():
            return self.policy.outputs_to_actions(self.outputs(observations))


class EsPlaybackAgent:
    """An ES solution behind the agent interface that ``rlfast eval`` and ``rlfast watch``
    play (``eval_mode``, ``reset``, ``reset_one``, ``step``): deterministic, stateless."""

    def __init__(self, policy: EsPolicy):
        self.policy = policy

    def eval_mode(self, itr: int) -> None:
        """Nothing to switch: an ES policy always acts deterministically."""

    def reset(self) -> None:
        """Nothing to reset: the policy has no memory."""

    def reset_one(self, idx: int) -> None:
        """Nothing to reset: the policy has no memory."""

    def to_device(self, cuda_idx: int | None = None) -> None:
        """ES policies play on the CPU."""

    def step(self, observation: torch.Tensor, prev_action: Any, prev_reward: Any
             ) -> tuple[torch.Tensor, None]:
        """Actions for a ``[B, ...]`` batch of observations."""
        with torch.no_grad():
            flat = observation.reshape(observation.shape[0], -1).float()
            return torch.as_tensor(self.policy.outputs_to_actions(self.policy(flat))), None
