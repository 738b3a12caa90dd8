"""The policy-gradient agent: agent_info layouts and the step/value logic, written once.

A PG agent is a model, a policy strategy (``CategoricalPolicy`` or ``GaussianPolicy``, which
knows the distribution and how the model's outputs become its ``dist_info``) and, for recurrent
models, one of the recurrent mixins. Everything else (device moves, recurrent-state storage,
greedy evaluation, bootstrap values) is here.
"""
from __future__ import annotations

import torch

from rlfast.agents.base import AgentStep, BaseAgent
from rlfast.agents.pg.policies import PgPolicy
from rlfast.agents.recurrent import stored_rnn_state
from rlfast.utils.buffer import buffer_to
from rlfast.utils.collections import namedarraytuple

__all__ = ["PgAgent", "AgentInfo", "AgentInfoRnn"]

AgentInfo = namedarraytuple("AgentInfo", ["dist_info", "value"])
AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["dist_info", "value", "prev_rnn_state"])


def _to_float32(outputs):
    """Reduced-precision floating tensors of a (nested) tuple of outputs back to float32."""
    if isinstance(outputs, torch.Tensor):
        return outputs.float() if outputs.is_floating_point() else outputs
    if isinstance(outputs, tuple):
        converted = [_to_float32(o) for o in outputs]
        return type(outputs)(*converted) if hasattr(outputs, "_fields") else tuple(converted)
    return outputs


class PgAgent(BaseAgent):
    """Actor-critic agent: the model returns distribution parameters and a value.

    The model is called as ``model(observation, prev_action, prev_reward)`` and returns the
    distribution's outputs followed by the value; a recurrent model (in an agent with
    ``RecurrentAgentMixin`` or ``AlternatingRecurrentAgentMixin``) also takes and returns an RNN
    state, and reads the previous action as the policy gives it (one-hot for categorical).
    The state before each step is stored in agent_info (as ``[B, N, H]``) so the algorithm can
    replay sequences from the state the sampler had at the batch's first step.

    ``policy``: the distribution strategy (subclasses set it as a class attribute).
    ``greedy_eval``: in eval mode take the distribution's most likely action (argmax / mean)
    instead of sampling, the usual deterministic evaluation of a stochastic policy.
    ``autocast``: ``"bf16"`` runs the model's forward passes (sampling and training) under
    ``torch.autocast`` in bfloat16 on the model's device, its outputs cast back to float32
    (the losses, distributions and stored agent infos stay float32; the parameters and the
    optimizer stay float32 too). Opt-in: faster where the hardware has bf16 units (measured
    on a 2-core AVX-512-BF16 CPU with the Nature CNN: a PPO minibatch of 256 in 0.62x the
    float32 channels-last time), at the cost of bf16 rounding in activations. None: float32.
    """

    AUTOCAST_DTYPES = {"bf16": torch.bfloat16}

    policy: PgPolicy | None = None

    def __init__(self, ModelCls: type | None = None, model_kwargs: dict | None = None,
                 initial_model_state_dict: dict | None = None, greedy_eval: bool = True,
                 policy: PgPolicy | None = None, autocast: str | None = None):
        super().__init__(ModelCls=ModelCls, model_kwargs=model_kwargs,
                         initial_model_state_dict=initial_model_state_dict)
        self.greedy_eval = greedy_eval
        if autocast is not None and (not isinstance(autocast, str)
                                     or autocast not in self.AUTOCAST_DTYPES):
            raise ValueError(f"{type(self).__name__}: autocast must be None (float32) or one of "
                             f"{sorted(self.AUTOCAST_DTYPES)}; got {autocast!r}")
        self.autocast = autocast
        if policy is not None:
            self.policy = policy
        if self.policy is None:
            raise ValueError(f"{type(self).__name__} needs a policy (CategoricalPolicy or "
                             "GaussianPolicy)")

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """The policy's model keyword arguments for these spaces."""
        return self.policy.make_env_to_model_kwargs(env_spaces)

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: list | None = None) -> None:
        """Build the model (see ``BaseAgent.initialize``), then the policy's distribution."""
        super().initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                           env_ranks=env_ranks)
        self.distribution = self.policy.make_distribution(env_spaces)

    def _forward(self, observation, prev_action, prev_reward, rnn_state=None, reset=None) -> tuple:
        """``(dist_info, value, next_rnn_state)``; ``next_rnn_state`` is None unless recurrent.
        ``reset`` (recurrent, ``[T, B]``): zero the state before the steps that start an episode."""
        if not self.recurrent:
            inputs = buffer_to((observation, prev_action, prev_reward), device=self.device)
            *dist_outputs, value = self._run_model(*inputs)
            return self.policy.dist_info(*dist_outputs), value, None
        prev_action = self.policy.model_prev_action(prev_action, self.distribution)
        inputs = buffer_to((observation, prev_action, prev_reward), device=self.device)
        if reset is None:
            *dist_outputs, value, next_rnn_state = self._run_model(*inputs, rnn_state)
        else:
            *dist_outputs, value, next_rnn_state = self._run_model(*inputs, rnn_state,
                                                                   reset.to(self.device))
        return self.policy.dist_info(*dist_outputs), value, next_rnn_state

    def _run_model(self, *inputs):
        autocast = getattr(self, "autocast", None)  # agents unpickled from older snapshots
        if autocast is None:
            return self.model(*inputs)
        with torch.autocast(self.device.type, dtype=self.AUTOCAST_DTYPES[autocast]):
            outputs = self.model(*inputs)
        return _to_float32(outputs)

    def __call__(self, observation, prev_action, prev_reward, init_rnn_state=None,
                 reset=None) -> tuple:
        """Forward pass on training data (stays on the model's device): ``(dist_info, value)``;
        recurrent agents start from ``init_rnn_state`` and also return the next state, and a
        ``[T, B]`` ``reset`` zeroes the state before each step that starts an episode (a
        sequence that crosses episode ends is then computed as the sampler stepped it)."""
        if not self.recurrent:
            dist_info, value, _ = self._forward(observation, prev_action, prev_reward)
            return dist_info, value
        return self._forward(observation, prev_action, prev_reward,
                             buffer_to(init_rnn_state, self.device), reset)

    def greedy_action(self, dist_info) -> torch.Tensor:
        """The distribution's most likely action (argmax, or the clipped mean)."""
        return self.policy.greedy_action(dist_info, self.distribution)

    def _select(self, dist_info):
        if self._mode == "eval" and self.greedy_eval:
            return self.greedy_action(dist_info)
        return self.distribution.sample(dist_info)

    @torch.no_grad()
    def device_step(self, observation, prev_action, prev_reward, rnn_state=None) -> tuple:
        """One sampling step where the model is, changing nothing in the agent:
        ``(action, agent_info, next_rnn_state)`` as tensors on the model's device
        (``next_rnn_state`` None unless recurrent; a recurrent step starts from ``rnn_state``,
        None for zeros). ``step`` is this plus the recurrent-state bookkeeping and the move to
        the CPU; the GPU action server runs it on device-resident inputs, in a CUDA graph
        when :meth:`device_step_graph_key` allows."""
        dist_info, value, next_rnn_state = self._forward(observation, prev_action, prev_reward,
                                                         rnn_state)
        action = self._select(dist_info)
        if self.recurrent:
            agent_info = AgentInfoRnn(dist_info=dist_info, value=value,
                                      prev_rnn_state=stored_rnn_state(rnn_state, next_rnn_state))
        else:
            agent_info = AgentInfo(dist_info=dist_info, value=value)
        return action, agent_info, next_rnn_state

    def device_step_graph_key(self) -> tuple:
        """The host-side settings :meth:`device_step` branches on (greedy or sampled actions,
        autocast, the distribution's settings): a CUDA graph captured under one key replays
        the step only while the key is unchanged."""
        greedy = self._mode == "eval" and self.greedy_eval
        return greedy, getattr(self, "autocast", None), self.distribution.settings_key()

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Sample actions for the sampler; inputs and outputs are CPU tensors."""
        action, agent_info, rnn_state = self.device_step(observation, prev_action, prev_reward,
                                                         self.prev_rnn_state)
        if self.recurrent:
            self.advance_rnn_state(rnn_state)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), device="cpu")

    @torch.no_grad()
    def value(self, observation, prev_action, prev_reward) -> torch.Tensor:
        """State-value estimate, e.g. V(s_{T+1}) to bootstrap the batch's returns (a recurrent
        agent's state is read, not advanced)."""
        prev_rnn_state = self.prev_rnn_state
        _, value, _ = self._forward(observation, prev_action, prev_reward, prev_rnn_state)
        return value.cpu()

    def update_obs_rms(self, observation) -> None:
        """Update the model's running observation statistics, when it normalizes inputs."""
        model = self.model.module if hasattr(self.model, "module") else self.model
        if getattr(model, "update_obs_rms", None) is not None and \
                getattr(model, "normalize_observation", False):
            model.update_obs_rms(observation.to(self.device))
