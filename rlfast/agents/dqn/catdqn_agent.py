"""Categorical (distributional) DQN agent: per-action return distributions over fixed atoms.

The model outputs probabilities ``p [..., A, n_atoms]`` over the atoms
``z = linspace(V_min, V_max, n_atoms)``; actions are epsilon-greedy on the expected values
``q = sum_i p_i z_i``.  The algorithm gives the support with ``give_V_min_max``.  Until then a
placeholder support ``linspace(-10, 10, n_atoms)`` is used, which picks the same greedy actions
as any increasing support (the expected value is an increasing affine function of the atom
index's mean), so sampler workers forked earlier still act greedily on the right action.
"""
from __future__ import annotations

import torch

from rlfast.agents.dqn.dqn_agent import DqnAgent
from rlfast.distributions import CategoricalEpsilonGreedy
from rlfast.models.dqn import CatDqnMlpModel
from rlfast.utils.checks import check_int
from rlfast.utils.collections import namedarraytuple

__all__ = ["CatDqnAgent", "CategoricalQPolicy", "AgentInfo"]

AgentInfo = namedarraytuple("AgentInfo", ["p"])

PLACEHOLDER_V_MIN, PLACEHOLDER_V_MAX = -10.0, 10.0


class CategoricalQPolicy:
    """Epsilon-greedy on the expected values of per-action return distributions.

    Holds ``n_atoms`` (passed to the model) and the support ``z`` once ``set_support`` gave it;
    ``agent_info`` is ``AgentInfo(p)``.  ``image_model`` as in ``QValuePolicy``.
    """

    def __init__(self, n_atoms: int = 51, image_model: bool = False):
        self.n_atoms = check_int(n_atoms, "n_atoms", minimum=2, owner="CategoricalQPolicy")
        self.image_model = bool(image_model)
        self.V_min: float | None = None
        self.V_max: float | None = None
        self.z: torch.Tensor | None = None

    def model_kwargs(self, model_kwargs: dict, owner: str) -> dict:
        """``model_kwargs`` with ``n_atoms``; refuses a different ``n_atoms`` given there."""
        given = model_kwargs.get("n_atoms", self.n_atoms)
        if given != self.n_atoms:
            raise ValueError(f"{owner}: model_kwargs n_atoms={given!r} differs from "
                             f"n_atoms={self.n_atoms!r}; give it once, as the agent's n_atoms.")
        return dict(model_kwargs, n_atoms=self.n_atoms)

    def make_distribution(self, n_actions: int, epsilon: float) -> CategoricalEpsilonGreedy:
        """Epsilon-greedy on expected values, over the support (or the placeholder one)."""
        z = (self.z if self.z is not None
             else torch.linspace(PLACEHOLDER_V_MIN, PLACEHOLDER_V_MAX, self.n_atoms))
        return CategoricalEpsilonGreedy(dim=n_actions, z=z, epsilon=epsilon)

    def forward_kwargs(self, log_probs: bool, owner: str) -> dict:
        """``log_probs`` for the model: probabilities or log-probabilities."""
        return dict(log_probs=log_probs)

    def agent_info(self, p: torch.Tensor) -> AgentInfo:
        """``AgentInfo(p=p)``."""
        return AgentInfo(p=p)

    def set_support(self, V_min: float, V_max: float, owner: str) -> None:
        """``z = linspace(V_min, V_max, n_atoms)``."""
        if not float(V_max) > float(V_min):
            raise ValueError(f"{owner}.give_V_min_max: need V_min < V_max, got V_min={V_min!r}, "
                             f"V_max={V_max!r}.")
        self.V_min, self.V_max = float(V_min), float(V_max)
        self.z = torch.linspace(self.V_min, self.V_max, self.n_atoms)


class CatDqnAgent(DqnAgent):
    """Epsilon-greedy agent over categorical Q-value distributions (default model:
    ``CatDqnMlpModel``).

    ``n_atoms`` is passed to the model.  ``__call__(observation, prev_action, prev_reward,
    log_probs=False) -> p`` ``[..., A, n_atoms]`` atom probabilities (log-probabilities with
    ``log_probs=True``) on the model's device, with gradient; ``target(...)`` the same from the
    target model without gradient.  ``step`` returns ``AgentStep(action,
    agent_info=AgentInfo(p=p))`` on the CPU.  ``give_V_min_max`` sets the support ``z``.
    """

    def __init__(self, n_atoms: int = 51, ModelCls: type = CatDqnMlpModel, **kwargs):
        super().__init__(ModelCls=ModelCls, policy=CategoricalQPolicy(n_atoms), **kwargs)
