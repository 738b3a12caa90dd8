"""Collector base classes: the environment-stepping loops that run inside sampler workers.

A training collector steps ``batch_T`` times over its environments, writing every field into its
slice of the pre-allocated samples buffer. Actions come from ``get_actions`` (an in-process agent
here; the GPU collectors override it to ask an action server). Environment observations are
written into pre-allocated arrays in place, so nothing is allocated per step beyond what the
environment itself returns.
"""
from __future__ import annotations

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.utils.buffer import buffer_from_example, numpify_buffer, torchify_buffer


class BaseCollector:
    """Holds the environments, this worker's slice of the samples buffer and the agent."""

    mid_batch_reset = True

    def __init__(self, rank: int, envs: list, samples_np, batch_T: int, TrajInfoCls,
                 agent=None, sync=None, step_buffer_np=None, global_B: int = 1,
                 env_ranks: list | None = None):
        self.rank = rank
        self.envs = envs
        self.samples_np = samples_np
        self.batch_T = batch_T
        self.TrajInfoCls = TrajInfoCls
        self.agent = agent
        self.sync = sync
        self.step_buffer_np = step_buffer_np
        self.global_B = global_B
        self.env_ranks = env_ranks
        self._null_action = np.asarray(envs[0].action_space.null_value())

    def start_envs(self):
        raise TypeError(f"{type(self).__name__} must define start_envs()")

    def start_agent(self) -> None:
        """Let the agent set up per-collector state (e.g. vector epsilon) and reset it."""
        if self.agent is not None:
            self.agent.collector_initialize(global_B=self.global_B, env_ranks=self.env_ranks)
            self.agent.reset()
            self.agent.sample_mode(itr=0)

    def reset_if_needed(self, agent_inputs) -> None:
        """Between batches: reset environments whose episodes ended (wait-reset collectors)."""

    def collect_batch(self, agent_inputs, traj_infos: list, itr: int):
        raise TypeError(f"{type(self).__name__} must define collect_batch()")


def local_input_arrays(first_observations: list, null_action: np.ndarray):
    """(observation, prev_action, prev_reward) arrays for the collector's environments, filled
    with the first observations, null actions and zero rewards."""
    n = len(first_observations)
    observation = buffer_from_example(first_observations[0], n)
    for b, obs in enumerate(first_observations):
        observation[b] = obs
    prev_action = np.stack([null_action for _ in range(n)])
    prev_reward = np.zeros(n, dtype=np.float32)
    return observation, prev_action, prev_reward


class DecorrelatingStartCollector(BaseCollector):
    """Resets every environment, then takes a random number of random actions in each, so that
    the environments of one batch are at different points of their episodes."""

    def start_envs(self, max_decorrelation_steps: int = 0):
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        first = [env.reset() for env in self.envs]
        observation, prev_action, prev_reward = self.input_arrays(first)
        if max_decorrelation_steps > 0:
            for b, env in enumerate(self.envs):
                n_steps = 1 + int(np.random.rand() * max_decorrelation_steps)
                for _ in range(n_steps):
                    a = env.action_space.sample()
                    o, r, d, info = env.step(a)
                    traj_infos[b].step(o, a, r, d, None, info)
                    if getattr(info, "traj_done", d):
                        o = env.reset()
                        traj_infos[b] = self.TrajInfoCls()
                    if d:
                        a, r = self._null_action, 0.0
                    observation[b] = o
                    prev_action[b] = a
                    prev_reward[b] = r
        return AgentInputs(observation, prev_action, prev_reward), traj_infos


class AgentStepMixin:
    """Actions from the in-process agent (CPU and serial samplers).

    The GPU collectors replace exactly these hooks with ones that talk to the action server.
    """

    def input_arrays(self, first_observations: list):
        return local_input_arrays(first_observations, self._null_action)

    def get_actions(self, agent_inputs_pyt, t: int):
        action, agent_info = self.agent.step(*agent_inputs_pyt)
        return numpify_buffer(action), numpify_buffer(agent_info)

    def reset_agent_one(self, b: int) -> None:
        self.agent.reset_one(idx=b)

    def start_batch_agent(self, itr: int) -> None:
        # Workers hold their own agent copy: leave any eval mode set by evaluation.
        self.agent.sample_mode(itr)

    def start_eval_agent(self, itr: int) -> None:
        self.agent.eval_mode(itr)  # first: it stashes a recurrent agent's sampling state
        self.agent.reset()

    def finish_batch(self, agent_inputs_pyt) -> None:
        agent_buf = self.samples_np.agent
        if "bootstrap_value" in agent_buf:
            agent_buf.bootstrap_value[0] = self.agent.value(*agent_inputs_pyt).numpy()

    def finish_evaluation(self) -> None:
        pass


class BaseEvalCollector:
    """Runs the agent (in eval mode) for at most ``max_T`` steps per environment, resetting
    finished ones, and stops early when ``max_trajectories`` trajectories have completed.
    Only trajectory statistics are kept; nothing is written to a samples buffer."""

    def __init__(self, rank: int, envs: list, TrajInfoCls, traj_infos_queue=None,
                 max_T: int = 1000, agent=None, sync=None, step_buffer_np=None,
                 max_trajectories: int | None = None):
        self.rank = rank
        self.envs = envs
        self.TrajInfoCls = TrajInfoCls
        self.traj_infos_queue = traj_infos_queue
        self.max_T = int(max_T)
        self.agent = agent
        self.sync = sync
        self.step_buffer_np = step_buffer_np
        self.max_trajectories = max_trajectories
        self._null_action = np.asarray(envs[0].action_space.null_value())

    def collect_evaluation(self, itr: int) -> list:
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        completed = []
        first = [env.reset() for env in self.envs]
        observation, action, reward = self.input_arrays(first)
        inputs_pyt = torchify_buffer(AgentInputs(observation, action, reward))
        self.start_eval_agent(itr)
        for _ in range(self.max_T):
            act, agent_info = self.get_actions(inputs_pyt, 0)
            action[:] = act
            for b, env in enumerate(self.envs):
                o, r, d, env_info = env.step(action[b])
                traj_infos[b].step(observation[b], action[b], r, d, None, env_info)
                if getattr(env_info, "traj_done", d):
                    completed.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls()
                    o = env.reset()
                if d:
                    action[b] = self._null_action
                    r = 0.0
                    self.reset_agent_one(b)
                observation[b] = o
                reward[b] = r
            if self.max_trajectories is not None and len(completed) >= self.max_trajectories:
                break
        self.finish_evaluation()
        if self.traj_infos_queue is not None:
            for info in completed:
                self.traj_infos_queue.put(info)
        return completed
