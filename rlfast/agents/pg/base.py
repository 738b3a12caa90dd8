"""Shared pieces of the policy-gradient agents: agent_info layouts and the step/value logic.

A PG agent is defined by its distribution (categorical or Gaussian) and how the model's outputs
become that distribution's ``dist_info``; everything else (device moves, recurrent-state storage,
greedy evaluation, bootstrap values) is written once here.
"""
from __future__ import annotations

import torch

from rlfast.agents.base import AgentStep, BaseAgent, rnn_state_for_storage
from rlfast.utils.buffer import buffer_to
from rlfast.utils.collections import namedarraytuple

AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])
AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["dist_info", "value", "prev_rnn_state"])


class PgAgentBase(BaseAgent):
    """Feedforward actor-critic agent: the model returns distribution parameters and a value.

    ``greedy_eval``: in eval mode take the distribution's most likely action (argmax / mean)
    instead of sampling, the usual deterministic evaluation of a stochastic policy.
    """

    def __init__(self, ModelCls=None, model_kwargs=None, initial_model_state_dict=None,
                 greedy_eval: bool = True):
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self.greedy_eval = greedy_eval

    # Subclasses: build self.distribution, convert model outputs, pick the greedy action.
    def dist_info_from_outputs(self, *outputs):
        raise TypeError(f"{type(self).__name__} must define dist_info_from_outputs")

    def greedy_action(self, dist_info):
        raise TypeError(f"{type(self).__name__} must define greedy_action")

    def model_prev_action(self, prev_action):
        """What the model sees as the previous action (recurrent models use it)."""
        return prev_action

    def _forward(self, observation, prev_action, prev_reward, *rnn):
        inputs = buffer_to((observation, self.model_prev_action(prev_action), prev_reward),
                           device=self.device)
        return self.model(*inputs, *rnn)

    def __call__(self, observation, prev_action, prev_reward):
        """Forward pass on training data (stays on the model's device): (dist_info, value)."""
        *dist_outputs, value = self._forward(observation, prev_action, prev_reward)
        return self.dist_info_from_outputs(*dist_outputs), value

    def _select(self, dist_info):
        if self._mode == "eval" and self.greedy_eval:
            return self.greedy_action(dist_info)
        return self.distribution.sample(dist_info)

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Sample actions for the sampler; inputs and outputs are CPU tensors."""
        *dist_outputs, value = self._forward(observation, prev_action, prev_reward)
        dist_info = self.dist_info_from_outputs(*dist_outputs)
        action = self._select(dist_info)
        agent_info = AgentInfo(dist_info=dist_info, value=value)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), device="cpu")

    @torch.no_grad()
    def value(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """State-value estimate, e.g. V(s_{T+1}) to bootstrap the batch's returns."""
        *_, value = self._forward(observation, prev_action, prev_reward)
        return value.cpu()

    def update_obs_rms(self, observation) -> None:
        """Update the model's running observation statistics, when it normalizes inputs."""
        model = self.model.module if hasattr(self.model, "module") else self.model
        if getattr(model, "update_obs_rms", None) is not None and \
                getattr(model, "normalize_observation", False):
            model.update_obs_rms(observation.to(self.device))


class RecurrentPgAgentBase(PgAgentBase):
    """Recurrent actor-critic agent: the model also takes and returns an RNN state.

    The state before each step is stored in agent_info (as ``[B, N, H]``) so the algorithm can
    replay sequences from the state the sampler had at the batch's first step.
    """

    def __call__(self, observation, prev_action, prev_reward, init_rnn_state):
        *dist_outputs, value, next_state = self._forward(
            observation, prev_action, prev_reward, buffer_to(init_rnn_state, self.device))
        return self.dist_info_from_outputs(*dist_outputs), value, next_state

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        prev_state = self.prev_rnn_state
        *dist_outputs, value, rnn_state = self._forward(
            observation, prev_action, prev_reward, prev_state)
        dist_info = self.dist_info_from_outputs(*dist_outputs)
        action = self._select(dist_info)
        if prev_state is None:
            prev_state = type(rnn_state)(*(torch.zeros_like(s) for s in rnn_state))
        agent_info = AgentInfoRnn(dist_info=dist_info, value=value,
                                  prev_rnn_state=rnn_state_for_storage(prev_state))
        self.advance_rnn_state(rnn_state)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), device="cpu")

    @torch.no_grad()
    def value(self, observation, prev_action, prev_reward) -> torch.Tensor:
        *_, value, _ = self._forward(observation, prev_action, prev_reward, self.prev_rnn_state)
        return value.cpu()
