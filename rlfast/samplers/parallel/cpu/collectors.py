"""Collectors whose actions come from the agent in the same process (CPU and serial samplers)."""
from __future__ import annotations

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.samplers.collectors import AgentStepMixin, BaseEvalCollector, DecorrelatingStartCollector
from rlfast.utils.buffer import torchify_buffer


class ResetLoop:
    """The training loop shared by every collector: one agent call per time step, then each
    environment steps once. Subclasses decide what a finished episode does (``on_done``)."""

    def collect_batch(self, agent_inputs, traj_infos: list, itr: int):
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        observation, action, reward = agent_inputs
        inputs_pyt = torchify_buffer(agent_inputs)  # views: updated as the arrays are written
        completed = []
        self.start_batch_agent(itr)
        has_env_info = env_buf.env_info is not None
        for t in range(self.batch_T):
            env_buf.observation[t] = observation
            agent_buf.prev_action[t] = action
            env_buf.prev_reward[t] = reward
            act, agent_info = self.get_actions(inputs_pyt, t)
            action[:] = act
            agent_buf.action[t] = action
            if agent_info is not None:
                agent_buf.agent_info[t] = agent_info
            done_t, reward_t = env_buf.done[t], env_buf.reward[t]
            for b, env in enumerate(self.envs):
                if self.skip_env(b):
                    continue
                o, r, d, env_info = env.step(action[b])
                traj_infos[b].step(observation[b], action[b], r, d, None, env_info)
                if getattr(env_info, "traj_done", d):
                    completed.append(traj_infos[b].terminate(o))
                    traj_infos[b] = self.TrajInfoCls()
                    o = self.traj_reset(b, o)
                reward_t[b] = r
                done_t[b] = d
                if has_env_info:
                    env_buf.env_info[t, b] = env_info
                if d:
                    self.on_done(b)
                    action[b] = self._null_action
                    r = 0.0
                observation[b] = o
                reward[b] = r
        self.finish_batch(inputs_pyt)
        return AgentInputs(observation, action, reward), traj_infos, completed


class CpuResetCollector(ResetLoop, AgentStepMixin, DecorrelatingStartCollector):
    """Resets a finished environment immediately, mid-batch.

    A trajectory ends on ``env_info.traj_done`` when the env provides it (e.g. Atari episodic
    lives: a lost life gives ``done`` but not ``traj_done``), else on ``done``; the agent's
    per-env state is reset on ``done``.
    """

    mid_batch_reset = True

    def skip_env(self, b: int) -> bool:
        return False

    def traj_reset(self, b: int, observation):
        return self.envs[b].reset()

    def on_done(self, b: int) -> None:
        self.reset_agent_one(b)


class CpuWaitResetCollector(ResetLoop, AgentStepMixin, DecorrelatingStartCollector):
    """Leaves a finished environment idle (zeros recorded) until the batch ends, then resets it.

    Recurrent agents need this: a training sequence cannot reset its LSTM state mid-sequence,
    so samples after a ``done`` are masked out instead; slow env resets also overlap training.
    """

    mid_batch_reset = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        n = len(self.envs)
        self.need_reset = np.zeros(n, dtype=bool)
        self.need_env_reset = np.zeros(n, dtype=bool)
        self._held_obs = [None] * n

    def skip_env(self, b: int) -> bool:
        return self.need_reset[b]

    def traj_reset(self, b: int, observation):
        self.need_env_reset[b] = True
        return observation

    def on_done(self, b: int) -> None:
        self.need_reset[b] = True

    def collect_batch(self, agent_inputs, traj_infos, itr):
        # Idle environments record zeros for the rest of the batch.
        env_buf = self.samples_np.env
        env_buf.reward[:] = 0
        env_buf.done[:] = False
        if env_buf.env_info is not None:
            env_buf.env_info[:] = 0
        return super().collect_batch(agent_inputs, traj_infos, itr)

    def reset_if_needed(self, agent_inputs) -> None:
        observation, action, reward = agent_inputs
        for b in np.flatnonzero(self.need_reset):
            if self.need_env_reset[b]:
                observation[b] = self.envs[b].reset()
            action[b] = self._null_action
            reward[b] = 0.0
            self.reset_agent_one(b)
        self.need_reset[:] = False
        self.need_env_reset[:] = False


class CpuEvalCollector(AgentStepMixin, BaseEvalCollector):
    """Evaluation in a worker process; completed trajectories go to the master's queue."""
