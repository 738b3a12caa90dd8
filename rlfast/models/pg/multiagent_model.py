"""The multi-agent actor-critic model: shared or per-agent parameters, local or central critic.

Every batch column is one agent (:mod:`rlfast.envs.multiagent`), and its observation vector
is laid out ``[local | one-hot agent id | global state]``
(:func:`~rlfast.envs.multiagent.agent_observation_box`). The policy reads the local part and
the agent id; the value function reads the same (decentralised critic) or, with
``central_critic``, the global state and the agent id (MAPPO's agent-specific global state).
With ``shared=False`` each agent has its own policy and value parameters, held as one
stacked tensor per layer so that all agents still run in one batched forward: every layer
computes all agents' outputs with one matrix product and each row keeps its own agent's.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F

from rlfast.models.utils import HIDDEN_GAIN
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["MultiAgentPgModel", "AgentLinear", "AgentMlp"]


class AgentLinear(torch.nn.Module):
    """``n_agents`` linear layers applied row by row: row ``i`` of the input goes through
    layer ``agent[i]``. With one agent it is an ordinary linear layer."""

    def __init__(self, n_agents: int, input_size: int, output_size: int, gain: float):
        super().__init__()
        self.n_agents, self.output_size = int(n_agents), int(output_size)
        self.weight = torch.nn.Parameter(torch.empty(self.n_agents, input_size, output_size))
        self.bias = torch.nn.Parameter(torch.zeros(self.n_agents, output_size))
        for k in range(self.n_agents):  # each agent's layer gets its own orthogonal init
            layer = torch.empty(output_size, input_size)
            torch.nn.init.orthogonal_(layer, gain=gain)
            self.weight.data[k] = layer.T

    def forward(self, x: torch.Tensor, agent: torch.Tensor | None) -> torch.Tensor:
        if self.n_agents == 1:
            return torch.addmm(self.bias[0], x, self.weight[0])
        n, k, out = x.shape[0], self.n_agents, self.output_size
        # one product for every agent's layer: [N, in] @ [in, K*out] -> [N, K, out]
        stacked = self.weight.permute(1, 0, 2).reshape(x.shape[1], k * out)
        every = (x @ stacked).view(n, k, out)
        rows = torch.arange(n, device=x.device)
        return every[rows, agent] + self.bias[agent]


class AgentMlp(torch.nn.Module):
    """An MLP of :class:`AgentLinear` layers (hidden gain sqrt(2), output ``output_gain``)."""

    def __init__(self, n_agents: int, input_size: int, hidden_sizes: Sequence[int],
                 output_size: int, nonlinearity: type[torch.nn.Module], output_gain: float):
        super().__init__()
        sizes = [int(input_size), *[int(h) for h in hidden_sizes], int(output_size)]
        self.layers = torch.nn.ModuleList(
            AgentLinear(n_agents, a, b, HIDDEN_GAIN if i < len(sizes) - 2 else output_gain)
            for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])))
        self.nonlinearity = nonlinearity()

    def forward(self, x: torch.Tensor, agent: torch.Tensor | None) -> torch.Tensor:
        last = len(self.layers) - 1
        for i, layer in enumerate(self.layers):
            x = layer(x, agent)
            if i < last:
                x = self.nonlinearity(x)
        return x



def check_layout(observation_shape: Sequence[int], layout: Sequence[int],
                 owner: str) -> tuple[int, int, int]:
    """``(local, id, state)`` sizes of the multi-agent observation ``layout``; a
    ``ValueError`` naming ``owner`` unless the 1-D ``observation_shape`` holds exactly them."""
    local, id_size, state = (int(v) for v in layout)
    if tuple(observation_shape) != (local + id_size + state,):
        raise ValueError(f"{owner}: observation shape {tuple(observation_shape)} does not "
                         f"match the layout local={local} + id={id_size} + state={state}")
    return local, id_size, state

class MultiAgentPgModel(torch.nn.Module):
    """Policy and value MLPs over one agent's column (see the module docstring).

    ``layout``: ``(local_size, id_size, state_size)`` of the observation vector (the env's
    observation space's ``layout``); ``n_agents``: the number of agents. ``action_size``:
    the number of discrete actions, or the action dimension with ``continuous``.
    ``forward(observation, prev_action, prev_reward)`` returns ``(pi, value)`` (softmax
    probabilities) or, with ``continuous``, ``(mu, log_std, value)``, for leading dims
    ``[]``, ``[B]`` or ``[T, B]``. ``feature_norm``: a LayerNorm on each MLP's input (MAPPO's
    feature normalization). Orthogonal init, policy output gain 0.01, value output 1.
    """

    def __init__(self, observation_shape: Sequence[int], action_size: int,
                 layout: Sequence[int], n_agents: int, shared: bool = True,
                 central_critic: bool = False, hidden_sizes: Sequence[int] | None = None,
                 hidden_nonlinearity: type[torch.nn.Module] = torch.nn.ReLU,
                 feature_norm: bool = True, continuous: bool = False,
                 init_log_std: float = 0.0):
        super().__init__()
        local, id_size, state = check_layout(observation_shape, layout, "MultiAgentPgModel")
        if not shared and id_size != int(n_agents):
            raise ValueError("MultiAgentPgModel: separate per-agent parameters (shared=False) "
                             "need the agent id in the observation (env.agent_id=True)")
        if central_critic and state == 0:
            raise ValueError("MultiAgentPgModel: central_critic=True needs the global state in "
                             "the observation (env.global_state=True)")
        self.layout, self.n_agents = (local, id_size, state), int(n_agents)
        self.shared, self.central_critic = bool(shared), bool(central_critic)
        self.continuous, self.action_size = bool(continuous), int(action_size)
        self.observation_shape = (local + id_size + state,)
        hidden_sizes = [64, 64] if hidden_sizes is None else list(hidden_sizes)
        groups = 1 if shared else self.n_agents
        self.pi_input = local + id_size
        self.value_input = (state if central_critic else local) + id_size
        self.pi_norm = torch.nn.LayerNorm(self.pi_input) if feature_norm else torch.nn.Identity()
        self.value_norm = (torch.nn.LayerNorm(self.value_input) if feature_norm
                           else torch.nn.Identity())
        self.pi = AgentMlp(groups, self.pi_input, hidden_sizes, self.action_size,
                           hidden_nonlinearity, output_gain=0.01)
        self.value = AgentMlp(groups, self.value_input, hidden_sizes, 1, hidden_nonlinearity,
                              output_gain=1.0)
        if self.continuous:
            self.log_std = torch.nn.Parameter(torch.full((groups, self.action_size),
                                                         float(init_log_std)))

    def split(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None]:
        """``(policy input, value input, agent index or None)`` from flat observations
        ``[N, size]``."""
        local, id_size, state = self.layout
        ids = obs[:, local:local + id_size]
        pi_in = obs[:, :local + id_size]
        if self.central_critic:
            value_in = torch.cat([obs[:, local + id_size:], ids], dim=-1)
        else:
            value_in = pi_in
        agent = None if self.shared else ids.argmax(dim=-1)
        return pi_in, value_in, agent

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor = None,
                prev_reward: torch.Tensor = None) -> tuple:
        lead_dim, T, B, _ = infer_leading_dims(observation, 1)
        obs = observation.reshape(T * B, -1).to(self.pi.layers[0].weight.dtype)
        pi_in, value_in, agent = self.split(obs)
        out = self.pi(self.pi_norm(pi_in), agent)
        value = self.value(self.value_norm(value_in), agent).squeeze(-1)
        if self.continuous:
            log_std = self.log_std[0 if agent is None else agent]
            log_std = log_std.expand(out.shape[0], self.action_size)
            return restore_leading_dims((torch.tanh(out), log_std, value), lead_dim, T, B)
        return restore_leading_dims((F.softmax(out, dim=-1), value), lead_dim, T, B)
