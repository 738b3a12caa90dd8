"""A trained agent's deterministic policy as one self-contained torch module, for export.

:class:`PolicyGraph` wraps an agent's model (its observation normalization and uint8-frame
scaling are inside the model, so they travel with it) and computes the action the agent
takes in evaluation mode, with no Python-side state: argmax of the action probabilities
(policy gradient, categorical), the mean clamped to the action bound (policy gradient,
Gaussian), argmax of the Q-values (the DQN family, the expected value of the atoms for
categorical DQN), or the actor's deterministic action scaled to the action bounds (DDPG,
TD3; SAC's tanh of the mean). ``stochastic=True`` also returns the distribution's
parameters (probabilities, or mean and log-std). A recurrent agent's graph takes the previous
action, previous reward and the state leaves as inputs and returns the next state leaves, so the
caller carries the state (zeros at an episode start) exactly as the samplers do.
"""
from __future__ import annotations

from typing import Any

import torch

from rlfast.agents.dqn.catdqn_agent import CategoricalQPolicy
from rlfast.agents.dqn.dqn_agent import DqnAgent
from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import GaussianPolicy
from rlfast.agents.qpg.ddpg_agent import DdpgAgent
from rlfast.agents.qpg.sac_agent import SacAgent

__all__ = ["PolicyGraph", "ExportError"]


class ExportError(ValueError):
    """An agent (or a part of it) that cannot be exported as a policy graph."""


def _unwrap(model: torch.nn.Module) -> torch.nn.Module:
    return model.module if hasattr(model, "module") else model


class PolicyGraph(torch.nn.Module):
    """``forward(observation[, prev_action, prev_reward, *state]) -> (action[, extras][,
    *next_state])`` for ``agent`` in evaluation mode; see the module docstring.

    ``input_names`` and ``output_names`` name the graph's tensors (``observation``,
    ``prev_action``, ``prev_reward``, ``state_<field>``; ``action``, ``prob`` or ``mean`` and
    ``log_std``, ``next_state_<field>``); :meth:`example_inputs` builds inputs of a batch size.
    """

    def __init__(self, agent: Any, stochastic: bool = False):
        super().__init__()
        if getattr(agent, "model", None) is None:
            raise ExportError(f"{type(agent).__name__} has no model: initialize the agent (or "
                              f"load it from a run) before exporting")
        self.model = _unwrap(agent.model)
        self.stochastic = bool(stochastic)
        self.recurrent = bool(getattr(agent, "recurrent", False))
        self.agent = agent  # read for its policy strategy and distribution, not a submodule
        if isinstance(agent, PgAgent):
            self.family = "pg"
            self.extras = (("mean", "log_std") if isinstance(agent.policy, GaussianPolicy)
                           else ("prob",))
        elif isinstance(agent, DqnAgent):
            self.family = "dqn"
            self.extras = ("q",)
            if getattr(agent, "noisy", False):
                self.model.eval()  # noisy layers act with their mean weights in eval mode
        elif isinstance(agent, SacAgent):
            self.family, self.extras = "sac", ("mean", "log_std")
        elif isinstance(agent, DdpgAgent):
            self.family, self.extras = "ddpg", ()
            if self.stochastic:
                raise ExportError(f"{type(agent).__name__}: a deterministic actor has no "
                                  f"distribution to export with --stochastic")
        else:
            raise ExportError(f"{type(agent).__name__} is not a policy-gradient, DQN-family or "
                              f"Q-policy-gradient agent: no policy graph for it")
        self._state_fields = self._state_example_fields() if self.recurrent else ()
        self.model.eval()

    # ---- names and examples ------------------------------------------------------------
    def _state_example(self, batch: int) -> Any:
        body = getattr(self.model, "body", None)
        core = getattr(body, "core", None)
        if core is None:
            raise ExportError(f"{type(self.model).__name__}: a recurrent model without a memory "
                              f"core (model.body.core) cannot export its state")
        param = next(self.model.parameters())
        return core.zero_state(batch, param.device, param.dtype)

    def _state_example_fields(self) -> tuple:
        return tuple(self._state_example(1)._fields)

    @property
    def input_names(self) -> list[str]:
        """The graph's input names, in call order."""
        names = ["observation"]
        if self.recurrent:
            names += ["prev_action", "prev_reward"] + [f"state_{f}" for f in self._state_fields]
        return names

    @property
    def output_names(self) -> list[str]:
        """The graph's output names, in return order."""
        names = ["action"] + (list(self.extras) if self.stochastic else [])
        return names + [f"next_state_{f}" for f in self._state_fields]

    def example_inputs(self, observation: torch.Tensor) -> tuple:
        """Inputs for observations ``[B, ...]``: zero previous action and reward and the zero
        state of ``B`` environments for a recurrent graph."""
        if not self.recurrent:
            return (observation,)
        B = observation.shape[0]
        space = self.agent.env_spaces.action
        action = torch.as_tensor(space.null_value())
        prev_action = action.expand(B, *action.shape).clone().to(observation.device)
        prev_reward = torch.zeros(B, device=observation.device)
        return (observation, prev_action, prev_reward, *self._state_example(B))

    # ---- the graph -----------------------------------------------------------------------
    def forward(self, observation: torch.Tensor, *rest: torch.Tensor) -> tuple:
        """The evaluation-mode action (and the extras and next state; see the class)."""
        state = None
        if self.recurrent:
            prev_action, prev_reward, *leaves = rest
            state = tuple(leaves)
            prev_action = self._model_prev_action(prev_action)
            outputs = self.model(observation, prev_action, prev_reward, state)
            *outputs, state = outputs
        else:
            outputs = self.model(observation, None, None)
            outputs = list(outputs) if isinstance(outputs, tuple) else [outputs]
        action, extras = getattr(self, f"_{self.family}_action")(outputs)
        result = [action] + (list(extras) if self.stochastic else [])
        if state is not None:
            result += list(state)
        return tuple(result)

    def _model_prev_action(self, prev_action: torch.Tensor) -> torch.Tensor:
        agent = self.agent
        if self.family == "pg":
            return agent.policy.model_prev_action(prev_action, agent.distribution)
        if not torch.is_floating_point(prev_action):
            return agent.distribution.to_onehot(prev_action)
        return prev_action

    def _pg_action(self, outputs: list) -> tuple:
        agent = self.agent
        *dist_outputs, _value = outputs
        dist_info = agent.policy.dist_info(*dist_outputs)
        return agent.policy.greedy_action(dist_info, agent.distribution), tuple(dist_info)

    def _dqn_action(self, outputs: list) -> tuple:
        q = outputs[0]
        if isinstance(self.agent.policy, CategoricalQPolicy):
            z = self.agent.policy.z
            q = (q * z.to(q.dtype)).sum(-1)  # expected value of the atoms
        return q.argmax(dim=-1), (q,)

    def _ddpg_action(self, outputs: list) -> tuple:
        return self.agent.scale_action(outputs[0]), ()

    def _sac_action(self, outputs: list) -> tuple:
        mean, log_std = outputs[:2]
        action = self.agent.scale_action(self.agent.action_squash * torch.tanh(mean))
        return action, (mean, log_std)
