"""Small model utilities: conv output shapes, orthogonal init, gradient scaling, state-dict updates.

``update_state_dict`` is how target networks track online ones (hard copy or
Polyak averaging) and how sampler models receive new parameters;
``strip_ddp_state_dict`` lets a DistributedDataParallel-wrapped learner feed
plain (unwrapped) sampler models.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping

import torch

__all__ = ["conv2d_output_shape", "orthogonal_init_", "HIDDEN_GAIN", "nonlinearity_class",
           "NONLINEARITIES", "ScaleGrad", "scale_grad",
           "update_state_dict", "strip_ddp_state_dict"]

IntOrPair = int | tuple[int, int]

# Gain of orthogonal init for layers followed by a ReLU (or tanh) nonlinearity.
HIDDEN_GAIN = math.sqrt(2.0)


# Nonlinearities by the names a config file or ``--set`` can give (class types cannot be
# written in JSON): ``--set agent.model_kwargs.hidden_nonlinearity=relu``.
NONLINEARITIES: dict[str, type[torch.nn.Module]] = {
    "relu": torch.nn.ReLU, "tanh": torch.nn.Tanh, "elu": torch.nn.ELU, "gelu": torch.nn.GELU,
    "silu": torch.nn.SiLU, "leaky_relu": torch.nn.LeakyReLU, "sigmoid": torch.nn.Sigmoid,
}


def nonlinearity_class(value: str | type[torch.nn.Module] | None, name: str = "nonlinearity",
                       allow_none: bool = False) -> type[torch.nn.Module] | None:
    """A torch module class from a class or one of ``NONLINEARITIES``' names (any case);
    None (or ``"none"``/``"linear"``) where ``allow_none``. Anything else is a ValueError that
    names the valid choices."""
    if isinstance(value, type) and issubclass(value, torch.nn.Module):
        return value
    if value is None or (isinstance(value, str) and value.lower() in ("none", "linear")):
        if allow_none:
            return None
    elif isinstance(value, str) and value.lower() in NONLINEARITIES:
        return NONLINEARITIES[value.lower()]
    choices = ", ".join(sorted(NONLINEARITIES)) + (", none" if allow_none else "")
    raise ValueError(f"{name} must be a torch.nn.Module class or one of {choices}; got {value!r}")


def _pair(value: IntOrPair, name: str) -> tuple[int, int]:
    if isinstance(value, (tuple, list)):
        if len(value) != 2:
            raise ValueError(f"conv2d_output_shape: {name} must be an int or a pair, "
                             f"got {value!r}.")
        return int(value[0]), int(value[1])
    return int(value), int(value)


def conv2d_output_shape(
    h: int, w: int, kernel_size: IntOrPair = 1, stride: IntOrPair = 1, padding: IntOrPair = 0,
    dilation: IntOrPair = 1
) -> tuple[int, int]:
    """Output (H, W) of a convolution or pooling layer on an (h, w) input.

    Same arithmetic as ``torch.nn.Conv2d`` / ``MaxPool2d``:
    ``out = floor((in + 2*padding - dilation*(kernel - 1) - 1) / stride + 1)``.
    Each of kernel_size, stride, padding, dilation may be an int or an (h, w) pair.
    """
    kh, kw = _pair(kernel_size, "kernel_size")
    sh, sw = _pair(stride, "stride")
    ph, pw = _pair(padding, "padding")
    dh, dw = _pair(dilation, "dilation")
    h_out = (h + 2 * ph - dh * (kh - 1) - 1) // sh + 1
    w_out = (w + 2 * pw - dw * (kw - 1) - 1) // sw + 1
    return h_out, w_out


def orthogonal_init_(layer: torch.nn.Module, gain: float) -> torch.nn.Module:
    """Orthogonal weights scaled by ``gain``, zero bias; returns the layer."""
    torch.nn.init.orthogonal_(layer.weight, gain=gain)
    if layer.bias is not None:
        torch.nn.init.zeros_(layer.bias)
    return layer


class ScaleGrad(torch.autograd.Function):
    """Identity in the forward pass; multiplies the gradient by ``scale`` going back.

    Used e.g. to scale the gradient that dueling DQN heads send into the shared
    convolutional trunk.  Call as ``ScaleGrad.apply(tensor, scale)`` or
    ``scale_grad(tensor, scale)``.
    """

    @staticmethod
    def forward(ctx, tensor: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        return tensor.view_as(tensor)

    @staticmethod
    def backward(ctx, grad_output: torch.Tensor):
        return grad_output * ctx.scale, None


scale_grad = ScaleGrad.apply


def strip_ddp_state_dict(state_dict: Mapping[str, torch.Tensor]) -> OrderedDict[str, torch.Tensor]:
    """Remove one leading ``"module."`` from each key (DistributedDataParallel's prefix).

    Keys without the prefix are kept as they are; the value tensors are not copied.
    """
    prefix = "module."
    stripped = OrderedDict(
        (key[len(prefix):] if key.startswith(prefix) else key, value)
        for key, value in state_dict.items()
    )
    metadata = getattr(state_dict, "_metadata", None)
    if metadata is not None:
        stripped._metadata = OrderedDict(
            (key[len(prefix):] if key.startswith(prefix) else ("" if key == "module" else key),
             value)
            for key, value in metadata.items()
        )
    return stripped


def update_state_dict(
    model: torch.nn.Module, state_dict: Mapping[str, torch.Tensor], tau: float = 1,
    strip_ddp: bool = True
) -> None:
    """Copy (``tau == 1``) or Polyak-average (``0 < tau < 1``) ``state_dict`` into ``model``.

    Soft update: ``model <- tau * new + (1 - tau) * model`` for floating-point
    entries; integer buffers (e.g. counters) are copied.  Keys must match the
    model's exactly (after stripping a DDP ``"module."`` prefix if ``strip_ddp``).
    """
    if not 0 < tau <= 1:
        raise ValueError(f"update_state_dict: tau must be in (0, 1], got {tau}.")
    if strip_ddp:
        state_dict = strip_ddp_state_dict(state_dict)
    if tau == 1:
        model.load_state_dict(state_dict)
        return
    own = model.state_dict()
    missing = sorted(set(own) - set(state_dict))
    unexpected = sorted(set(state_dict) - set(own))
    if missing or unexpected:
        raise KeyError(f"update_state_dict: missing keys {missing}, unexpected keys {unexpected}.")
    with torch.no_grad():
        for key, target in own.items():
            source = state_dict[key].to(device=target.device)
            if source.shape != target.shape:
                raise ValueError(
                    f"update_state_dict: shape mismatch for {key!r}: model {tuple(target.shape)}, "
                    f"state_dict {tuple(source.shape)}."
                )
            if torch.is_floating_point(target):
                target.mul_(1 - tau).add_(source.to(dtype=target.dtype), alpha=tau)
            else:
                target.copy_(source)
