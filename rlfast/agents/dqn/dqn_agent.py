"""DQN agent: Q-values from the model, epsilon-greedy actions, and a target network.

The algorithm calls the agent on replayed batches (``agent(obs, prev_action, prev_reward)``
for online Q-values with gradient, ``agent.target(...)`` for target-network values) and
refreshes the target with ``update_target(tau)``; samplers call ``step``.  Noisy-net models
(Rainbow) get a fresh noise sample before every sampling step and have their noise switched
off in evaluation.

Every DQN-family agent is this class with a policy strategy (plain Q-values here, return
distributions in ``catdqn_agent``) and, for R2D1, a recurrent mixin: a recurrent agent feeds
its model the previous action one-hot and the LSTM state, and records the state before each
step in ``agent_info.prev_rnn_state`` as ``[B, N, H]`` so the replay buffer can store it per
environment; the algorithm transposes stored states back to ``[N, B, H]`` and passes them as
``init_rnn_state`` when it replays sequences.
"""
from __future__ import annotations

import torch

from rlfast.agents.base import AgentStep, BaseAgent, array_observation_shape
from rlfast.agents.dqn.epsilon_greedy import EpsilonGreedyAgentMixin
from rlfast.agents.recurrent import stored_rnn_state
from rlfast.distributions import EpsilonGreedy
from rlfast.models.dqn import DqnMlpModel
from rlfast.models.utils import strip_ddp_state_dict, update_state_dict
from rlfast.utils.buffer import buffer_to
from rlfast.utils.collections import namedarraytuple

__all__ = ["DqnAgent", "QValuePolicy", "AgentInfo", "AgentInfoRnn", "discrete_q_model_kwargs"]

AgentInfo = namedarraytuple("AgentInfo", ["q"])
AgentInfoRnn = namedarraytuple("AgentInfoRnn", ["q", "prev_rnn_state"])


def discrete_q_model_kwargs(env_spaces, agent_name: str, image_model: bool = False) -> dict:
    """``dict(observation_shape, output_size)`` for a scalar discrete action space, else raise;
    ``image_shape`` instead of ``observation_shape`` with ``image_model`` (the Atari models)."""
    action_space = env_spaces.action
    if getattr(action_space, "n", None) is None or tuple(action_space.shape) != ():
        raise TypeError(f"{agent_name} needs a scalar discrete action space (IntBox with n "
                        f"actions); got {action_space!r}. Use DDPG/TD3/SAC agents for continuous "
                        "actions and MultiCategoricalPgAgent (PPO/A2C) for MultiDiscrete or "
                        "MultiBinary ones.")
    shape_name = "image_shape" if image_model else "observation_shape"
    return {shape_name: array_observation_shape(env_spaces.observation, agent_name),
            "output_size": int(action_space.n)}


class QValuePolicy:
    """Epsilon-greedy on the model's Q-values ``[..., A]``; ``agent_info`` is ``AgentInfo(q)``.

    ``image_model``: the model takes ``image_shape`` (the Atari models) rather than
    ``observation_shape``.  The categorical counterpart is ``CategoricalQPolicy``.
    """

    n_atoms = None
    z = V_min = V_max = None

    def __init__(self, image_model: bool = False):
        self.image_model = bool(image_model)

    def model_kwargs(self, model_kwargs: dict, owner: str) -> dict:
        """The agent's ``model_kwargs`` (Q-value models need nothing more)."""
        return model_kwargs

    def make_distribution(self, n_actions: int, epsilon: float) -> EpsilonGreedy:
        """Epsilon-greedy over ``n_actions`` Q-values."""
        return EpsilonGreedy(dim=n_actions, epsilon=epsilon)

    def forward_kwargs(self, log_probs: bool, owner: str) -> dict:
        """Extra model arguments: none; ``log_probs`` is for distributional agents only."""
        if log_probs:
            raise ValueError(f"{owner}: log_probs=True is only for categorical (distributional) "
                             "agents; this agent's model outputs Q-values.")
        return {}

    def agent_info(self, q: torch.Tensor) -> AgentInfo:
        """``AgentInfo(q=q)``."""
        return AgentInfo(q=q)

    def set_support(self, V_min: float, V_max: float, owner: str) -> None:
        """Q-values have no support to set."""
        raise TypeError(f"{owner} outputs Q-values, not return distributions; give_V_min_max is "
                        "for categorical agents (CatDqnAgent, AtariCatDqnAgent).")


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

    ``policy`` (subclasses choose it): ``QValuePolicy`` by default, ``CategoricalQPolicy`` for
    return distributions.  With a recurrent mixin (R2D1) the model also takes and returns an
    ``RnnState``: ``__call__`` and ``target`` take ``init_rnn_state`` (None for zeros) and
    return ``(q, next_rnn_state)``, and ``step`` records ``AgentInfoRnn(q, prev_rnn_state)``.
    """

    policy = QValuePolicy()

    def __init__(self, ModelCls: type = DqnMlpModel, noisy_reset: bool = True,
                 policy: QValuePolicy | None = None, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
        if policy is not None:
            self.policy = policy
        if self.recurrent and self.policy.n_atoms is not None:
            raise TypeError(f"{type(self).__name__}: recurrent agents output Q-values; categorical "
                            "policies are for feedforward agents.")
        self.model_kwargs = self.policy.model_kwargs(self.model_kwargs, type(self).__name__)
        self.noisy_reset = bool(noisy_reset)
        self.target_model: torch.nn.Module | None = None

    # ---- construction -------------------------------------------------------------------
    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """``dict(observation_shape=..., output_size=number of actions)`` (``image_shape`` for
        image models)."""
        return discrete_q_model_kwargs(env_spaces, type(self).__name__, self.policy.image_model)

    def make_distribution(self, n_actions: int) -> EpsilonGreedy:
        """The policy's epsilon-greedy distribution, starting at ``eps_init``."""
        return self.policy.make_distribution(n_actions, self.eps_init)

    def initialize(self, env_spaces, share_memory: bool = False, global_B: int = 1,
                   env_ranks: list | None = None) -> None:
        """Build the model, the target model (a copy of it) and the epsilon-greedy distribution."""
        initial = self.initial_model_state_dict
        if _is_agent_state(initial):
            self.initial_model_state_dict = initial["model"]
        try:
            super().initialize(env_spaces, share_memory=share_memory, global_B=global_B,
                               env_ranks=env_ranks)
        finally:
            self.initial_model_state_dict = initial
        self.target_model = self.ModelCls(**self.env_model_kwargs, **self.model_kwargs)
        self.target_model.load_state_dict(initial["target"] if _is_agent_state(initial)
                                          else self.model.state_dict())
        self.target_model.to(self.device)
        self.distribution = self.make_distribution(int(env_spaces.action.n))

    def to_device(self, cuda_idx: int | None = None) -> None:
        """Move the model and the target model to ``cuda:cuda_idx``."""
        super().to_device(cuda_idx)
        if self.target_model is not None:
            self.target_model.to(self.device)

    # ---- distributional support (categorical policies) -----------------------------------
    @property
    def n_atoms(self) -> int | None:
        """Atoms per action of a categorical agent (None for Q-values)."""
        return self.policy.n_atoms

    @property
    def z(self) -> torch.Tensor | None:
        """The support ``linspace(V_min, V_max, n_atoms)`` once given (categorical agents)."""
        return self.policy.z

    @property
    def V_min(self) -> float | None:
        """Lowest atom value, once given (categorical agents)."""
        return self.policy.V_min

    @property
    def V_max(self) -> float | None:
        """Highest atom value, once given (categorical agents)."""
        return self.policy.V_max

    def give_V_min_max(self, V_min: float, V_max: float) -> None:
        """Set the support ``z = linspace(V_min, V_max, n_atoms)`` (the algorithm calls this)."""
        self.policy.set_support(V_min, V_max, type(self).__name__)
        if self.distribution is not None:
            self.distribution.set_z(self.z)

    # ---- parameters -----------------------------------------------------------------------
    def state_dict(self) -> dict:
        """``dict(model=..., target=...)``."""
        return dict(model=strip_ddp_state_dict(self.model.state_dict()),
                    target=self.target_model.state_dict())

    def load_state_dict(self, state_dict: dict) -> None:
        """Load ``dict(model=..., target=...)``, or a plain model state dict into both networks."""
        if _is_agent_state(state_dict):
            model_state, target_state = state_dict["model"], state_dict["target"]
        else:
            model_state = target_state = state_dict
        _unwrap(self.model).load_state_dict(strip_ddp_state_dict(model_state))
        self.target_model.load_state_dict(strip_ddp_state_dict(target_state))

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
        """Training mode, with noise."""
        super().train_mode(itr)
        self._set_noise(True)

    def sample_mode(self, itr: int) -> None:
        """Sampling mode (annealed epsilon), with noise."""
        super().sample_mode(itr)
        self._set_noise(True)

    def eval_mode(self, itr: int) -> None:
        """Evaluation mode (evaluation epsilon), without noise: the mean network acts."""
        super().eval_mode(itr)
        self._set_noise(False)

    def _reset_noise_for_step(self) -> None:
        if self.noisy_reset and self._mode == "sample" and self.noisy:
            _unwrap(self.model).reset_noise()

    # ---- forward passes -----------------------------------------------------------------
    def _model_inputs(self, observation, prev_action, prev_reward) -> tuple:
        if self.recurrent and not torch.is_floating_point(prev_action):
            prev_action = self.distribution.to_onehot(prev_action)  # floats are taken as one-hot
        return buffer_to((observation, prev_action, prev_reward), device=self.device)

    def _forward(self, model, observation, prev_action, prev_reward, init_rnn_state, log_probs):
        options = self.policy.forward_kwargs(log_probs, type(self).__name__)
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        if self.recurrent:
            return model(*inputs, buffer_to(init_rnn_state, device=self.device), **options)
        if init_rnn_state is not None:
            raise TypeError(f"{type(self).__name__} is feedforward; it takes no init_rnn_state.")
        return model(*inputs, **options)

    def __call__(self, observation, prev_action, prev_reward, init_rnn_state=None, *,
                 log_probs: bool = False):
        """Online network on training data (with gradient, on the model's device): Q-values
        ``[..., A]``; a categorical agent's atom probabilities ``[..., A, n_atoms]``
        (log-probabilities with ``log_probs=True``); a recurrent agent's ``(q, next_rnn_state)``
        from ``init_rnn_state``."""
        return self._forward(self.model, observation, prev_action, prev_reward, init_rnn_state,
                             log_probs)

    @torch.no_grad()
    def target(self, observation, prev_action, prev_reward, init_rnn_state=None, *,
               log_probs: bool = False):
        """The same from the target network (no gradient, on the model's device)."""
        return self._forward(self.target_model, observation, prev_action, prev_reward,
                             init_rnn_state, log_probs)

    @torch.no_grad()
    def device_step(self, observation, prev_action, prev_reward, rnn_state=None) -> tuple:
        """One epsilon-greedy step where the model is, changing nothing in the agent but a
        noisy model's noise: ``(action, agent_info, next_rnn_state)`` on the model's device
        (``next_rnn_state`` None unless recurrent; a recurrent step starts from ``rnn_state``,
        None for zeros). ``step`` is this plus the recurrent-state bookkeeping and the move to
        the CPU; the GPU action server runs it on device-resident inputs."""
        self._reset_noise_for_step()
        inputs = self._model_inputs(observation, prev_action, prev_reward)
        if not self.recurrent:
            out = self.model(*inputs)
            action = self.distribution.sample(out)
            return action, self.policy.agent_info(out), None
        q, next_rnn_state = self.model(*inputs, rnn_state)
        action = self.distribution.sample(q)
        agent_info = AgentInfoRnn(q=q, prev_rnn_state=stored_rnn_state(rnn_state, next_rnn_state))
        return action, agent_info, next_rnn_state

    def device_step_graph_key(self) -> tuple | None:
        """The host-side settings :meth:`device_step` branches on (mode, the epsilon-greedy
        distribution's settings), or None while a noisy model draws new noise every step
        (its layers replace their noise tensors, which a CUDA graph cannot follow)."""
        if self.noisy_reset and self._mode == "sample" and self.noisy:
            return None
        return self._mode, self.distribution.settings_key()

    @torch.no_grad()
    def step(self, observation, prev_action, prev_reward) -> AgentStep:
        """Epsilon-greedy actions and the policy's agent_info; CPU tensors in and out.  A
        recurrent agent records ``AgentInfoRnn(q, prev_rnn_state [B, N, H])`` and advances."""
        action, agent_info, rnn_state = self.device_step(observation, prev_action, prev_reward,
                                                         self.prev_rnn_state)
        if self.recurrent:
            self.advance_rnn_state(rnn_state)
        return buffer_to(AgentStep(action=action, agent_info=agent_info), device="cpu")
