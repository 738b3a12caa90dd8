"""Collectors: the environment-stepping loops that run inside sampler workers.

There is one training loop (:meth:`TrainCollector.collect_batch`) and one evaluation loop
(:meth:`BaseEvalCollector.collect_evaluation`), and both step their environments through the
same step body (:meth:`BaseCollector.step_envs`). Where actions come from is an object the
collector holds, an :class:`ActionSource`: :class:`AgentActions` runs the agent in the
collector's own process (serial and CPU samplers); the GPU samplers' ``ServerActions`` asks the
action server in the master. The concrete collectors only pick an action source and a reset
policy (reset a finished environment at once, or wait for the batch end).

A multi-agent environment (:mod:`rlfast.envs.multiagent`) fills one batch column per agent:
environment ``e`` of ``n_agents`` agents owns columns ``e * n_agents`` to
``(e + 1) * n_agents - 1``, and the collector steps it with those columns' actions
(:meth:`BaseCollector._step_agent_envs`).

A training collector steps ``batch_T`` times over its environments, writing every field into
its slice of the pre-allocated samples buffer; observations are written into pre-allocated
arrays in place, so nothing is allocated per step beyond what the environment returns.

In a parallel sampler's worker, a collector also publishes what it is doing (phase, iteration,
step, environment) into the worker's row of a shared status table
(``rlfast.samplers.parallel.status``), so that the master can say what a silent worker was
doing; these are a few integer stores per step. Without a status (the serial sampler) each
costs one ``is not None`` test.
"""
from __future__ import annotations

import abc
from typing import Any

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.envs.base import trajectory_done
from rlfast.samplers.collections import Samples
from rlfast.samplers.parallel.status import ENV, ITR, PHASE, STEP, Phase, WorkerStatus
from rlfast.utils.buffer import buffer_from_example, numpify_buffer, torchify_buffer
from rlfast.utils.finite import raise_if_inputs_nonfinite


def local_input_arrays(first_observations: list, null_action: np.ndarray) -> AgentInputs:
    """(observation, prev_action, prev_reward) arrays for the collector's environments, filled
    with the first observations, null actions and zero rewards."""
    n = len(first_observations)
    observation = buffer_from_example(first_observations[0], n)
    for b, obs in enumerate(first_observations):
        observation[b] = obs
    prev_action = np.stack([null_action for _ in range(n)])
    prev_reward = np.zeros(n, dtype=np.float32)
    return AgentInputs(observation, prev_action, prev_reward)


class ActionSource(abc.ABC):
    """Where a collector's actions come from, and who keeps the agent's per-env state.

    ``defer_resets``: wait-reset collectors apply their environment resets at the start of
    the next batch instead of right after the last step (the master may still read the
    worker's step-buffer rows until it asks for new samples). ``remote``: the actions are
    computed in another process (the collector then reports "waiting for actions").
    """

    defer_resets = False
    remote = False

    @abc.abstractmethod
    def start(self, global_B: int, env_ranks: list | None) -> None:
        """Once, before the first batch: set up per-collector agent state."""

    @abc.abstractmethod
    def input_arrays(self, first_observations: list, null_action: np.ndarray) -> AgentInputs:
        """The (observation, prev_action, prev_reward) arrays the collector steps in place."""

    @abc.abstractmethod
    def act(self, agent_inputs_pyt: AgentInputs, action_out: np.ndarray) -> Any:
        """Write this step's actions into ``action_out``; return the agent_info (numpy)."""

    @abc.abstractmethod
    def reset_one(self, b: int) -> None:
        """Reset the agent's state for environment ``b`` (its episode ended)."""

    @abc.abstractmethod
    def start_batch(self, itr: int) -> None:
        """Before a training batch."""

    @abc.abstractmethod
    def finish_batch(self, agent_inputs_pyt: AgentInputs, samples_np: Samples) -> None:
        """After a training batch (e.g. write the bootstrap value)."""

    @abc.abstractmethod
    def start_evaluation(self, itr: int) -> None:
        """Before an evaluation run."""

    @abc.abstractmethod
    def finish_evaluation(self) -> None:
        """After an evaluation run."""


class AgentActions(ActionSource):
    """Actions from an agent in the collector's own process (serial and CPU samplers)."""

    def __init__(self, agent, **_):
        self.agent = agent

    def start(self, global_B: int, env_ranks: list | None) -> None:
        self.agent.collector_initialize(global_B=global_B, env_ranks=env_ranks)
        self.agent.reset()
        self.agent.sample_mode(itr=0)

    def input_arrays(self, first_observations: list, null_action: np.ndarray) -> AgentInputs:
        return local_input_arrays(first_observations, null_action)

    def act(self, agent_inputs_pyt: AgentInputs, action_out: np.ndarray) -> Any:
        action, agent_info = self.agent.step(*agent_inputs_pyt)
        action_out[:] = numpify_buffer(action)
        return numpify_buffer(agent_info)

    def reset_one(self, b: int) -> None:
        self.agent.reset_one(idx=b)

    def start_batch(self, itr: int) -> None:
        # Workers hold their own agent copy: leave any eval mode set by evaluation.
        self.agent.sample_mode(itr)

    def finish_batch(self, agent_inputs_pyt: AgentInputs, samples_np: Samples) -> None:
        agent_buf = samples_np.agent
        if "bootstrap_value" in agent_buf:
            agent_buf.bootstrap_value[0] = self.agent.value(*agent_inputs_pyt).numpy()

    def start_evaluation(self, itr: int) -> None:
        self.agent.eval_mode(itr)  # first: it stashes a recurrent agent's sampling state
        self.agent.reset()

    def finish_evaluation(self) -> None:
        pass


class BaseCollector:
    """Holds the environments and the action source, and steps the environments once.

    ``ActionsCls`` (a class attribute of the concrete collectors) builds the action source
    from ``agent``, ``sync`` and ``step_buffer_np``. ``status`` (parallel workers only) is the
    worker's row of the shared status table, written as the collector goes.
    """

    ActionsCls: type = AgentActions
    # Phases published while stepping / resetting (the eval collector has its own).
    stepping_phase = Phase.STEPPING
    resetting_phase = Phase.RESETTING

    def __init__(self, rank: int, envs: list, TrajInfoCls, agent=None, sync=None,
                 step_buffer_np=None, status: WorkerStatus | None = None):
        self.rank = rank
        self.envs = envs
        self.TrajInfoCls = TrajInfoCls
        self.agent = agent
        self.actions = self.ActionsCls(agent=agent, sync=sync, step_buffer_np=step_buffer_np)
        self._null_action = np.asarray(envs[0].action_space.null_value())
        # Multi-agent environments (rlfast.envs.multiagent) fill n_agents columns each:
        # environment e owns columns e * n_agents ... (e + 1) * n_agents - 1.
        self.n_agents = int(getattr(envs[0], "n_agents", 1))
        widths = {int(getattr(env, "n_agents", 1)) for env in envs}
        if len(widths) > 1:
            raise ValueError(f"{type(self).__name__}: the environments have different numbers "
                             f"of agents {sorted(widths)}; every environment of a sampler must "
                             f"have the same")
        if self.n_agents > 1:
            self.step_envs = self._step_agent_envs
        self.status = status
        self._row = None if status is None else status.row  # written in the loops
        self._stepping = int(self.stepping_phase)
        self._resetting = int(self.resetting_phase)

    def _publish(self, phase: Phase, itr: int | None = None, step: int = -1,
                 env: int = -1) -> None:
        """Publish a phase change outside the per-step loop (no-op without a status)."""
        if self.status is not None:
            self.status.set(phase, itr, step, env)

    def step_envs(self, action: np.ndarray, observation: Any, reward: np.ndarray,
                  traj_infos: list, completed: list, reset_now: bool = True,
                  idle: np.ndarray | None = None, pending_reset: np.ndarray | None = None,
                  reward_t: np.ndarray | None = None, done_t: np.ndarray | None = None,
                  env_info_t: Any = None) -> None:
        """Step every environment once with ``action``, in place; the one step body.

        A trajectory ends on ``env_info.traj_done`` when the env gives it (e.g. Atari episodic
        lives), else on ``done``; its info is appended to ``completed``. With ``reset_now``
        the environment is reset at once and the agent's state for it on ``done``; otherwise
        the environment goes idle (``idle[b]``, skipped until the batch ends) and a finished
        trajectory is flagged in ``pending_reset``. ``*_t`` rows of the samples buffer, when
        given, receive this step's reward, done and env_info.
        """
        row = self._row
        for b, env in enumerate(self.envs):
            if idle is not None and idle[b]:
                continue
            if row is not None:
                row[ENV] = b
            o, r, d, env_info = env.step(action[b])
            traj_infos[b].step(observation[b], action[b], r, d, None, env_info)
            if trajectory_done(env_info, d):
                o = self._end_trajectory(b, env, o, traj_infos, completed, reset_now,
                                         pending_reset)
            if reward_t is not None:
                reward_t[b] = r
                done_t[b] = d
                if env_info_t is not None:
                    env_info_t[b] = env_info
            if d:
                if reset_now:
                    self.actions.reset_one(b)
                else:
                    idle[b] = True
                action[b] = self._null_action
                r = 0.0
            observation[b] = o
            reward[b] = r


    def _end_trajectory(self, b: int, env, o: Any, traj_infos: list, completed: list,
                        reset_now: bool, pending_reset: np.ndarray | None) -> Any:
        """Environment ``b``'s trajectory ended: complete its info and start a new one; reset
        the environment now (returning its first observation) or flag it for the batch end
        (returning ``o``)."""
        completed.append(traj_infos[b].terminate(o))
        traj_infos[b] = self.TrajInfoCls()
        if not reset_now:
            pending_reset[b] = True
            return o
        row = self._row
        if row is not None:
            row[PHASE] = self._resetting
        o = env.reset()
        if row is not None:
            row[PHASE] = self._stepping
        return o

    def columns(self, e: int) -> Any:
        """The batch columns of environment ``e``: ``e`` itself, or a slice of its agents."""
        n = self.n_agents
        return e if n == 1 else slice(e * n, (e + 1) * n)

    def column_list(self, per_env: list) -> list:
        """Per-environment values (first observations) as one value per column."""
        return per_env if self.n_agents == 1 else [v for agents in per_env for v in agents]

    def random_action(self, env: Any) -> Any:
        """A random action for every agent of ``env`` (decorrelation steps)."""
        if self.n_agents == 1:
            return env.action_space.sample()
        return np.stack([env.action_space.sample() for _ in range(self.n_agents)])

    def _step_agent_envs(self, action: np.ndarray, observation: Any, reward: np.ndarray,
                         traj_infos: list, completed: list, reset_now: bool = True,
                         idle: np.ndarray | None = None, pending_reset: np.ndarray | None = None,
                         reward_t: np.ndarray | None = None, done_t: np.ndarray | None = None,
                         env_info_t: Any = None) -> None:
        """:meth:`step_envs` for multi-agent environments: environment ``e`` steps with the
        actions of its columns and writes its agents' rewards, done flags and infos there.
        An agent that is done (it left, or the episode ended) has its column's agent state
        reset (with ``reset_now``), its action nulled and its reward zeroed, as one
        environment's would; the episode ends (trajectory completed, environment reset or
        idle) when every agent is done."""
        row = self._row
        n = self.n_agents
        for e, env in enumerate(self.envs):
            if idle is not None and idle[e]:
                continue
            if row is not None:
                row[ENV] = e
            cols = slice(e * n, (e + 1) * n)
            o, r, d, env_info = env.step(action[cols])
            traj_infos[e].step(observation[cols], action[cols], r, d, None, env_info)
            over = bool(np.all(d))
            if over:
                o = self._end_trajectory(e, env, o, traj_infos, completed, reset_now,
                                         pending_reset)
            if reward_t is not None:
                reward_t[cols] = r
                done_t[cols] = d
                if env_info_t is not None:
                    env_info_t[cols] = env_info
            if np.any(d):
                done_cols = np.flatnonzero(d) + e * n
                if reset_now:
                    for c in done_cols:
                        self.actions.reset_one(int(c))
                elif over:
                    idle[e] = True
                action[done_cols] = self._null_action
                r = np.where(d, 0.0, r)
            observation[cols] = o
            reward[cols] = r


class TrainCollector(BaseCollector):
    """The training collector: a decorrelating start, then one loop for every sampler.

    ``mid_batch_reset`` (class attribute) picks the reset policy. True: a finished
    environment is reset immediately, mid-batch. False (wait-reset): it stays idle, recording
    zeros, until the batch ends, then resets; recurrent agents need this, since a training
    sequence cannot reset its state mid-sequence, and slow resets then overlap training.
    """

    mid_batch_reset = True

    def __init__(self, rank: int, envs: list, samples_np, batch_T: int, TrajInfoCls,
                 agent=None, sync=None, step_buffer_np=None, global_B: int = 1,
                 env_ranks: list | None = None, status: WorkerStatus | None = None):
        super().__init__(rank, envs, TrajInfoCls, agent=agent, sync=sync,
                         step_buffer_np=step_buffer_np, status=status)
        self.samples_np = samples_np
        self.batch_T = batch_T
        self.global_B = global_B
        self.env_ranks = env_ranks
        n = len(envs)
        self.need_reset = np.zeros(n, dtype=bool)      # idle since its episode ended
        self.need_env_reset = np.zeros(n, dtype=bool)  # ... and its trajectory ended too

    def start_envs(self, max_decorrelation_steps: int = 0) -> tuple[AgentInputs, list]:
        """Reset every environment, then take a random number (1 to the maximum) of random
        actions in each, so that the environments of one batch are at different points of
        their episodes. Returns the agent inputs and the running trajectory infos."""
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        first = []
        for b, env in enumerate(self.envs):
            self._publish(Phase.RESETTING_ENVS, env=b)
            first.append(env.reset())
        observation, prev_action, prev_reward = self.actions.input_arrays(
            self.column_list(first), self._null_action)
        if max_decorrelation_steps > 0:
            agents = self.n_agents > 1
            for b, env in enumerate(self.envs):
                n_steps = 1 + int(np.random.rand() * max_decorrelation_steps)
                cols = self.columns(b)
                for step in range(n_steps):
                    self._publish(Phase.DECORRELATING, step=step, env=b)
                    a = self.random_action(env)
                    o, r, d, info = env.step(a)
                    traj_infos[b].step(o, a, r, d, None, info)
                    if (bool(np.all(d)) if agents else trajectory_done(info, d)):
                        o = env.reset()
                        traj_infos[b] = self.TrajInfoCls()
                    if agents:
                        a[d] = self._null_action
                        r = np.where(d, 0.0, r)
                    elif d:
                        a, r = self._null_action, 0.0
                    observation[cols] = o
                    prev_action[cols] = a
                    prev_reward[cols] = r
        return AgentInputs(observation, prev_action, prev_reward), traj_infos

    def start_agent(self) -> None:
        """Let the agent set up per-collector state (e.g. vector epsilon) and reset it."""
        self._publish(Phase.STARTING_AGENT)
        self.actions.start(self.global_B, self.env_ranks)

    def reset_if_needed(self, agent_inputs: AgentInputs) -> None:
        """Between batches (wait-reset): reset the environments whose episodes ended."""
        if not self.mid_batch_reset and not self.actions.defer_resets:
            self._apply_resets(agent_inputs, Phase.RESETTING_AFTER_BATCH)

    def _apply_resets(self, agent_inputs, phase: Phase) -> None:
        observation, action, reward = agent_inputs
        n = self.n_agents
        for b in np.flatnonzero(self.need_reset):
            cols = self.columns(int(b))
            if self.need_env_reset[b]:
                self._publish(phase, env=int(b))
                observation[cols] = self.envs[b].reset()
            action[cols] = self._null_action
            reward[cols] = 0.0
            for c in range(b * n, (b + 1) * n):
                self.actions.reset_one(int(c))
        self.need_reset[:] = False
        self.need_env_reset[:] = False

    def collect_batch(self, agent_inputs: AgentInputs, traj_infos: list,
                      itr: int) -> tuple[AgentInputs, list, list]:
        """Step ``batch_T`` times, writing into the samples buffer; returns the new agent
        inputs, the running trajectory infos and the infos of trajectories completed."""
        agent_buf, env_buf = self.samples_np.agent, self.samples_np.env
        has_env_info = env_buf.env_info is not None
        reset_now = self.mid_batch_reset
        row = self._row
        if row is not None:
            row[ITR] = itr
        if not reset_now:
            if self.actions.defer_resets:
                self._apply_resets(agent_inputs, Phase.RESETTING_BEFORE_BATCH)
            env_buf.reward[:] = 0  # idle environments record zeros for the rest of the batch
            env_buf.done[:] = False
            if has_env_info:
                env_buf.env_info[:] = 0
        observation, action, reward = agent_inputs
        inputs_pyt = torchify_buffer(agent_inputs)  # views: updated as the arrays are written
        completed: list = []
        idle = None if reset_now else self.need_reset
        pending = None if reset_now else self.need_env_reset
        acting = int(Phase.WAITING_FOR_ACTIONS if self.actions.remote
                     else Phase.COMPUTING_ACTIONS)
        stepping = self._stepping
        self.actions.start_batch(itr)
        for t in range(self.batch_T):
            env_buf.observation[t] = observation
            agent_buf.prev_action[t] = action
            env_buf.prev_reward[t] = reward
            if row is not None:
                row[STEP] = t
                row[PHASE] = acting
            try:
                agent_info = self.actions.act(inputs_pyt, action)
            except Exception as error:  # noqa: BLE001 - named below when an input caused it
                self._explain_act_failure(error, observation, reward, itr, t)
                raise
            agent_buf.action[t] = action
            if agent_info is not None:
                agent_buf.agent_info[t] = agent_info
            if row is not None:
                row[PHASE] = stepping
            self.step_envs(action, observation, reward, traj_infos, completed, reset_now, idle,
                           pending, env_buf.reward[t], env_buf.done[t],
                           env_buf.env_info[t] if has_env_info else None)
        self._publish(Phase.FINISHING_BATCH, itr)
        self.actions.finish_batch(inputs_pyt, self.samples_np)
        return AgentInputs(observation, action, reward), traj_infos, completed


    def _explain_act_failure(self, error: Exception, observation, reward, itr: int,
                             t: int) -> None:
        raise_if_inputs_nonfinite(error, dict(observation=observation, reward=reward), itr, t,
                                  self.env_ranks)


DecorrelatingStartCollector = TrainCollector  # the rlpyt name of the training collector base


class BaseEvalCollector(BaseCollector):
    """Runs the agent (in eval mode) for at most ``max_T`` steps per environment, resetting
    finished ones, and stops early when ``max_trajectories`` trajectories have completed.
    Only trajectory statistics are kept; nothing is written to a samples buffer."""

    stepping_phase = Phase.EVAL_STEPPING
    resetting_phase = Phase.EVAL_RESETTING

    def __init__(self, rank: int, envs: list, TrajInfoCls, max_T: int = 1000, agent=None,
                 sync=None, step_buffer_np=None, max_trajectories: int | None = None,
                 status: WorkerStatus | None = None):
        super().__init__(rank, envs, TrajInfoCls, agent=agent, sync=sync,
                         step_buffer_np=step_buffer_np, status=status)
        self.max_T = int(max_T)
        self.max_trajectories = max_trajectories

    def collect_evaluation(self, itr: int) -> list:
        """Run one evaluation from freshly reset environments; return the completed
        trajectory infos."""
        traj_infos = [self.TrajInfoCls() for _ in self.envs]
        completed: list = []
        first = []
        for b, env in enumerate(self.envs):
            self._publish(Phase.EVAL_RESETTING, itr, env=b)
            first.append(env.reset())
        inputs = self.actions.input_arrays(self.column_list(first), self._null_action)
        observation, action, reward = inputs
        inputs_pyt = torchify_buffer(inputs)
        self.actions.start_evaluation(itr)
        row = self._row
        acting = int(Phase.EVAL_WAITING_FOR_ACTIONS if self.actions.remote
                     else Phase.EVAL_COMPUTING_ACTIONS)
        for t in range(self.max_T):
            if row is not None:
                row[STEP] = t
                row[PHASE] = acting
            try:
                self.actions.act(inputs_pyt, action)
            except Exception as error:  # noqa: BLE001 - named below when an input caused it
                raise_if_inputs_nonfinite(error, dict(observation=observation, reward=reward),
                                          itr, t)
                raise
            if row is not None:
                row[PHASE] = self._stepping
            self.step_envs(action, observation, reward, traj_infos, completed)
            if self.max_trajectories is not None and len(completed) >= self.max_trajectories:
                break
        self._publish(Phase.EVAL_FINISHING, itr)
        self.actions.finish_evaluation()
        return completed
