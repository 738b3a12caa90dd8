"""Parts shared by the policy-gradient models: orthogonal init, observation normalization, the
categorical policy and value heads (one softmax, or one per action dimension for MultiDiscrete
actions), and the forward pass of the vector-observation MLP models."""
from __future__ import annotations

import math
from abc import ABCMeta, abstractmethod
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlfast.models.running_mean_std import RunningMeanStdModel
from rlfast.models.utils import HIDDEN_GAIN, orthogonal_init_
from rlfast.utils.checks import check_positive
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["orthogonal_init_", "init_mlp_", "ObservationNormalizer", "HIDDEN_GAIN",
           "policy_value_heads", "categorical_outputs", "segment_softmax", "check_action_nvec",
           "MlpPgModel"]


def init_mlp_(mlp: torch.nn.Module, output_gain: float, hidden_gain: float = HIDDEN_GAIN) -> None:
    """Orthogonal init of every Linear in ``mlp``: ``hidden_gain`` except the last, ``output_gain``.

    Small policy-output gains (0.01) start the policy near uniform / zero-mean,
    which is what makes PPO and A2C learn quickly from the start.
    """
    linears = [m for m in mlp.modules() if isinstance(m, torch.nn.Linear)]
    for i, layer in enumerate(linears):
        orthogonal_init_(layer, output_gain if i == len(linears) - 1 else hidden_gain)


class ObservationNormalizer(torch.nn.Module):
    """Optional running normalization of observations, owned by a model.

    When disabled it is the identity and ``update`` does nothing, so models
    call it unconditionally.  When enabled it holds a ``RunningMeanStdModel``
    (buffers travel in the model's state dict) and normalizes as
    ``clamp((obs - mean) / sqrt(var + var_clip), -clip, clip)``.
    """

    def __init__(self, observation_shape: Sequence[int], enabled: bool, clip: float = 10,
                 var_clip: float = 1e-6):
        super().__init__()
        self.enabled = bool(enabled)
        self.clip = clip
        self.var_clip = var_clip
        self.rms = RunningMeanStdModel(tuple(observation_shape)) if self.enabled else None

    def update(self, observation: torch.Tensor) -> None:
        """Fold a batch of observations (any leading dims) into the running statistics."""
        if self.rms is not None:
            self.rms.update(observation)

    def forward(self, observation: torch.Tensor) -> torch.Tensor:
        """``observation`` normalized (as it is when disabled)."""
        if self.rms is None:
            return observation
        return self.rms.normalize(observation, clip=self.clip, var_clip=self.var_clip)


def policy_value_heads(input_size: int,
                       output_size: int) -> tuple[torch.nn.Linear, torch.nn.Linear]:
    """Linear policy and value heads, in that order, with orthogonal init: policy gain 0.01
    (a near-uniform start), value gain 1.0."""
    pi = orthogonal_init_(torch.nn.Linear(input_size, output_size), gain=0.01)
    value = orthogonal_init_(torch.nn.Linear(input_size, 1), gain=1.0)
    return pi, value


def check_action_nvec(action_nvec: Sequence[int] | None, action_size: int,
                      owner: str) -> tuple[int, ...] | None:
    """``action_nvec`` as a tuple of positive ints summing to ``action_size`` (None stays None).

    ``action_nvec`` splits the policy output into one categorical per action dimension (a
    MultiDiscrete action space with these sizes); ``action_size`` is then their sum.
    """
    if action_nvec is None:
        return None
    nvec = tuple(int(n) for n in action_nvec)
    if not nvec or any(n < 1 for n in nvec) or sum(nvec) != action_size:
        raise ValueError(f"{owner}: action_nvec {list(action_nvec)} must be positive sizes summing "
                         f"to action_size ({action_size}).")
    return nvec


def segment_softmax(logits: torch.Tensor, nvec: Sequence[int]) -> torch.Tensor:
    """Softmax over each consecutive segment of sizes ``nvec`` of the trailing dim (one
    probability vector per action dimension, concatenated back): ``[..., sum(nvec)]``."""
    n0 = nvec[0]
    if all(n == n0 for n in nvec):  # equal sizes: one reshaped softmax
        lead = logits.shape[:-1]
        return (F.softmax(logits.reshape(*lead, len(nvec), n0), dim=-1)
                .reshape(*lead, n0 * len(nvec)))
    return torch.cat([F.softmax(part, dim=-1) for part in logits.split(list(nvec), dim=-1)],
                     dim=-1)


def categorical_outputs(pi: torch.nn.Module, value: torch.nn.Module, features: torch.Tensor,
                        nvec: Sequence[int] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """``(softmax(pi(features)), value(features))``: action probabilities and state values.

    With ``nvec`` the softmax is taken per segment (``segment_softmax``): independent
    categoricals, one per action dimension.
    """
    logits = pi(features)
    prob = F.softmax(logits, dim=-1) if nvec is None else segment_softmax(logits, nvec)
    return prob, value(features).squeeze(-1)


class MlpPgModel(torch.nn.Module, metaclass=ABCMeta):
    """What the vector-observation feedforward models share: the argument checks, the forward
    pass (optional running normalization, flatten, ``heads``, leading dims restored) and
    ``update_obs_rms``.

    Subclasses build their MLPs and then ``obs_norm`` (an ``ObservationNormalizer``) and define
    ``heads(observation [N, input_size]) -> tuple of [N, ...]``; they must have a ``value`` MLP,
    whose dtype the observations are converted to.
    """

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 normalize_observation: bool, model_name: str):
        super().__init__()
        self.action_size = check_positive(action_size, "action_size", integer=True,
                                          owner=model_name)
        self.observation_shape = tuple(observation_shape)
        self.normalize_observation = normalize_observation
        self.input_size = int(math.prod(self.observation_shape))

    @abstractmethod
    def heads(self, observation: torch.Tensor) -> tuple:
        """The model's outputs from flat (normalized) observations ``[N, input_size]``."""

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor = None,
                prev_reward: torch.Tensor = None) -> tuple:
        """The heads' outputs with the observation's leading dims; ``prev_action`` and
        ``prev_reward`` are unused."""
        lead_dim, T, B, _ = infer_leading_dims(observation, len(self.observation_shape))
        obs = self.obs_norm(observation.to(self.value.model[-1].weight.dtype))
        return restore_leading_dims(self.heads(obs.reshape(T * B, -1)), lead_dim, T, B)

    def update_obs_rms(self, observation: torch.Tensor) -> None:
        """Update the running observation statistics (no-op unless normalize_observation)."""
        self.obs_norm.update(observation)
