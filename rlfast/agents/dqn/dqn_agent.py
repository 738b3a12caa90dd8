"""DQN agent: Q-values from the model, epsilon-greedy actions, and a target network.

The algorithm calls the agent on replayed batches (``agent(obs, prev_action, prev_reward)``
for online Q-values with gradient, ``agent.target(...)`` for target-network values) and
refreshes the target with ``update_target(tau)``; samplers call ``step``.  Noisy-net models
(Rainbow) get a fresh noise sample before every sampling step and have their noise switched
off in evaluation.
"""
from __future__ import annotations

from typing import Optional

import torch

from rlfast.agents.base import AgentStep, BaseAgent
from rlfast.agents.dqn.epsilon_greedy import EpsilonGreedyAgentMixin
from rlfast.distributions import EpsilonGreedy
from rlfast.models.dqn import DqnMlpModel
from rlfast.models.utils import strip_ddp_state_dict, update_state_dict
from rlfast.utils.buffer import buffer_to
from rlfast.utils.collections import namedarraytuple

__all__ = ["DqnAgent", "AgentInfo", "discrete_q_model_kwargs"]

AgentInfo = namedarraytuple("AgentInfo", ["q"])


def discrete_q_model_kwargs(env_spaces, agent_name: str) -> dict:
    """``dict(observation_shape, output_size)`` for a scalar discrete action space, else raise."""
    action_space = env_spaces.action
    if getattr(action_space, "n", None) is None or tuple(action_space.shape) != ():
        raise TypeError(f"{agent_name} needs a scalar discrete action space (IntBox with n actions); got "
                        f"{action_space!r}. Use DDPG/TD3/SAC agents for continuous actions.")
    return dict(observation_shape=tuple(env_spaces.observation.shape), output_size=int(action_space.n))


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


def _is_agent_state(state_dict) -> bool:
    return isinstance(state_dict, dict) and set(state_dict) == {"model", "target"}


class DqnAgent(EpsilonGreedyAgentMixin, BaseAgent):
    """Epsilon-greedy Q-learning agent with a target network (default model: ``DqnMlpModel``).

    ``__call__(observation, prev_action, prev_reward) -> q`` ``[..., A]`` on the model's device,
    with gradient.  ``step`` returns ``AgentStep(action, agent_info=AgentInfo(q=q))`` on the CPU.
    ``target(observation, prev_action, prev_reward) -> q`` from the target model (no gradient,
    on the model's device).  ``update_target(tau=1)``: hard copy, or Polyak averaging
    ``target <- tau * model + (1 - tau) * target`` for ``tau < 1``.  ``state_dict()`` is
    ``dict(model=..., target=...)``; ``load_state_dict`` and ``initial_model_state_dict`` accept
    that or a plain model state dict (then loaded into both networks).  ``noisy_reset``: for a
    noisy model (``model.noisy``), draw new noise before each step in sample mode.  Epsilon
    arguments as in ``EpsilonGreedyAgentMixin``.
    """

    def __init__(self, ModelCls: type = DqnMlpModel, noisy_reset: bool = True, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
        self.noisy_reset = bool(noisy_reset)
        self.target_model: Optional[torch.nn.Module] = None

    # ---- construction -------------------------------------------------------------------
    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(observation_shape=..., output_size=number of actions)``."""
        return discrete_q_model_kwargs(env_spaces, type(self).__name__)

    def make_distribution(self, n_actions: int) -> EpsilonGreedy:
        return EpsilonGreedy(dim=n_actions, epsilon=self.eps_init)

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: Optional[list] = None) -> None:
        """Build the model, the target model (a copy of it) and the epsilon-greedy distribution."""
        initial = self.initial_model_state_dict
        if _is_agent_state(initial):
            self.initial_model_state_dict = initial["model"]
        try:
            super().initialize(env_spaces, share_memory=share_memory, global_B=global_B, env_ranks=env_ranks)
        finally:
            self.initial_model_state_dict = initial
        self.target_model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        self.target_model.load_state_dict(initial["target"] if _is_agent_state(initial) else self.model.state_dict())
        self.target_model.to(self.device)
        self.distribution = self.make_distribution(int(env_spaces.action.n))

    def to_device(self, cuda_idx: Optional[int] = None) -> None:
        super().to_device(cuda_idx)
        if self.target_model is not None:
            self.target_model.to(self.device)

    # ---- parameters -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        return dict(model=strip_ddp_state_dict(self.model.state_dict()), target=self.target_model.state_dict())

    def load_state_dict(self, state_dict: dict) -> None:
        if _is_agent_state(state_dict):
            model_state, target_state = state_dict["model"], state_dict["target"]
        else:
            model_state = target_state = state_dict
        _unwrap(self.model).load_state_dict(strip_ddp_state_dict(model_state))
        self.target_model.load_state_dict(strip_ddp_state_dict(target_state))

    def sync_shared_memory(self) -> None:
        """Copy trained parameters into the shared CPU model used by sampler workers."""
        if self.shared_model is not None and self.shared_model is not self.model:
            self.shared_model.load_state_dict(strip_ddp_state_dict(self.model.state_dict()))

    def update_target(self, tau: float = 1) -> None:
        """Target <- model (``tau=1``), or ``tau * model + (1 - tau) * target``."""
        update_state_dict(self.target_model, self.model.state_dict(), tau)

    # ---- noise ----------------------------------------------------------------------------
    @property
    def noisy(self) -> bool:
        """Whether the model has noisy layers."""
        return bool(getattr(_unwrap(self.model), "noisy", False))

    def reset_noise(self) -> None:
        """New noise in the model and the target model (no-op for models without noisy layers)."""
        for model in (_unwrap(self.model), self.target_model):
            if getattr(model, "noisy", False):
                model.reset_noise()

    def _set_noise(self, enabled: bool) -> None:
        model = _unwrap(self.model)
        if getattr(model, "noisy", False):
            model.set_noise(enabled)

    def train_mode(self, itr: int) -> None:
        super().train_mode(itr)
        self._set_noise(True)

    def sample_mode(self, itr: int) -> None:
        super().sample_mode(itr)
        self._set_noise(True)

    def eval_mode(self, itr: int) -> None:
        super().eval_mode(itr)
        self._set_noise(False)  # evaluate the mean network

    def _reset_noise_for_step(self) -> None:
        if self.noisy_reset and self._mode == "sample" and self.noisy:
            _unwrap(self.model).reset_noise()

    # ---- forward passes -----------------------------------------------------------------
    def _model_inputs(self, observation, prev_action, prev_reward) -> tuple:
        return buffer_to((observation, prev_action, prev_reward), device=self.device)

    def __call__(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """Q-values ``[..., A]`` for training data (with gradient, on the model's device)."""
        return self.model(*self._model_inputs(observation, prev_action, prev_reward))

    @torch.no_grad()
    def target(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """Target-network Q-values ``[..., A]`` (no gradient, on the model's device)."""
        return self.target_model(*self._model_inputs(observation, prev_action, prev_reward))

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Epsilon-greedy actions and ``AgentInfo(q=q)``; CPU tensors in and out."""
        self._reset_noise_for_step()
        q = self.model(*self._model_inputs(observation, prev_action, prev_reward)).cpu()
        action = self.distribution.sample(q)
        return AgentStep(action=action, agent_info=AgentInfo(q=q))
