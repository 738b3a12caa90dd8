"""The multi-agent policy-gradient agent: one column per agent, shared or separate policies."""
from __future__ import annotations

from rlfast.agents.pg.base import PgAgent
from rlfast.agents.pg.policies import CategoricalPolicy, GaussianPolicy
from rlfast.models.pg.multiagent_model import MultiAgentPgModel

__all__ = ["MultiAgentPgAgent"]


class MultiAgentPgAgent(PgAgent):
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

    policy = CategoricalPolicy()

    def __init__(self, ModelCls: type = MultiAgentPgModel, shared: bool = True,
                 central_critic: bool = False, **kwargs):
        super().__init__(ModelCls=ModelCls, **kwargs)
        self.shared = bool(shared)
        self.central_critic = bool(central_critic)

    def make_env_to_model_kwargs(self, env_spaces) -> dict:
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
