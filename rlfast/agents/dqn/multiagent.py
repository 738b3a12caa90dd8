"""Independent value-based agents for multi-agent environments: one batch column per agent.

The DQN family on :class:`~rlfast.envs.multiagent.MultiAgentEnv` columns (``pz:`` envs), the
batched counterpart of the autonomous-learning-library's ``IndependentMultiagent``: every
agent learns its own Q-function from its own transitions, and the agents are batch columns,
so sampling, replay and updates run as for one agent over more environments. ``shared=True``
(default): one Q-network for every agent, which tells them apart by the one-hot agent id in
the observation; ``shared=False``: one Q-network per agent (:class:`PerAgentQModel`), run
batched. The replay and loss side (a departed agent's masked steps never train the
network) is :meth:`rlfast.algos.dqn.DQN.samples_to_buffer`'s.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.agents.dqn.catdqn_agent import CategoricalQPolicy
from rlfast.agents.dqn.dqn_agent import DqnAgent
from rlfast.models.dqn import CatDqnMlpModel, DqnMlpModel
from rlfast.utils.tensor import infer_leading_dims, restore_leading_dims

__all__ = ["MultiAgentDqnAgent", "PerAgentQModel", "check_discrete_multiagent"]


class PerAgentQModel(torch.nn.Module):
    """``n_agents`` copies of a Q-model (``base_cls(**kwargs)``, each with its own
    parameters); row ``i`` of a batch gets the output of the copy its agent id picks.

    ``layout``: the observation's ``(local_size, id_size, state_size)``; the agent id is the
    one-hot block after the local part and must have ``n_agents`` entries. Every copy reads
    the whole observation and computes every row (``n_agents`` is small: MPE has 2-6), and
    each row keeps its own agent's output; so any DQN-family model works, dueling, noisy and
    categorical ones included. ``noisy``, ``reset_noise`` and ``set_noise`` reach every
    copy."""

    def __init__(self, observation_shape: Any, output_size: int, layout: Any, n_agents: int,
                 base_cls: type = DqnMlpModel, **kwargs: Any):
        super().__init__()
        local, id_size, _ = (int(v) for v in layout)
        if id_size != int(n_agents) or int(n_agents) < 1:
            raise ValueError(f"PerAgentQModel: separate per-agent parameters need the one-hot "
                             f"agent id of all {n_agents} agents in the observation "
                             f"(env.agent_id=True); the layout has id_size={id_size}")
        self.id_slice = slice(local, local + id_size)
        self.n_agents = int(n_agents)
        self.observation_ndim = len(tuple(observation_shape))
        self.copies = torch.nn.ModuleList(
            base_cls(observation_shape=observation_shape, output_size=output_size, **kwargs)
            for _ in range(self.n_agents))
        self.noisy = bool(getattr(self.copies[0], "noisy", False))

    def reset_noise(self) -> None:
        """New noise in every copy (no-op without noisy layers)."""
        for copy in self.copies:
            if getattr(copy, "noisy", False):
                copy.reset_noise()

    def set_noise(self, enabled: bool) -> None:
        """Turn every copy's noise on or off."""
        for copy in self.copies:
            if getattr(copy, "noisy", False):
                copy.set_noise(enabled)

    def forward(self, observation: torch.Tensor, prev_action: torch.Tensor = None,
                prev_reward: torch.Tensor = None, **kwargs: Any) -> torch.Tensor:
        lead_dim, T, B, _ = infer_leading_dims(observation, self.observation_ndim)
        obs = observation.reshape(T * B, *observation.shape[lead_dim:])
        agent = obs[:, self.id_slice].argmax(dim=-1)                       # [N]
        every = torch.stack([copy(obs, None, None, **kwargs) for copy in self.copies])
        rows = torch.arange(obs.shape[0], device=obs.device)
        return restore_leading_dims(every[agent, rows], lead_dim, T, B)


def check_discrete_multiagent(env_spaces: Any, owner: str) -> tuple:
    """The multi-agent observation layout ``(local, id, state)``; a ``ValueError`` unless the
    observation space has one (a :class:`~rlfast.envs.multiagent.MultiAgentEnv`) and the
    actions are one scalar discrete choice per agent."""
    layout = getattr(env_spaces.observation, "layout", None)
    if layout is None:
        raise ValueError(f"{owner} needs a multi-agent environment (rlfast.envs.multiagent."
                         f"MultiAgentEnv, e.g. pz:<module>) whose observation space gives the "
                         f"layout; got {env_spaces.observation!r}")
    action = env_spaces.action
    if getattr(action, "n", None) is None or tuple(action.shape) != ():
        raise ValueError(f"{owner}: value-based (DQN-family) agents need discrete actions, one "
                         f"choice per agent; this environment's action space is {action!r}. "
                         f"Choose discrete actions (for MPE: --set "
                         f"env.kwargs.continuous_actions=False) or train ppo / a2c / mappo")
    return tuple(int(v) for v in layout)


class MultiAgentDqnAgent(DqnAgent):
    """A DQN-family agent for multi-agent columns (see the module docstring): ``shared``
    (default True) one Q-network for every agent, the agent id in its input; False: one per
    agent (:class:`PerAgentQModel`; needs ``env.agent_id=True``). ``n_atoms``: Q-value
    distributions over that many atoms (categorical DQN, Rainbow: the policy of
    :class:`~rlfast.agents.CatDqnAgent`, default model ``CatDqnMlpModel``); None: Q-values
    (default model ``DqnMlpModel``). Other arguments as ``DqnAgent``'s."""

    def __init__(self, ModelCls: type | None = None, shared: bool = True,
                 n_atoms: int | None = None, **kwargs: Any):
        self.shared = bool(shared)
        if n_atoms is not None:
            kwargs["policy"] = CategoricalQPolicy(n_atoms)
        if ModelCls is None:
            ModelCls = DqnMlpModel if n_atoms is None else CatDqnMlpModel
        super().__init__(ModelCls=ModelCls, **kwargs)
        if not self.shared:  # one copy of the configured model per agent
            self.model_kwargs = dict(self.model_kwargs, base_cls=self.ModelCls)
            self.ModelCls = PerAgentQModel

    def make_env_to_model_kwargs(self, env_spaces: Any) -> dict:
        """The base agent's model arguments, plus ``layout`` and ``n_agents`` for separate
        per-agent parameters."""
        layout = check_discrete_multiagent(env_spaces, type(self).__name__)
        kwargs = super().make_env_to_model_kwargs(env_spaces)
        if not self.shared:
            kwargs.update(layout=layout, n_agents=layout[1])
        return kwargs
