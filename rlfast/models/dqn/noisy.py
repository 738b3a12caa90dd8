"""Noisy linear layers (Fortunato et al., 2018, "Noisy Networks for Exploration").

A noisy layer learns a mean and a scale for every weight and bias and adds Gaussian noise to
them on each forward pass, so exploration comes from the network itself instead of from
epsilon-greedy.  The factorized form draws only ``in + out`` Gaussians per noise sample:
``eps_w = f(eps_out) f(eps_in)^T`` and ``eps_b = f(eps_out)`` with ``f(x) = sign(x) sqrt(|x|)``.

Noise is held fixed between ``reset_noise()`` calls, and can be switched off (mean weights only)
with ``noise_enabled = False``, which is how agents act deterministically in evaluation while
keeping noise during sampling (``model.eval()`` alone does not turn it off).
"""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlfast.models.mlp import size_list
from rlfast.utils.checks import check_positive

__all__ = ["NoisyLinear", "NoisyModelMixin", "linear_layer", "mlp_layers"]


class NoisyLinear(torch.nn.Module):
    """Linear layer with factorized Gaussian noise on its weights and bias.

    ``y = (mu_w + sigma_w * eps_w) x + (mu_b + sigma_b * eps_b)`` while ``noise_enabled``,
    else ``y = mu_w x + mu_b``.  Means start uniform in ``+-1/sqrt(in_features)`` and scales at
    ``std_init / sqrt(in_features)``, as in the paper.  The noise tensors are non-persistent
    buffers (not in the state dict, so target networks and sampler copies keep their own noise)
    and ``reset_noise`` replaces them rather than writing in place, so a model in shared memory
    never shares noise across processes.
    """

    def __init__(self, in_features: int, out_features: int, std_init: float = 0.5,
                 bias: bool = True):
        super().__init__()
        self.in_features = check_positive(in_features, "in_features", integer=True,
                                          owner="NoisyLinear")
        self.out_features = check_positive(out_features, "out_features", integer=True,
                                           owner="NoisyLinear")
        if not std_init >= 0:
            raise ValueError(f"NoisyLinear: std_init must be >= 0, got {std_init!r}.")
        self.std_init = float(std_init)
        self.noise_enabled = True
        self.weight_mu = torch.nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.weight_sigma = torch.nn.Parameter(torch.empty(self.out_features, self.in_features))
        self.register_buffer("weight_epsilon", torch.zeros(self.out_features, self.in_features),
                             persistent=False)
        if bias:
            self.bias_mu = torch.nn.Parameter(torch.empty(self.out_features))
            self.bias_sigma = torch.nn.Parameter(torch.empty(self.out_features))
            self.register_buffer("bias_epsilon", torch.zeros(self.out_features), persistent=False)
        else:
            self.bias_mu = self.bias_sigma = self.bias_epsilon = None
        self.reset_parameters()
        self.reset_noise()

    def reset_parameters(self) -> None:
        """Means uniform in ``+-1/sqrt(in)``, scales ``std_init/sqrt(in)``."""
        bound = 1.0 / math.sqrt(self.in_features)
        sigma = self.std_init / math.sqrt(self.in_features)
        with torch.no_grad():
            self.weight_mu.uniform_(-bound, bound)
            self.weight_sigma.fill_(sigma)
            if self.bias_mu is not None:
                self.bias_mu.uniform_(-bound, bound)
                self.bias_sigma.fill_(sigma)

    def _factor_noise(self, size: int) -> torch.Tensor:
        x = torch.randn(size, device=self.weight_mu.device, dtype=self.weight_mu.dtype)
        return x.sign() * x.abs().sqrt()

    def reset_noise(self) -> None:
        """Draw a new factorized noise sample (used until the next call)."""
        eps_in = self._factor_noise(self.in_features)
        eps_out = self._factor_noise(self.out_features)
        self.weight_epsilon = torch.outer(eps_out, eps_in)
        if self.bias_mu is not None:
            self.bias_epsilon = eps_out

    @property
    def weight(self) -> torch.Tensor:
        """The weight used in the forward pass (noisy or mean, per ``noise_enabled``)."""
        if self.noise_enabled:
            return self.weight_mu + self.weight_sigma * self.weight_epsilon
        return self.weight_mu

    @property
    def bias(self) -> torch.Tensor | None:
        """The bias used in the forward pass (None when built with ``bias=False``)."""
        if self.bias_mu is None:
            return None
        if self.noise_enabled:
            return self.bias_mu + self.bias_sigma * self.bias_epsilon
        return self.bias_mu

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """``input @ weight.T + bias`` with the current (noisy or mean) weight and bias."""
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"std_init={self.std_init}, bias={self.bias_mu is not None}, "
                f"noise_enabled={self.noise_enabled}")


def linear_layer(in_features: int, out_features: int, noisy: bool,
                 bias: bool = True) -> torch.nn.Module:
    """``NoisyLinear`` when ``noisy``, else ``torch.nn.Linear``."""
    if noisy:
        return NoisyLinear(in_features, out_features, bias=bias)
    return torch.nn.Linear(in_features, out_features, bias=bias)


def mlp_layers(
    input_size: int, hidden_sizes: int | Sequence[int] | None, output_size: int | None, noisy: bool
) -> torch.nn.Sequential:
    """ReLU MLP of (noisy) linear layers; with ``output_size=None`` the last hidden layer ends it.

    The ``.output_size`` attribute of the result is the size of its last dimension.
    """
    sizes = size_list(hidden_sizes)
    for size in [input_size] + sizes + ([] if output_size is None else [output_size]):
        if int(size) != size or size < 1:
            raise ValueError("DQN head: layer sizes must be positive ints, got "
                             f"input_size={input_size}, hidden_sizes={sizes}, "
                             f"output_size={output_size}.")
    layers, last = [], int(input_size)
    for size in sizes:
        layers += [linear_layer(last, size, noisy), torch.nn.ReLU()]
        last = size
    if output_size is not None:
        layers.append(linear_layer(last, int(output_size), noisy))
        last = int(output_size)
    mlp = torch.nn.Sequential(*layers)
    mlp.output_size = last
    return mlp


class NoisyModelMixin:
    """``reset_noise`` / ``set_noise`` over every ``NoisyLinear`` inside a model.

    Models set ``self.noisy``; agents check it to decide whether to resample noise while
    sampling and to switch it off in evaluation.  On a model without noisy layers both
    methods do nothing.
    """

    noisy = False

    def reset_noise(self) -> None:
        """New noise sample in every noisy layer."""
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.reset_noise()

    def set_noise(self, enabled: bool) -> None:
        """Turn the noise of every noisy layer on (sampling, training) or off (evaluation)."""
        for module in self.modules():
            if isinstance(module, NoisyLinear):
                module.noise_enabled = bool(enabled)
