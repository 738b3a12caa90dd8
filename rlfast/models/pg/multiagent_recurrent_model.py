"""The recurrent multi-agent actor-critic model: a memory core per agent column (rMAPPO).

Every batch column is one agent (:mod:`rlfast.envs.multiagent`) with the observation layout
``[local | one-hot agent id | global state]``. The policy embeds the local observation and
the agent id (LayerNorm, then an MLP), a memory core (:mod:`rlfast.models.memory`: GRU,
LSTM, ...) reads the embedding with the previous action and reward, and linear heads give
the action distribution. Since the columns are agents, the core's state ``[N, B, H]`` holds
one state per agent, and the samplers' per-column resets (an agent's episode ends) and the
losses' ``reset`` (``[T, B]``, where a column's episode starts) act on each agent alone.
The parameters are shared by every agent (the agent id tells them apart), as in the MAPPO
paper's recurrent variant. The value function reads the core's output (decentralised), or
with ``central_critic`` the global state and the agent id through a feed-forward MLP: the
global state is the full state the agents only see parts of, so the critic needs no memory.
"""
from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn.functional as F

from rlfast.models.pg.model_parts import policy_value_heads
from rlfast.models.pg.multiagent_model import AgentMlp, check_layout
from rlfast.models.pg.recurrent_body import RecurrentBody, RecurrentModel
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["MultiAgentRecurrentPgModel"]


class MultiAgentRecurrentPgModel(RecurrentModel):
    """Shared-parameter recurrent policy (and critic) over agent columns; see the module
    docstring.

    ``layout``: ``(local_size, id_size, state_size)`` of the observation vector; ``n_agents``:
    the number of agents; ``shared`` must be True (one core for every agent: separate
    per-agent recurrent parameters are not built). ``action_size``: discrete actions, or the
    action dimension with ``continuous``. ``hidden_sizes``: the policy embedding's MLP (and
    the central critic's); ``lstm_size``: the core's width; ``core`` and ``memory_len`` pick
    the memory core. ``forward(observation, prev_action, prev_reward, init_rnn_state=None,
    reset=None)`` returns ``(pi, value, next_rnn_state)`` or, with ``continuous``,
    ``(mu, log_std, value, next_rnn_state)``, for leading dims ``[]``, ``[B]`` or ``[T, B]``;
    ``prev_action`` is one-hot for discrete actions."""

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 layout: Sequence[int], n_agents: int, shared: bool = True,
                 central_critic: bool = False, hidden_sizes: Sequence[int] | None = None,
                 hidden_nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
                 feature_norm: bool = True, continuous: bool = False,
                 init_log_std: float = 0.0, lstm_size: int = 64, core: str = "gru",
                 memory_len: int = 32):
        super().__init__()
        local, id_size, state = check_layout(observation_shape, layout,
                                             "MultiAgentRecurrentPgModel")
        if not shared:
            raise ValueError("MultiAgentRecurrentPgModel: recurrent multi-agent agents share "
                             "their parameters (agent.shared=True); got shared=False")
        if central_critic and state == 0:
            raise ValueError("MultiAgentRecurrentPgModel: central_critic=True needs the global "
                             "state in the observation (env.global_state=True)")
        self.layout, self.n_agents = (local, id_size, state), int(n_agents)
        self.shared, self.central_critic = True, bool(central_critic)
        self.continuous, self.action_size = bool(continuous), int(action_size)
        self.observation_shape = (local + id_size + state,)
        self.normalize_observation = False
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        self.pi_input = local + id_size
        self.pi_norm = torch.nn.LayerNorm(self.pi_input) if feature_norm else torch.nn.Identity()
        self.body = RecurrentBody((self.pi_input,), self.action_size, hidden_sizes, lstm_size,
                                  hidden_nonlinearity, False, 10.0, 1e-6, core=core,
                                  memory_len=memory_len)
        self.pi, value_head = policy_value_heads(int(lstm_size), self.action_size)
        if self.central_critic:
            self.value_input = state + id_size
            self.value_norm = (torch.nn.LayerNorm(self.value_input) if feature_norm
                               else torch.nn.Identity())
            self.value = AgentMlp(1, self.value_input, hidden_sizes, 1, hidden_nonlinearity,
                                  output_gain=1.0)
        else:
            self.value = value_head
        if self.continuous:
            self.log_std = torch.nn.Parameter(torch.full((self.action_size,),
                                                         float(init_log_std)))

    def encode(self, observation: torch.Tensor) -> torch.Tensor:
        """The policy's input: the local observation and agent id, feature-normalized."""
        return self.pi_norm(observation[..., :self.pi_input].to(self.body.dtype))

    def heads(self, core_out: torch.Tensor) -> tuple:
        """The policy outputs from the flat core output ``[T*B, lstm_size]`` (the value is
        computed in :meth:`forward`, from the core or the global state)."""
        out = self.pi(core_out)
        if self.continuous:
            return torch.tanh(out), self.log_std.expand(out.shape[0], self.action_size)
        return (F.softmax(out, dim=-1),)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor,
                prev_reward: torch.Tensor, init_rnn_state: Any = None,
                reset: torch.Tensor | None = None) -> tuple:
        """The policy's outputs and the value with the observation's leading dims, then the
        core's state after the last step."""
        core_out, next_rnn_state, lead_dim, T, B = self.body(
            self.encode(observation), prev_action, prev_reward, init_rnn_state, reset)
        flat = core_out.reshape(T * B, -1)
        outputs = self.heads(flat)
        if self.central_critic:
            _, T_obs, B_obs, _ = infer_leading_dims(observation, 1)
            obs = observation.reshape(T_obs * B_obs, -1).to(flat.dtype)
            local, id_size, _ = self.layout
            value_in = torch.cat([obs[:, local + id_size:], obs[:, local:local + id_size]],
                                 dim=-1)
            value = self.value(self.value_norm(value_in), None).squeeze(-1)
        else:
            value = self.value(flat).squeeze(-1)
        outputs = restore_leading_dims((*outputs, value), lead_dim, T, B)
        return (*outputs, next_rnn_state)
