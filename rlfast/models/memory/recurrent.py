"""Recurrent memory cores: LSTM, GRU and the layer-normalised LSTM.

``lstm`` and ``gru`` keep torch's fused modules (cudnn on the GPU) for sequences without
resets, the sampler's per-step calls and R2D1's replays; with ``reset`` they take the input
projections of all steps in one matmul and step the recurrence in a loop, zeroing the state
where an episode starts.  ``ln_lstm`` (Ba, Kiros and Hinton 2016, "Layer Normalization",
section 3.1 for recurrent networks) normalises the input and recurrent projections and the
cell, so it always runs the loop.
"""
from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
import torch.nn.functional as F

from rlfast.models.memory.base import MemoryCore, check_core_inputs, keep_mask
from rlfast.utils.collections import namedarraytuple

__all__ = ["RnnState", "GruState", "LstmCore", "GruCore", "LnLstmCore"]

# Each field is [num_layers=1, B, hidden_size], the layout torch.nn.LSTM uses.
RnnState = namedarraytuple("RnnState", ["h", "c"])
GruState = namedarraytuple("GruState", ["h"])


def _zero_lstm_state(batch_size: int, hidden_size: int, device: Any,
                     dtype: torch.dtype | None) -> RnnState:
    shape = (1, batch_size, hidden_size)
    return RnnState(h=torch.zeros(shape, device=device, dtype=dtype),
                    c=torch.zeros(shape, device=device, dtype=dtype))


def _cpu_autocast_off(x: torch.Tensor):
    """The fused LSTM on the CPU in float32 even under a bf16 autocast: CPU autocast sends it
    to oneDNN's bf16 RNN primitive, which CPUs without AVX-512 BF16 (an AVX2-only AMD EPYC, for
    one) cannot create ("could not create a primitive descriptor for the LSTM forward
    propagation primitive").  On the GPU cuDNN runs it in bf16 as asked."""
    return torch.autocast("cpu", enabled=False) if x.device.type == "cpu" else nullcontext()


def _lstm_cell(gates: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Gate pre-activations ``[B, 4H]`` (torch order i, f, g, o) and ``c`` -> ``(h', c')``."""
    i, f, g, o = gates.chunk(4, dim=-1)
    c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return torch.sigmoid(o) * torch.tanh(c), c


class LstmCore(MemoryCore):
    """One-layer LSTM; state ``RnnState(h, c)`` of ``[1, B, hidden_size]`` tensors."""

    kind = "lstm"

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.lstm = torch.nn.LSTM(self.input_size, self.hidden_size)

    def zero_state(self, batch_size: int, device: Any = None, dtype: torch.dtype | None = None):
        """``RnnState`` of zeros, ``[1, batch_size, hidden_size]`` each."""
        return _zero_lstm_state(batch_size, self.hidden_size, device, dtype)

    def forward(self, x: torch.Tensor, state: Any = None,
                reset: torch.Tensor | None = None) -> tuple[torch.Tensor, RnnState]:
        """The LSTM over ``x`` ``[T, B, input_size]``; see ``rlfast.models.memory.base``."""
        check_core_inputs(self, x, reset)
        dtype = self.lstm.weight_ih_l0.dtype
        x = x.to(dtype)
        if reset is None:
            hc = (None if state is None
                  else tuple(self.state_from(state, x.shape[1], dtype, x.device)))
            with _cpu_autocast_off(x):
                out, (h, c) = self.lstm(x, hc)
            return out, RnnState(h=h, c=c)
        h, c = self.state_from(state, x.shape[1], dtype, x.device)
        h, c = h[0], c[0]
        lstm = self.lstm
        x_gates = F.linear(x, lstm.weight_ih_l0, lstm.bias_ih_l0 + lstm.bias_hh_l0)  # [T, B, 4H]
        keep = keep_mask(reset, dtype)
        outs = []
        for t in range(x.shape[0]):
            h, c = h * keep[t], c * keep[t]
            h, c = _lstm_cell(x_gates[t] + F.linear(h, lstm.weight_hh_l0), c)
            outs.append(h)
        return torch.stack(outs), RnnState(h=h.unsqueeze(0), c=c.unsqueeze(0))


class GruCore(MemoryCore):
    """One-layer GRU; state ``GruState(h)`` of one ``[1, B, hidden_size]`` tensor."""

    kind = "gru"

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        self.gru = torch.nn.GRU(self.input_size, self.hidden_size)

    def zero_state(self, batch_size: int, device: Any = None, dtype: torch.dtype | None = None):
        """``GruState`` of zeros, ``[1, batch_size, hidden_size]``."""
        return GruState(h=torch.zeros((1, batch_size, self.hidden_size), device=device,
                                      dtype=dtype))

    def forward(self, x: torch.Tensor, state: Any = None,
                reset: torch.Tensor | None = None) -> tuple[torch.Tensor, GruState]:
        """The GRU over ``x`` ``[T, B, input_size]``; see ``rlfast.models.memory.base``."""
        check_core_inputs(self, x, reset)
        gru = self.gru
        dtype = gru.weight_ih_l0.dtype
        x = x.to(dtype)
        if reset is None:
            h0 = None if state is None else self.state_from(state, x.shape[1], dtype, x.device).h
            out, h = gru(x, h0)
            return out, GruState(h=h)
        h = self.state_from(state, x.shape[1], dtype, x.device).h[0]
        x_gates = F.linear(x, gru.weight_ih_l0, gru.bias_ih_l0)  # [T, B, 3H], order r, z, n
        keep = keep_mask(reset, dtype)
        outs = []
        for t in range(x.shape[0]):
            h = h * keep[t]
            xr, xz, xn = x_gates[t].chunk(3, dim=-1)
            hr, hz, hn = F.linear(h, gru.weight_hh_l0, gru.bias_hh_l0).chunk(3, dim=-1)
            r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
            n = torch.tanh(xn + r * hn)
            h = (1 - z) * n + z * h
            outs.append(h)
        return torch.stack(outs), GruState(h=h.unsqueeze(0))


class LnLstmCore(MemoryCore):
    """Layer-normalised LSTM: ``gates = LN(W_x x) + LN(W_h h) + b``, ``c' = f c + i g``,
    ``h' = o tanh(LN(c'))``; state ``RnnState(h, c)`` like ``LstmCore``.  The forget-gate bias
    starts at 1 (Jozefowicz et al. 2015), the usual start for a long memory."""

    kind = "ln_lstm"

    def __init__(self, input_size: int, hidden_size: int):
        super().__init__(input_size, hidden_size)
        H = self.hidden_size
        self.input_proj = torch.nn.Linear(self.input_size, 4 * H, bias=False)
        self.hidden_proj = torch.nn.Linear(H, 4 * H, bias=False)
        self.input_norm = torch.nn.LayerNorm(4 * H)
        self.hidden_norm = torch.nn.LayerNorm(4 * H)
        self.cell_norm = torch.nn.LayerNorm(H)
        self.bias = torch.nn.Parameter(torch.zeros(4 * H))
        with torch.no_grad():
            self.bias[H:2 * H] = 1.0
            torch.nn.init.orthogonal_(self.hidden_proj.weight)

    def zero_state(self, batch_size: int, device: Any = None, dtype: torch.dtype | None = None):
        """``RnnState`` of zeros, ``[1, batch_size, hidden_size]`` each."""
        return _zero_lstm_state(batch_size, self.hidden_size, device, dtype)

    def forward(self, x: torch.Tensor, state: Any = None,
                reset: torch.Tensor | None = None) -> tuple[torch.Tensor, RnnState]:
        """The layer-normalised LSTM over ``x`` ``[T, B, input_size]``."""
        check_core_inputs(self, x, reset)
        dtype = self.input_proj.weight.dtype
        x = x.to(dtype)
        h, c = self.state_from(state, x.shape[1], dtype, x.device)
        h, c = h[0], c[0]
        x_gates = self.input_norm(self.input_proj(x)) + self.bias  # [T, B, 4H]
        keep = None if reset is None else keep_mask(reset, dtype)
        outs = []
        for t in range(x.shape[0]):
            if keep is not None:
                h, c = h * keep[t], c * keep[t]
            i, f, g, o = (x_gates[t] + self.hidden_norm(self.hidden_proj(h))).chunk(4, dim=-1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(self.cell_norm(c))
            outs.append(h)
        return torch.stack(outs), RnnState(h=h.unsqueeze(0), c=c.unsqueeze(0))
