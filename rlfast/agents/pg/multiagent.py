"""The multi-agent policy-gradient agents: one column per agent, shared or separate policies,
feed-forward or recurrent (one memory state per agent column)."""
from __future__ import annotations

from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import CategoricalPolicy, GaussianPolicy
from rlfast.agents.recurrent import AlternatingRecurrentAgentMixin, RecurrentAgentMixin
from rlfast.models.pg.multiagent_model import MultiAgentPgModel
from rlfast.models.pg.multiagent_recurrent_model import MultiAgentRecurrentPgModel

__all__ = ["MultiAgentPgAgent", "RecurrentMultiAgentPgAgent",
           "AlternatingRecurrentMultiAgentPgAgent", "MultiAgentPgMixin"]


class MultiAgentPgMixin:
    """What makes a PG agent multi-agent (see :class:`MultiAgentPgAgent`): ``shared`` and
    ``central_critic``, the model's arguments from the observation layout, and the policy
    that follows the action space. ``DefaultModelCls``: the model without ``ModelCls``."""

    policy = CategoricalPolicy()
    DefaultModelCls: type = MultiAgentPgModel

    def __init__(self, ModelCls: type | None = None, shared: bool = True,
                 central_critic: bool = False, **kwargs):
        super().__init__(ModelCls=ModelCls or self.DefaultModelCls, **kwargs)
        self.shared = bool(shared)
        self.central_critic = bool(central_critic)

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
        """The multi-agent model's arguments (observation layout, agents, discrete or
        continuous actions), with ``policy`` set to match the action space."""
        observation = env_spaces.observation
        layout = getattr(observation, "layout", None)
        if layout is None:
            raise ValueError(f"{type(self).__name__} needs a multi-agent environment "
                             f"(rlfast.envs.multiagent.MultiAgentEnv, e.g. pz:<module>) whose "
                             f"observation space gives the layout; got {observation!r}")
        continuous = getattr(env_spaces.action, "dtype", None) is not None and \
            env_spaces.action.dtype.kind == "f"
        self.policy = GaussianPolicy() if continuous else CategoricalPolicy()
        kwargs = self.policy.make_env_to_model_kwargs(env_spaces)
        return dict(observation_shape=kwargs["observation_shape"],
                    action_size=kwargs["action_size"], layout=layout,
                    n_agents=layout[1] or 1, shared=self.shared,
                    central_critic=self.central_critic, continuous=continuous)


class MultiAgentPgAgent(MultiAgentPgMixin, PgAgent):
    """Actor-critic agent for :class:`~rlfast.envs.multiagent.MultiAgentEnv` columns.

    The agents are the batch columns, so sampling, evaluation and training run exactly as
    for one agent over more environments; the model
    (:class:`~rlfast.models.pg.MultiAgentPgModel`) reads the observation layout from the
    env's observation space (:func:`~rlfast.envs.multiagent.agent_observation_box`).
    ``shared`` (default True): one set of parameters for every agent (parameter-shared PPO,
    the MAPPO baseline); False: one policy and value function per agent, run batched.
    ``central_critic``: the value function reads the global state (the env must provide it:
    ``global_state=True``). The policy follows the action space: categorical for discrete actions,
    Gaussian for continuous ones."""


class RecurrentMultiAgentPgAgent(RecurrentAgentMixin, MultiAgentPgMixin, PgAgent):
    """:class:`MultiAgentPgAgent` with a memory core (default model:
    :class:`~rlfast.models.pg.multiagent_recurrent_model.MultiAgentRecurrentPgModel`, a GRU
    unless ``model_kwargs`` name another ``core``), for partially observed multi-agent tasks.

    The agents are batch columns, so the recurrent state ``[N, B, H]`` keeps one state per
    agent: the sampler zeroes a column's state when that agent is done (its episode ended or
    it left; a departed agent's column stays done, so its state stays zero, and
    ``env_info.valid`` keeps it out of the loss), and the loss replays each column from the
    stored state with ``reset`` where that agent's episode starts. Parameters are shared by
    every agent (``shared=False`` is refused by the model)."""

    DefaultModelCls = MultiAgentRecurrentPgModel


class AlternatingRecurrentMultiAgentPgAgent(AlternatingRecurrentAgentMixin,
                                            MultiAgentPgMixin, PgAgent):
    """:class:`RecurrentMultiAgentPgAgent` for the alternating samplers (one recurrent state
    per group of environments that they step in turn)."""

    DefaultModelCls = MultiAgentRecurrentPgModel
