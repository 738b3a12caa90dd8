"""Categorical (distributional) DQN agent: per-action return distributions over fixed atoms.

The model outputs probabilities ``p [..., A, n_atoms]`` over the atoms
``z = linspace(V_min, V_max, n_atoms)``; actions are epsilon-greedy on the expected values
``q = sum_i p_i z_i``.  The algorithm gives the support with ``give_V_min_max``.  Until then a
placeholder support ``linspace(-10, 10, n_atoms)`` is used, which picks the same greedy actions
as any increasing support (the expected value is an increasing affine function of the atom
index's mean), so sampler workers forked earlier still act greedily on the right action.
"""
from __future__ import annotations

from typing import Optional

import torch

from rlfast.agents.base import AgentStep
from rlfast.agents.dqn.dqn_agent import DqnAgent
from rlfast.distributions import CategoricalEpsilonGreedy
from rlfast.models.dqn import CatDqnMlpModel
from rlfast.utils.collections import namedarraytuple

__all__ = ["CatDqnAgent", "AgentInfo"]

AgentInfo = namedarraytuple("AgentInfo", ["p"])

PLACEHOLDER_V_MIN, PLACEHOLDER_V_MAX = -10.0, 10.0


class CatDqnAgent(DqnAgent):
    """Epsilon-greedy agent over categorical Q-value distributions (default model: ``CatDqnMlpModel``).

    ``n_atoms`` is passed to the model.  ``__call__(observation, prev_action, prev_reward,
    log_probs=False) -> p`` ``[..., A, n_atoms]`` atom probabilities (log-probabilities with
    ``log_probs=True``) on the model's device, with gradient; ``target(...)`` the same from the
    target model without gradient.  ``step`` returns ``AgentStep(action,
    agent_info=AgentInfo(p=p))`` on the CPU.
    """

    def __init__(self, n_atoms: int = 51, ModelCls: type = CatDqnMlpModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
        if int(n_atoms) != n_atoms or n_atoms < 2:
            raise ValueError(f"CatDqnAgent: n_atoms must be an int >= 2, got {n_atoms!r}.")
        given = self.model_kwargs.get("n_atoms", n_atoms)
        if given != n_atoms:
            raise ValueError(f"CatDqnAgent: model_kwargs n_atoms={given!r} differs from n_atoms={n_atoms!r}; "
                             "give it once, as the agent's n_atoms.")
        self.n_atoms = int(n_atoms)
        self.model_kwargs["n_atoms"] = self.n_atoms
        self.V_min: Optional[float] = None
        self.V_max: Optional[float] = None
        self.z: Optional[torch.Tensor] = None

    def make_distribution(self, n_actions: int) -> CategoricalEpsilonGreedy:
        z = self.z if self.z is not None else torch.linspace(PLACEHOLDER_V_MIN, PLACEHOLDER_V_MAX, self.n_atoms)
        return CategoricalEpsilonGreedy(dim=n_actions, z=z, epsilon=self.eps_init)

    def give_V_min_max(self, V_min: float, V_max: float) -> None:
        """Set the support ``z = linspace(V_min, V_max, n_atoms)`` (the algorithm calls this)."""
        if not float(V_max) > float(V_min):
            raise ValueError(f"CatDqnAgent.give_V_min_max: need V_min < V_max, got V_min={V_min!r}, "
                             f"V_max={V_max!r}.")
        self.V_min, self.V_max = float(V_min), float(V_max)
        self.z = torch.linspace(self.V_min, self.V_max, self.n_atoms)
        if self.distribution is not None:
            self.distribution.set_z(self.z)

    def __call__(self, observation, prev_action, prev_reward, log_probs: bool = False) -> torch.Tensor:
        """Atom probabilities ``[..., A, n_atoms]`` (or log-probabilities), with gradient."""
        return self.model(*self._model_inputs(observation, prev_action, prev_reward), log_probs=log_probs)

    @torch.no_grad()
    def target(self, observation, prev_action, prev_reward, log_probs: bool = False) -> torch.Tensor:
        """Target-network atom probabilities ``[..., A, n_atoms]`` (no gradient)."""
        return self.target_model(*self._model_inputs(observation, prev_action, prev_reward), log_probs=log_probs)

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Epsilon-greedy on expected values; ``AgentInfo(p=p)``; CPU tensors in and out."""
        self._reset_noise_for_step()
        p = self.model(*self._model_inputs(observation, prev_action, prev_reward)).cpu()
        action = self.distribution.sample(p)
        return AgentStep(action=action, agent_info=AgentInfo(p=p))
