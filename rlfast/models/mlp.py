"""Multilayer perceptron building block."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from rlfast.models.utils import nonlinearity_class
from rlfast.utils.checks import check_int

__all__ = ["MlpModel", "size_list"]


def size_list(sizes: int | Sequence[int] | None) -> list[int]:
    """Layer sizes as a list of ints: an int is one layer, None means none (non-integral
    sizes are refused here; the layers check that sizes are positive)."""
    if sizes is None:
        return []
    if isinstance(sizes, int):
        return [sizes]
    return [check_int(s, "layer size") for s in sizes]


class MlpModel(torch.nn.Module):
    """Fully connected layers with a nonlinearity after each hidden layer.

    Args:
        input_size: number of inputs.
        hidden_sizes: list of hidden layer sizes (an int means one layer; an
            empty list gives a linear model when ``output_size`` is set).
        output_size: size of a final *linear* layer; if None, the last hidden
            layer (with its nonlinearity) is the output.
        nonlinearity: torch Module class (not a function), e.g. ``torch.nn.ReLU``, or its
            name in ``rlfast.models.utils.NONLINEARITIES`` (``"relu"``), as configs give it.

    ``forward`` expects ``[B, input_size]`` (any leading dims work, as in
    ``torch.nn.Linear``).
    """

    def __init__(
        self,
        input_size: int,
        hidden_sizes: int | Sequence[int] | None,
        output_size: int | None = None,
        nonlinearity: type[torch.nn.Module] | str = torch.nn.ReLU,
    ):
        super().__init__()
        nonlinearity = nonlinearity_class(nonlinearity, "MlpModel: nonlinearity")
        if isinstance(hidden_sizes, int):
            hidden_sizes = [hidden_sizes]
        elif hidden_sizes is None:
            hidden_sizes = []
        hidden_sizes = list(hidden_sizes)
        for size in [input_size] + hidden_sizes + ([] if output_size is None else [output_size]):
            if int(size) != size or size < 1:
                raise ValueError(
                    f"MlpModel: layer sizes must be positive ints, got input_size={input_size}, "
                    f"hidden_sizes={hidden_sizes}, output_size={output_size}."
                )
        layers = []
        last_size = input_size
        for size in hidden_sizes:
            layers.extend([torch.nn.Linear(last_size, size), nonlinearity()])
            last_size = size
        if output_size is not None:
            layers.append(torch.nn.Linear(last_size, output_size))
            last_size = output_size
        self.model = torch.nn.Sequential(*layers)
        self._output_size = last_size

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        """Compute the MLP on ``input`` of shape ``[B, input_size]``."""
        return self.model(input)

    @property
    def output_size(self) -> int:
        """Size of the last dimension of the output."""
        return self._output_size
