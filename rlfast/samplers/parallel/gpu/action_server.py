"""Action servers: the master-side loops that batch the agent over all workers' observations.

A GPU sampler *has* an action server. The server owns the shared step buffers (observations
written by the workers; actions and agent_info written by the master) and one semaphore pair
per worker. Each time step it waits for every worker's "observations ready" semaphore, applies
the agent resets the workers flagged, runs one batched ``agent.step`` and releases every
worker's "actions ready" semaphore. Waits are bounded: while waiting, a dead worker is
detected (through the sampler's process supervisor) and raised instead of hanging, and so is a
worker that stays silent past the batch's deadline (the sampler's ``worker_timeout``): the
error names the worker whose "observations ready" never came and what it was doing. The
alternating servers split the workers into two groups and serve one group while the other
steps its environments.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.samplers.collections import BatchSpec
from rlfast.utils.buffer import buffer_from_example, numpify_buffer, torchify_buffer
from rlfast.utils.collections import AttrDict, namedarraytuple
from rlfast.utils.finite import raise_if_inputs_nonfinite
from rlfast.utils.processes import Deadline

StepBuffer = namedarraytuple("StepBuffer", ["observation", "action", "reward", "reset",
                                            "agent_info"])

_WAIT_S = 1.0


def _starts(counts: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(int)


class ActionServer:
    """Serve actions to all workers as one batch (``GpuSampler``).

    Built by the sampler once the workers' environment counts are known; ``supervisor``
    (set by the sampler before serving) reports dead workers during the bounded waits, and
    ``describe_worker(i)`` (also set by the sampler) says what a silent worker was doing.
    """

    def __init__(self, agent, batch_spec: BatchSpec, n_envs_list: list[int],
                 eval_n_envs_list: list[int], samples_np, examples, ctx):
        self.agent = agent
        self.batch_spec = batch_spec
        self.n_workers = len(n_envs_list)
        self.n_envs_list = list(n_envs_list)
        self.eval_n_envs_list = list(eval_n_envs_list)
        self.samples_np = samples_np
        self.supervisor = None
        self.describe_worker: Callable[[int], str] | None = None
        self._deadline = Deadline(None)
        self._starts = _starts(self.n_envs_list)
        self._eval_starts = _starts(self.eval_n_envs_list)
        example = StepBuffer(examples.observation, examples.action,
                             np.zeros((), dtype=np.float32), np.zeros((), dtype=bool),
                             examples.agent_info)
        self.step_buffer_np = buffer_from_example(example, batch_spec.B, share_memory=True)
        self.step_buffer_pyt = torchify_buffer(self.step_buffer_np)
        eval_example = example._replace(agent_info=None)
        n_eval = max(sum(self.eval_n_envs_list), 1)
        self.eval_step_buffer_np = buffer_from_example(eval_example, n_eval, share_memory=True)
        self.eval_step_buffer_pyt = torchify_buffer(self.eval_step_buffer_np)
        stop = ctx.RawValue("b", False)
        self.sync = [AttrDict(obs_ready=ctx.Semaphore(0), act_ready=ctx.Semaphore(0),
                              eval_done=ctx.RawValue("b", False), stop=stop)
                     for _ in range(self.n_workers)]

    # ---- what the sampler hands to the workers ---------------------------------------------
    @property
    def stop_flags(self) -> list:
        """Shared flags that release workers blocked on "actions ready" at shutdown."""
        return [self.sync[0].stop]

    def worker_kwargs(self, i: int) -> dict:
        """Worker ``i``'s semaphores and its rows of the step buffers."""
        s0, s1 = self._starts[i], self._starts[i + 1]
        e0, e1 = self._eval_starts[i], self._eval_starts[i + 1]
        return dict(sync=self.sync[i], step_buffer_np=self.step_buffer_np[s0:s1],
                    eval_step_buffer_np=self.eval_step_buffer_np[e0:e1])

    # ---- waiting --------------------------------------------------------------------------
    def _acquire(self, w: int) -> None:
        """Wait for worker ``w``'s "observations ready"; raise if it died or stayed silent
        past the current deadline."""
        semaphore, deadline = self.sync[w].obs_ready, self._deadline
        while not semaphore.acquire(timeout=deadline.wait_s(_WAIT_S)):
            self.supervisor.check_alive()
            if deadline.expired():
                self.supervisor.fail_silent([w], "did not signal 'observations ready'",
                                            deadline, self.describe_worker)

    def _wait_obs(self, workers: list[int]) -> None:
        for w in workers:
            self._acquire(w)

    def _release_act(self, workers: list[int]) -> None:
        for w in workers:
            self.sync[w].act_ready.release()

    # ---- serving --------------------------------------------------------------------------
    def _apply_resets(self, step_np, rows: slice) -> None:
        """Reset the agent's per-env state where workers flagged it (indexes within ``rows``)."""
        flags = step_np.reset[rows]
        if flags.any():
            for b in np.flatnonzero(flags):
                self.agent.reset_one(idx=int(b))
                flags[b] = False  # clear only what was applied

    def _serve_one(self, step_np, step_pyt, rows: slice) -> None:
        self._select_group(rows)
        self._apply_resets(step_np, rows)
        inputs = AgentInputs(step_pyt.observation[rows], step_pyt.action[rows],
                             step_pyt.reward[rows])
        try:
            action, agent_info = self.agent.step(*inputs)
        except Exception as error:  # noqa: BLE001 - named below when an input caused it
            first = rows.start or 0
            raise_if_inputs_nonfinite(error, dict(observation=inputs.observation,
                                                  reward=inputs.prev_reward),
                                      env_ids=range(first, first + len(inputs.prev_reward)))
            raise
        step_np.action[rows] = numpify_buffer(action)
        if agent_info is not None:
            step_np.agent_info[rows] = numpify_buffer(agent_info)

    def _select_group(self, rows: slice) -> None:
        pass  # alternating servers point a two-state recurrent agent at the right group

    def _select_eval_group(self) -> None:
        pass

    def _bootstrap(self, step_np, step_pyt, rows: slice) -> None:
        self._select_group(rows)
        self._apply_resets(step_np, rows)
        if "bootstrap_value" in self.samples_np.agent:
            value = self.agent.value(step_pyt.observation[rows], step_pyt.action[rows],
                                     step_pyt.reward[rows])
            self.samples_np.agent.bootstrap_value[0, rows] = value.numpy()

    def serve_actions(self, itr: int, deadline: Deadline | None = None) -> None:
        """Serve one training batch: ``batch_T`` steps, then the bootstrap value. Every wait
        gives up at ``deadline`` (None: never), raising the supervisor's error."""
        self._deadline = Deadline.of(deadline)
        self._serve_batch(self.step_buffer_np, self.step_buffer_pyt)

    def _serve_batch(self, step_np, step_pyt) -> None:
        everyone, rows = list(range(self.n_workers)), slice(None)
        for _ in range(self.batch_spec.T):
            self._wait_obs(everyone)
            self._serve_one(step_np, step_pyt, rows)
            self._release_act(everyone)
        self._wait_obs(everyone)  # final observations
        self._bootstrap(step_np, step_pyt, rows)

    def prepare_evaluation(self) -> None:
        """Before the workers are told to evaluate: clear their "finished" flags and reset
        the agent's state."""
        for sync in self.sync:
            sync.eval_done.value = False
        self.agent.reset()

    def serve_actions_evaluation(self, itr: int, deadline: Deadline | None = None) -> None:
        """Serve eval actions until every evaluating worker reports it has finished; every
        wait gives up at ``deadline`` (None: never)."""
        self._deadline = Deadline.of(deadline)
        step_np, step_pyt = self.eval_step_buffer_np, self.eval_step_buffer_pyt
        active = [w for w in range(self.n_workers) if self.eval_n_envs_list[w] > 0]
        while active:
            self._wait_obs(active)
            finished = [w for w in active if self.sync[w].eval_done.value]
            active = [w for w in active if w not in finished]
            if active:
                self._select_eval_group()
                self._apply_resets(step_np, slice(None))
                inputs = AgentInputs(step_pyt.observation, step_pyt.action, step_pyt.reward)
                action, _ = self.agent.step(*inputs)
                step_np.action[:] = numpify_buffer(action)
                self._release_act(active)


class AlternatingActionServer(ActionServer):
    """Two worker groups take turns: while group 0's environments step, the agent computes
    group 1's actions, and vice versa, hiding action selection behind env stepping.

    Needs at least two workers; a recurrent agent must keep two recurrent states
    (``AlternatingRecurrentAgentMixin``).
    """

    def __init__(self, agent, batch_spec: BatchSpec, n_envs_list: list[int],
                 eval_n_envs_list: list[int], samples_np, examples, ctx):
        n_workers = len(n_envs_list)
        if n_workers < 2:
            raise ValueError("alternating samplers need at least 2 workers "
                             f"(affinity['workers_cpus']); got {n_workers}")
        if getattr(agent, "recurrent", False) and not getattr(agent, "alternating", False):
            raise TypeError("recurrent agents in alternating samplers must use "
                            "AlternatingRecurrentAgentMixin (e.g. AlternatingRecurrent*Agent)")
        super().__init__(agent, batch_spec, n_envs_list, eval_n_envs_list, samples_np,
                         examples, ctx)
        half = n_workers // 2
        starts = self._starts
        self.worker_groups = [(list(range(0, half)), slice(0, int(starts[half]))),
                              (list(range(half, n_workers)),
                               slice(int(starts[half]), int(starts[-1])))]
        self.group_of_rows = {(rows.start, rows.stop): g
                              for g, (_, rows) in enumerate(self.worker_groups)}

    def _serve_batch(self, step_np, step_pyt) -> None:
        groups = self.worker_groups
        for _ in range(self.batch_spec.T):
            for workers, rows in groups:
                self._wait_obs(workers)
                self._serve_one(step_np, step_pyt, rows)
                self._release_act(workers)
        for workers, rows in groups:
            self._wait_obs(workers)
            self._bootstrap(step_np, step_pyt, rows)

    def _select_group(self, rows: slice) -> None:
        use_group = getattr(self.agent, "use_group", None)
        if use_group is not None:
            use_group(self.group_of_rows[(rows.start, rows.stop)])

    def _select_eval_group(self) -> None:
        # Evaluation serves all eval envs as one batch: keep a two-state agent on state 0.
        use_group = getattr(self.agent, "use_group", None)
        if use_group is not None:
            use_group(0)


class NoOverlapAlternatingActionServer(AlternatingActionServer):
    """Like the alternating server, but actions are computed only once *all* environments
    have stepped (no overlap), still in two half-batches so the same alternating agent works.
    Useful to measure what the overlap buys."""

    def _serve_batch(self, step_np, step_pyt) -> None:
        groups = self.worker_groups
        everyone = list(range(self.n_workers))
        for _ in range(self.batch_spec.T):
            self._wait_obs(everyone)
            for workers, rows in groups:
                self._serve_one(step_np, step_pyt, rows)
            self._release_act(everyone)
        self._wait_obs(everyone)
        for workers, rows in groups:
            self._bootstrap(step_np, step_pyt, rows)
