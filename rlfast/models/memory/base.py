"""What every memory core promises: sequences in, sequences out, a fixed-shape state.

A memory core reads ``x`` ``[T, B, input_size]`` from a state and returns ``[T, B,
output_size]`` with the state after the last step.  The state is a namedarraytuple of
tensors in the layout ``[N, B, H]`` (``B`` always dim 1), the cudnn layout the samplers and
replay buffers already store per environment, and its shapes never change: the GPU action
server keeps it in fixed device tensors that CUDA graphs can hold.  ``None`` means the zero
state, which is also "nothing remembered" (zeroing one environment's column forgets its
episode, the way the samplers reset a finished environment).

``reset`` ``[T, B]`` (bool or 0/1) zeroes an environment's state before step ``t``: a
sequence that crosses episode ends computes exactly what the per-step forward computes when
the state is zeroed at each episode start.  Passing it never reads a value on the host (the
recurrent cores then step one time step at a time).
"""
from __future__ import annotations

from abc import ABCMeta, abstractmethod
from typing import Any

import torch

from rlfast.utils.checks import check_positive

__all__ = ["MemoryCore", "check_core_inputs", "keep_mask"]


class MemoryCore(torch.nn.Module, metaclass=ABCMeta):
    """Base of the memory cores: ``forward(x, state=None, reset=None) -> (out, next_state)``.

    ``input_size``: features per step; ``hidden_size``: the core's width (the output size of
    every core here).  Subclasses define ``zero_state`` and ``forward``.
    """

    kind: str = ""

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__()
        owner = type(self).__name__
        self.input_size = check_positive(input_size, "input_size", integer=True, owner=owner)
        self.hidden_size = check_positive(hidden_size, "hidden_size", integer=True, owner=owner)
        self.output_size = self.hidden_size

    @abstractmethod
    def zero_state(self, batch_size: int, device: Any = None, dtype: torch.dtype | None = None):
        """The all-zero state for ``batch_size`` environments (``[N, batch_size, H]`` leaves)."""

    @abstractmethod
    def forward(self, x: torch.Tensor, state: Any = None,
                reset: torch.Tensor | None = None) -> tuple[torch.Tensor, Any]:
        """``(out [T, B, output_size], state after the last step)``."""

    def state_from(self, state: Any, batch_size: int, dtype: torch.dtype, device: Any):
        """``state`` as this core's namedarraytuple in ``dtype`` (zeros for None), checked."""
        if state is None:
            return self.zero_state(batch_size, device, dtype)
        state_type, layout = self._state_layout()
        if len(state) != len(layout):
            raise ValueError(f"{type(self).__name__}: a state has {len(layout)} tensors "
                             f"({', '.join(state_type._fields)}); got {len(state)}")
        leaves = []
        for (name, n, tail), got in zip(layout, state):
            if got.shape[0] != n or got.shape[1] != batch_size or tuple(got.shape[2:]) != tail:
                expected = [n, batch_size, *tail]
                raise ValueError(f"{type(self).__name__}: state.{name} must be {expected} "
                                 f"([N, B, H] for B={batch_size}); got {list(got.shape)}")
            leaves.append(got.to(dtype))
        return state_type(*leaves)

    def _state_layout(self) -> tuple[type, list]:
        """The state's type and ``(field, N, trailing shape)`` per leaf, found once."""
        cached = self.__dict__.get("_layout")
        if cached is None:
            example = self.zero_state(1, "meta")
            cached = (type(example), [(name, leaf.shape[0], tuple(leaf.shape[2:]))
                                      for name, leaf in zip(example._fields, example)])
            self.__dict__["_layout"] = cached
        return cached


def check_core_inputs(core: MemoryCore, x: torch.Tensor, reset: torch.Tensor | None) -> None:
    """``x`` must be ``[T, B, input_size]`` and ``reset`` (if given) ``[T, B]``."""
    if x.dim() != 3 or x.shape[-1] != core.input_size:
        raise ValueError(f"{type(core).__name__}: input must be [T, B, {core.input_size}]; "
                         f"got {list(x.shape)}")
    if reset is not None and tuple(reset.shape) != tuple(x.shape[:2]):
        raise ValueError(f"{type(core).__name__}: reset must be [T, B] = {list(x.shape[:2])}; "
                         f"got {list(reset.shape)}")


def keep_mask(reset: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``1 - reset`` as ``[T, B, 1]`` of ``dtype``: multiplies a ``[B, H]`` state at step t."""
    return (1 - reset.to(dtype)).unsqueeze(-1)
