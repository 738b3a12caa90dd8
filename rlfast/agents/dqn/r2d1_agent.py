"""Recurrent DQN agent for R2D1: epsilon-greedy on a recurrent Q-network's outputs.

The sampler-facing ``step`` carries the LSTM state between steps (``RecurrentAgentMixin``) and
records the state *before* each step in ``agent_info.prev_rnn_state`` as ``[B, N, H]`` so the
replay buffer can store it per environment; the algorithm transposes stored states back to
``[N, B, H]`` and passes them as ``init_rnn_state`` when it replays sequences.
"""
from __future__ import annotations

from typing import Tuple

import torch

from rlfast.agents.base import AgentStep, RecurrentAgentMixin, rnn_state_for_storage
from rlfast.agents.dqn.dqn_agent import DqnAgent
from rlfast.models.dqn import R2d1MlpModel
from rlfast.utils.buffer import buffer_to
from rlfast.utils.collections import namedarraytuple

__all__ = ["R2d1AgentBase", "R2d1Agent", "AgentInfoRnn"]

AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["q", "prev_rnn_state"])


class R2d1AgentBase(DqnAgent):
    """Recurrent epsilon-greedy Q agent; combine with a recurrent mixin, as ``R2d1Agent`` does.

    The mixin (``RecurrentAgentMixin`` or ``AlternatingRecurrentAgentMixin``) provides
    ``prev_rnn_state`` and ``advance_rnn_state``, which ``step`` uses.

    ``__call__(observation, prev_action, prev_reward, init_rnn_state) -> (q, rnn_state)`` with
    gradient on the model's device; ``target(..., init_rnn_state)`` the same from the target
    model without gradient.  Integer ``prev_action`` is one-hot encoded for the model (a float
    ``prev_action`` is taken to be one-hot already).
    ``init_rnn_state`` is an ``RnnState`` of ``[N, B, H]`` tensors (``N = 1``), or None for zeros.
    """

    def __init__(self, ModelCls: type = R2d1MlpModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)

    def _model_inputs(self, observation, prev_action, prev_reward) -> tuple:
        if not torch.is_floating_point(prev_action):  # integer actions; floats are taken as one-hot
            prev_action = self.distribution.to_onehot(prev_action)
        return buffer_to((observation, prev_action, prev_reward), device=self.device)

    def __call__(self, observation, prev_action, prev_reward, init_rnn_state=None) -> Tuple[torch.Tensor, object]:
        """Q-values ``[..., A]`` and the next RNN state, with gradient."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self.model(*inputs, buffer_to(init_rnn_state, device=self.device))

    @torch.no_grad()
    def target(self, observation, prev_action, prev_reward, init_rnn_state=None) -> Tuple[torch.Tensor, object]:
        """Target-network Q-values ``[..., A]`` and next RNN state (no gradient)."""
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        return self.target_model(*inputs, buffer_to(init_rnn_state, device=self.device))

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Epsilon-greedy actions; ``AgentInfoRnn(q, prev_rnn_state [B, N, H])``; advances the state."""
        self._reset_noise_for_step()
        prev_state = self.prev_rnn_state
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        q, rnn_state = self.model(*inputs, prev_state)
        q = q.cpu()
        action = self.distribution.sample(q)
        if prev_state is None:
            prev_state = type(rnn_state)(*(torch.zeros_like(s) for s in rnn_state))
        agent_info = AgentInfoRnn(q=q, prev_rnn_state=rnn_state_for_storage(prev_state))
        self.advance_rnn_state(rnn_state)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), device="cpu")


class R2d1Agent(RecurrentAgentMixin, R2d1AgentBase):
    """R2D1 agent: recurrent epsilon-greedy Q agent that keeps its LSTM state between steps.

    Default model ``R2d1MlpModel``; ``AtariR2d1Agent`` uses ``AtariR2d1Model``.  ``reset()``
    clears the state, ``reset_one(idx)`` zeroes one environment's entry (when its episode ends).
    """

    def __init__(self, ModelCls: type = R2d1MlpModel, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
