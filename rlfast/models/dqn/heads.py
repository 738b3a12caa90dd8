"""Q-value output heads: plain, dueling, distributional, and distributional dueling.

Every head maps features ``[..., input_size]`` to Q-values ``[..., output_size]`` or, for the
distributional heads, to per-action logits over return atoms ``[..., output_size, n_atoms]``
(the full models apply the softmax).  Each takes ``noisy=True`` to build its linear layers as
``NoisyLinear``.  ``make_q_head`` picks one from the (dueling, n_atoms) options so the Atari,
MLP and recurrent models all build their heads the same way.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.dqn.noisy import linear_layer, mlp_layers
from rlfast.models.utils import scale_grad
from rlfast.utils.checks import check_positive

__all__ = ["DuelingHeadModel", "DistributionalHeadModel", "DistributionalDuelingHeadModel",
           "make_q_head"]

DEFAULT_GRAD_SCALE = 2 ** (-1 / 2)
Sizes = int | Sequence[int] | None


def _check_sizes(owner: str, input_size, output_size, n_atoms=None) -> tuple:
    """``(output_size, n_atoms)`` as positive ints (``n_atoms`` None stays None); ``input_size``
    is checked too."""
    check_positive(input_size, "input_size", integer=True, owner=owner)
    output_size = check_positive(output_size, "output_size", integer=True, owner=owner)
    return output_size, (None if n_atoms is None
                         else check_positive(n_atoms, "n_atoms", integer=True, owner=owner))


class _DuelingStreams(torch.nn.Module):
    """Value and advantage streams, each with its own hidden layers, over shared input.

    The advantage output layer has no per-action bias; one bias shared by all actions is
    learned instead of one per action (it cancels in ``A - mean(A)``, so it only shows in
    ``advantage()``).
    ``width`` outputs per action and for the value (1 for Q-values, ``n_atoms`` for
    distributions).  The gradient flowing back into the input is multiplied by ``grad_scale``.
    """

    def __init__(self, input_size: int, hidden_sizes: Sizes, output_size: int, width: int,
                 grad_scale: float, noisy: bool):
        super().__init__()
        self.output_size, self.width, self.grad_scale = output_size, width, float(grad_scale)
        self.value = mlp_layers(input_size, hidden_sizes, width, noisy)
        self.advantage_hidden = mlp_layers(input_size, hidden_sizes, None, noisy)
        self.advantage_out = linear_layer(self.advantage_hidden.output_size, output_size * width,
                                          noisy, bias=False)
        self.advantage_bias = torch.nn.Parameter(torch.zeros(width))

    def streams(self, input: torch.Tensor):
        """(value ``[..., 1, width]``, advantage ``[..., A, width]``), gradient-scaled input."""
        x = scale_grad(input, self.grad_scale)
        value = self.value(x).unsqueeze(-2)
        return value, self._advantage(x)

    def _advantage(self, input: torch.Tensor) -> torch.Tensor:
        a = self.advantage_out(self.advantage_hidden(input))
        a = a.reshape(*a.shape[:-1], self.output_size, self.width)
        return a + self.advantage_bias

    def combine(self, input: torch.Tensor) -> torch.Tensor:
        """``V + A - mean_a(A)`` shaped ``[..., A, width]``."""
        value, advantage = self.streams(input)
        return value + advantage - advantage.mean(dim=-2, keepdim=True)


class DuelingHeadModel(torch.nn.Module):
    """Dueling Q head (Wang et al., 2016): ``Q(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``.

    Separate value (scalar) and advantage (one per action) MLP streams, each with
    ``hidden_sizes`` ReLU layers.  ``forward`` multiplies the gradient flowing back into the
    shared input by ``grad_scale`` (1/sqrt(2) by default, since both streams send gradient into
    the trunk).  ``advantage(input)`` returns the shared-bias advantages ``[..., output_size]``.
    """

    def __init__(self, input_size: int, hidden_sizes: Sizes, output_size: int,
                 grad_scale: float = DEFAULT_GRAD_SCALE, noisy: bool = False):
        super().__init__()
        self.output_size, _ = _check_sizes("DuelingHeadModel", input_size, output_size)
        self.grad_scale = float(grad_scale)
        self.streams = _DuelingStreams(input_size, hidden_sizes, self.output_size, 1, grad_scale,
                                       noisy)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Q-values ``[..., output_size]`` from features ``[..., input_size]``."""
        return self.streams.combine(input).squeeze(-1)

    def advantage(self, input: torch.Tensor) -> torch.Tensor:
        """Advantages with their shared bias, ``[..., output_size]`` (no gradient scaling)."""
        return self.streams._advantage(input).squeeze(-1)

    def value(self, input: torch.Tensor) -> torch.Tensor:
        """State values ``[...]`` (no gradient scaling)."""
        return self.streams.value(input).squeeze(-1)


class DistributionalHeadModel(torch.nn.Module):
    """MLP head whose output is reshaped to ``[..., output_size, n_atoms]`` logits.

    ``layer_sizes`` are the hidden layer sizes (ReLU).  The output is *logits*: take
    ``softmax`` / ``log_softmax`` over the last dim for per-action atom probabilities.
    """

    def __init__(self, input_size: int, layer_sizes: Sizes, output_size: int, n_atoms: int,
                 noisy: bool = False):
        super().__init__()
        self.output_size, self.n_atoms = _check_sizes("DistributionalHeadModel", input_size,
                                                      output_size, n_atoms)
        self.mlp = mlp_layers(input_size, layer_sizes, self.output_size * self.n_atoms, noisy)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., output_size, n_atoms]`` from features ``[..., input_size]``."""
        out = self.mlp(input)
        return out.reshape(*out.shape[:-1], self.output_size, self.n_atoms)


class DistributionalDuelingHeadModel(torch.nn.Module):
    """Dueling head over atoms (Rainbow): ``logits(s, a) = V(s) + A(s, a) - mean_a' A(s, a')``.

    Like ``DuelingHeadModel`` but the value stream outputs ``n_atoms`` and the advantage stream
    ``output_size * n_atoms`` values; the combination is per atom and the result is *logits*
    ``[..., output_size, n_atoms]`` (softmax over atoms gives the probabilities).
    """

    def __init__(self, input_size: int, hidden_sizes: Sizes, output_size: int, n_atoms: int,
                 grad_scale: float = DEFAULT_GRAD_SCALE, noisy: bool = False):
        super().__init__()
        self.output_size, self.n_atoms = _check_sizes("DistributionalDuelingHeadModel", input_size,
                                                      output_size, n_atoms)
        self.grad_scale = float(grad_scale)
        self.streams = _DuelingStreams(input_size, hidden_sizes, self.output_size, self.n_atoms,
                                       grad_scale, noisy)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Logits ``[..., output_size, n_atoms]`` from features ``[..., input_size]``."""
        return self.streams.combine(input)

    def advantage(self, input: torch.Tensor) -> torch.Tensor:
        """Per-atom advantages with their shared bias, ``[..., output_size, n_atoms]``."""
        return self.streams._advantage(input)


def make_q_head(input_size: int, hidden_sizes: Sizes, output_size: int, dueling: bool = False,
                noisy: bool = False, n_atoms: int | None = None) -> torch.nn.Module:
    """The Q head for the given options: ``[..., A]`` Q-values, or ``[..., A, n_atoms]`` logits."""
    if n_atoms is None:
        if dueling:
            return DuelingHeadModel(input_size, hidden_sizes, output_size, noisy=noisy)
        return mlp_layers(input_size, hidden_sizes,
                          check_positive(output_size, "output_size", integer=True, owner="Q head"),
                          noisy)
    if dueling:
        return DistributionalDuelingHeadModel(input_size, hidden_sizes, output_size, n_atoms,
                                              noisy=noisy)
    return DistributionalHeadModel(input_size, hidden_sizes, output_size, n_atoms, noisy=noisy)
