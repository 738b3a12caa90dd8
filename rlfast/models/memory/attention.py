"""Windowed causal self-attention as a memory core, its past keys and values in the state.

Each step embeds its input, attends over itself and the ``memory_len`` steps before it in the
same episode, and passes the result through a pre-norm transformer block (attention and a
two-layer MLP, each with a residual).  The state caches the window: the keys and values of the
last ``memory_len`` steps, newest last, and a 0/1 ``valid`` flag per slot, so the state has a
fixed shape ``[memory_len, B, .]`` whatever the episode's length, and a zeroed column is an
empty memory.  Position enters as a learned bias per head and per age (0 for the step itself
up to ``memory_len``), added to the attention logits, so the same weights serve the per-step
calls of the sampler and the sequence calls of training.
"""
from __future__ import annotations

import math
from typing import Any

import torch

from rlfast.models.memory.base import MemoryCore, check_core_inputs
from rlfast.utils.checks import check_int
from rlfast.utils.collections import namedarraytuple

__all__ = ["AttentionState", "AttentionCore"]

AttentionState = namedarraytuple("AttentionState", ["key", "value", "valid"])


class AttentionCore(MemoryCore):
    """Causal self-attention over the last ``memory_len`` steps (and the current one).

    ``hidden_size`` is the model width, split over ``n_heads`` heads; the state is an
    ``AttentionState(key, value, valid)`` of ``[memory_len, B, hidden_size]``,
    ``[memory_len, B, hidden_size]`` and ``[memory_len, B, 1]`` tensors.  A step sees the
    cached steps that are still inside its window and belong to its episode (``reset`` and a
    zeroed state both empty the window).
    """

    kind = "attention"

    def __init__(self, input_size: int, hidden_size: int, memory_len: int = 32, n_heads: int = 4):
        super().__init__(input_size, hidden_size)
        owner = "AttentionCore"
        self.memory_len = check_int(memory_len, "memory_len", minimum=1, owner=owner)
        self.n_heads = check_int(n_heads, "n_heads", minimum=1, owner=owner)
        if self.hidden_size % self.n_heads:
            raise ValueError(f"{owner}: hidden_size {self.hidden_size} must be a multiple of "
                             f"n_heads {self.n_heads}")
        D = self.hidden_size
        self.embed = torch.nn.Linear(self.input_size, D)
        self.attn_norm = torch.nn.LayerNorm(D)
        self.qkv = torch.nn.Linear(D, 3 * D)
        self.attn_out = torch.nn.Linear(D, D)
        self.mlp_norm = torch.nn.LayerNorm(D)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(D, 2 * D), torch.nn.ReLU(),
                                       torch.nn.Linear(2 * D, D))
        self.out_norm = torch.nn.LayerNorm(D)
        # Learned logit bias per head and age 0..memory_len (T5-style relative positions).
        self.age_bias = torch.nn.Parameter(torch.zeros(self.n_heads, self.memory_len + 1))

    def zero_state(self, batch_size: int, device: Any = None, dtype: torch.dtype | None = None):
        """An empty window: ``AttentionState`` of zeros."""
        K, D = self.memory_len, self.hidden_size
        return AttentionState(key=torch.zeros((K, batch_size, D), device=device, dtype=dtype),
                              value=torch.zeros((K, batch_size, D), device=device, dtype=dtype),
                              valid=torch.zeros((K, batch_size, 1), device=device, dtype=dtype))

    def forward(self, x: torch.Tensor, state: Any = None,
                reset: torch.Tensor | None = None) -> tuple[torch.Tensor, AttentionState]:
        """Attend over the cached window and the new steps of ``x`` ``[T, B, input_size]``."""
        check_core_inputs(self, x, reset)
        dtype = self.embed.weight.dtype
        T, B = x.shape[:2]
        K, D, nh = self.memory_len, self.hidden_size, self.n_heads
        cache = self.state_from(state, B, dtype, x.device)
        e = self.embed(x.to(dtype))                                          # [T, B, D]
        q, k, v = self.qkv(self.attn_norm(e)).chunk(3, dim=-1)
        keys = torch.cat([cache.key, k], dim=0)                              # [K+T, B, D]
        values = torch.cat([cache.value, v], dim=0)
        allowed, episode, cache_ok = self._allowed(T, B, cache.valid, reset, x.device)
        # age of key s for query t: cache slot s < K is K + t - s steps back, new step j = t - j
        age = (torch.arange(T, device=x.device)[:, None] + K
               - torch.arange(K + T, device=x.device)[None, :])               # [T, K+T]
        bias = self.age_bias[:, age.clamp(0, K)]                             # [nh, T, K+T]
        logits = torch.einsum("tbhd,sbhd->bhts", q.reshape(T, B, nh, -1),
                              keys.reshape(K + T, B, nh, -1)) / math.sqrt(D // nh)
        logits = (logits + bias).masked_fill(~allowed.permute(2, 0, 1).unsqueeze(1), float("-inf"))
        attended = torch.einsum("bhts,sbhd->tbhd", torch.softmax(logits, dim=-1),
                                values.reshape(K + T, B, nh, -1)).reshape(T, B, D)
        y = e + self.attn_out(attended)
        out = self.out_norm(y + self.mlp(self.mlp_norm(y)))
        # The window the next step sees: the last K keys, valid if in the last step's episode.
        last = episode[-1]                                                   # [B]
        key_episode = torch.cat([torch.zeros(K, B, dtype=episode.dtype, device=x.device), episode])
        valid = torch.cat([cache_ok, torch.ones(T, B, dtype=torch.bool, device=x.device)])
        valid = (valid & (key_episode == last)).to(dtype).unsqueeze(-1)
        valid = valid[-K:]  # empty slots hold zeros, as a reset leaves them
        next_state = AttentionState(key=keys[-K:] * valid, value=values[-K:] * valid, valid=valid)
        return out, next_state

    def _allowed(self, T: int, B: int, cache_valid: torch.Tensor, reset: torch.Tensor | None,
                 device: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(allowed [T, K+T, B], episode [T, B], cache_ok [K, B])``: which keys each query
        may see (inside its window, in its episode, a filled cache slot), each step's episode
        number within the sequence, and which cache slots hold a step."""
        K = self.memory_len
        if reset is None:
            episode = torch.zeros(T, B, dtype=torch.long, device=device)
        else:
            episode = torch.cumsum(reset.to(torch.long), dim=0)             # [T, B]
        cache_ok = cache_valid[..., 0] > 0.5                                 # [K, B]
        t = torch.arange(T, device=device)[:, None]
        s = torch.arange(K + T, device=device)[None, :]
        window = (s >= t) & (s <= K + t)                                     # age in [0, K]
        key_episode = torch.cat([torch.zeros(K, B, dtype=episode.dtype, device=device), episode])
        same = key_episode[None, :, :] == episode[:, None, :]                # [T, K+T, B]
        key_ok = torch.cat([cache_ok, torch.ones(T, B, dtype=torch.bool, device=device)])
        return window[..., None] & same & key_ok[None], episode, cache_ok
