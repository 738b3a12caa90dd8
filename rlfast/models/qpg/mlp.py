"""MLP models for Q-value policy gradient agents (DDPG, TD3, SAC) on vector observations.

``MuMlpModel`` is a deterministic policy, ``PiMlpModel`` a Gaussian policy (mean and log-std),
``PiSdeMlpModel`` a Gaussian policy with state-dependent exploration noise (gSDE),
``QofMuMlpModel`` a state-action value. Twin critics (TD3, SAC) are one ``QofMuMlpModel`` with
``ensemble_size=2``: the members' weights are stacked, so both Q-values come out of one batched
matrix multiply per layer instead of two separate networks' worth of small kernels and Python
calls. Every model accepts observation leading dims ``[]``, ``[B]`` or ``[T, B]``.
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from rlfast.models.mlp import MlpModel
from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["MuMlpModel", "PiMlpModel", "PiSdeMlpModel", "QofMuMlpModel", "EnsembleMlp"]


def _hidden(hidden_sizes, default: Sequence[int]) -> list:
    if hidden_sizes is None:
        return list(default)
    if isinstance(hidden_sizes, int):
        return [hidden_sizes]
    return list(hidden_sizes)


class MuMlpModel(torch.nn.Module):
    """Deterministic policy: ``output_max * tanh(MLP(observation))``.

    ``forward(observation, prev_action, prev_reward) -> mu`` ``[..., action_size]`` in
    ``[-output_max, output_max]`` (the agent scales it to the action bounds).
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: Sequence[int] | None,
                 action_size: int, output_max: float = 1,
                 nonlinearity: type[torch.nn.Module] = torch.nn.ReLU):
        super().__init__()
        self.observation_shape = tuple(observation_shape)
        self.action_size = check_positive(action_size, "action_size", integer=True,
                                          owner="MuMlpModel")
        self.output_max = check_positive(output_max, "output_max", owner="MuMlpModel")
        self.mlp = MlpModel(int(math.prod(self.observation_shape)),
                            _hidden(hidden_sizes, [400, 300]), output_size=self.action_size,
                            nonlinearity=nonlinearity)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor = None,
                prev_reward: torch.Tensor = None) -> torch.Tensor:
        """The deterministic action; ``prev_action`` and ``prev_reward`` are unused."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        mu = self.output_max * torch.tanh(self.mlp(observation.reshape(T * B, -1).float()))
        return restore_leading_dims(mu, lead_dim, T, B)


class PiMlpModel(torch.nn.Module):
    """Gaussian policy for SAC: one MLP outputs the mean and log-std of the pre-squash action.

    ``forward(observation, prev_action, prev_reward) -> (mean, log_std)``, each
    ``[..., action_size]``. The agent squashes samples with tanh and clamps the log-std.
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: Sequence[int] | None,
                 action_size: int, nonlinearity: type[torch.nn.Module] = torch.nn.ReLU):
        super().__init__()
        self.observation_shape = tuple(observation_shape)
        self.action_size = check_positive(action_size, "action_size", integer=True,
                                          owner="PiMlpModel")
        self.mlp = MlpModel(int(math.prod(self.observation_shape)),
                            _hidden(hidden_sizes, [256, 256]), output_size=2 * self.action_size,
                            nonlinearity=nonlinearity)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor = None,
                prev_reward: torch.Tensor = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Pre-squash mean and log-std; ``prev_action`` and ``prev_reward`` are unused."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        output = self.mlp(observation.reshape(T * B, -1).float())
        mean, log_std = output[:, :self.action_size], output[:, self.action_size:]
        return restore_leading_dims((mean, log_std), lead_dim, T, B)


class PiSdeMlpModel(torch.nn.Module):
    """Gaussian policy with generalized state-dependent exploration (gSDE; Raffin et al. 2022,
    "Smooth Exploration for Robotic Reinforcement Learning").

    An MLP trunk gives features ``z(s)`` (its last hidden layer); a linear head gives the
    pre-squash mean, clamped to ``[-mean_clip, mean_clip]`` as SB3's gSDE SAC does (clip_mean 2).
    The noise is ``z(s) @ W`` with ``W ~ N(0, sigma^2)`` elementwise, ``sigma = exp(log_std)`` one
    learned entry per (feature, action) pair, started at ``log_std_init``. For one ``W`` the noise
    is a smooth function of the state; the agent keeps ``W`` for several steps, so exploration is
    consistent in time. Over ``W`` the pre-squash action is Gaussian with variance ``z(s)^2 @
    sigma^2`` per action, which is the log-std that ``forward`` returns (the features are detached
    there: the std does not train the trunk).

    ``forward(observation, prev_action, prev_reward, features=False) -> (mean, log_std)``,
    each ``[..., action_size]``; with ``features=True`` also ``z`` ``[..., hidden_sizes[-1]]``.
    """

    state_dependent_noise = True

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: Sequence[int] | None,
                 action_size: int, log_std_init: float = -3.0, mean_clip: float | None = 2.0,
                 nonlinearity: type[torch.nn.Module] = torch.nn.ReLU):
        super().__init__()
        self.observation_shape = tuple(observation_shape)
        self.action_size = check_positive(action_size, "action_size", integer=True,
                                          owner="PiSdeMlpModel")
        hidden = _hidden(hidden_sizes, [256, 256])
        if not hidden:
            raise ValueError("PiSdeMlpModel: needs at least one hidden layer (its features "
                             "carry the exploration noise); got hidden_sizes=[]")
        if not math.isfinite(float(log_std_init)):
            raise ValueError(f"PiSdeMlpModel: log_std_init must be finite; got {log_std_init!r}")
        self.mean_clip = None if mean_clip is None else check_positive(
            mean_clip, "mean_clip", owner="PiSdeMlpModel")
        self.trunk = MlpModel(int(math.prod(self.observation_shape)), hidden,
                              nonlinearity=nonlinearity)
        self.feature_size = hidden[-1]
        self.mean_head = torch.nn.Linear(self.feature_size, self.action_size)
        self.log_std = torch.nn.Parameter(
            torch.full((self.feature_size, self.action_size), float(log_std_init)))

    def noise_std(self) -> torch.Tensor:
        """``sigma`` ``[feature_size, action_size]``: the std of each entry of ``W``."""
        return self.log_std.exp()

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor = None,
                prev_reward: torch.Tensor = None, features: bool = False):
        """Pre-squash mean and state-dependent log-std (and the features); ``prev_action`` and
        ``prev_reward`` are unused."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        z = self.trunk(observation.reshape(T * B, -1).float())
        mean = self.mean_head(z)
        if self.mean_clip is not None:
            mean = mean.clamp(-self.mean_clip, self.mean_clip)
        variance = (z.detach() ** 2) @ (2.0 * self.log_std).exp()
        log_std = 0.5 * torch.log(variance + 1e-6)
        outputs = (mean, log_std, z) if features else (mean, log_std)
        return restore_leading_dims(outputs, lead_dim, T, B)


class EnsembleMlp(torch.nn.Module):
    """``ensemble_size`` independent MLPs of the same shape, evaluated together.

    Weights are stacked as ``[E, in, out]``; ``forward(x)`` with ``x`` ``[N, in]`` (shared by
    all members) or ``[E, N, in]`` (one input per member) returns ``[E, N, output_size]``. Each
    layer is one ``baddbmm`` over all members: half the kernels and autograd nodes of separate
    networks, which is what bounds small critics (64-128 wide: 1.2-1.4x faster forward plus
    backward on one CPU core, measured); at 256 wide the FLOPs dominate and both are equal.
    Each member is initialized like ``torch.nn.Linear`` (uniform in ``+-1/sqrt(fan_in)``),
    independently.
    """

    def __init__(self, input_size: int, hidden_sizes: Sequence[int], output_size: int,
                 ensemble_size: int = 2, nonlinearity: type[torch.nn.Module] = torch.nn.ReLU):
        super().__init__()
        self.ensemble_size = check_positive(ensemble_size, "ensemble_size", integer=True,
                                            owner="EnsembleMlp")
        sizes = [check_positive(input_size, "input_size", integer=True, owner="EnsembleMlp")]
        sizes += [check_positive(h, "hidden size", integer=True, owner="EnsembleMlp")
                  for h in hidden_sizes]
        sizes.append(check_positive(output_size, "output_size", integer=True, owner="EnsembleMlp"))
        self.weights = torch.nn.ParameterList()
        self.biases = torch.nn.ParameterList()
        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
            bound = 1.0 / math.sqrt(fan_in)
            self.weights.append(torch.nn.Parameter(
                torch.empty(self.ensemble_size, fan_in, fan_out).uniform_(-bound, bound)))
            self.biases.append(torch.nn.Parameter(
                torch.empty(self.ensemble_size, 1, fan_out).uniform_(-bound, bound)))
        self.activation = nonlinearity()
        self.input_size, self.output_size = sizes[0], sizes[-1]

    def forward(self, x: torch.Tensor, detach_params: bool = False,
                member: int | None = None) -> torch.Tensor:
        """``[E, N, output_size]`` (``[1, N, ...]`` for one ``member``). ``detach_params``
        blocks gradients to the weights but not to ``x`` (an actor's loss through a critic)."""
        weights, biases = list(self.weights), list(self.biases)
        if member is not None:
            if not 0 <= member < self.ensemble_size:
                raise ValueError(f"EnsembleMlp: member must be in [0, {self.ensemble_size}), "
                                 f"got {member!r}.")
            weights = [w[member:member + 1] for w in weights]
            biases = [b[member:member + 1] for b in biases]
        if detach_params:
            weights = [w.detach() for w in weights]
            biases = [b.detach() for b in biases]
        if x.dim() == 2:  # one input shared by every member: a stride-0 view, no copy
            x = x.expand(weights[0].shape[0], *x.shape)
        if x.dim() != 3 or x.shape[0] != weights[0].shape[0] or x.shape[-1] != self.input_size:
            raise ValueError(f"EnsembleMlp: input must be [N, {self.input_size}] or "
                             f"[{weights[0].shape[0]}, N, {self.input_size}], "
                             f"got {tuple(x.shape)}.")
        h = torch.baddbmm(biases[0], x, weights[0])
        for weight, bias in zip(weights[1:], biases[1:]):
            h = torch.baddbmm(bias, self.activation(h), weight)
        return h

    def member_state_dict(self, k: int) -> dict:
        """Member ``k`` as plain tensors (``weight_i`` ``[out, in]`` like nn.Linear, ``bias_i``)."""
        state = {}
        for i, (w, b) in enumerate(zip(self.weights, self.biases)):
            state[f"weight_{i}"] = w[k].detach().t().clone()
            state[f"bias_{i}"] = b[k, 0].detach().clone()
        return state


class QofMuMlpModel(torch.nn.Module):
    """State-action value ``Q(s, a)``: an MLP on the flattened observation joined with the action.

    ``forward(observation, prev_action, prev_reward, action) -> q``: ``[...]`` for
    ``ensemble_size=1``, ``[E, ...]`` (member first) for an ensemble of ``E`` critics sharing
    one batched forward pass (twin Q: ``q1, q2 = model(...)``).
    """

    def __init__(self, observation_shape: Sequence[int], hidden_sizes: Sequence[int] | None,
                 action_size: int, ensemble_size: int = 1,
                 nonlinearity: type[torch.nn.Module] = torch.nn.ReLU):
        super().__init__()
        self.observation_shape = tuple(observation_shape)
        self.action_size = check_positive(action_size, "action_size", integer=True,
                                          owner="QofMuMlpModel")
        self.ensemble_size = check_positive(ensemble_size, "ensemble_size", integer=True,
                                            owner="QofMuMlpModel")
        self.mlp = EnsembleMlp(int(math.prod(self.observation_shape)) + self.action_size,
                               _hidden(hidden_sizes, [400, 300]), 1, self.ensemble_size,
                               nonlinearity)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor, action: torch.Tensor, detach_params: bool = False,
                member: int | None = None) -> torch.Tensor:
        """Q-values; ``member`` picks one critic of an ensemble (output as for size 1),
        ``detach_params`` passes gradients to ``action`` only (see ``EnsembleMlp``)."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        q_input = torch.cat([observation.reshape(T * B, -1).float(),
                             action.reshape(T * B, -1).float()], dim=-1)
        q = self.mlp(q_input, detach_params=detach_params, member=member).squeeze(-1)
        if lead_dim == 2:
            q = q.reshape(q.shape[0], T, B)
        elif lead_dim == 0:
            q = q[:, 0]
        return q[0] if self.ensemble_size == 1 or member is not None else q
