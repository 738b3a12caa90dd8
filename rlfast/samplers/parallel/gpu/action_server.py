"""Action servers: the master-side loops that batch the agent over all workers' observations.

Each time step the master waits for every worker's "observations ready" semaphore, applies the
agent resets the workers flagged, runs one batched ``agent.step`` and releases every worker's
"actions ready" semaphore. Waits are bounded: while waiting, a dead worker is detected and
raised instead of hanging. The alternating servers split the workers into two groups and
serve one group while the other steps its environments.
"""
from __future__ import annotations

import numpy as np

from rlfast.agents.base import AgentInputs
from rlfast.utils.buffer import numpify_buffer

_WAIT_S = 1.0


class ActionServer:
    """Serve actions to all workers as one batch (``GpuSampler``)."""

    def _acquire(self, semaphore) -> None:
        while not semaphore.acquire(timeout=_WAIT_S):
            self._check_workers_alive()

    def _wait_obs(self, workers: list[int]) -> None:
        for w in workers:
            self._acquire(self.sync[w].obs_ready)

    def _release_act(self, workers: list[int]) -> None:
        for w in workers:
            self.sync[w].act_ready.release()

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
        action, agent_info = self.agent.step(*inputs)
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

    def serve_actions(self, itr: int) -> None:
        step_np, step_pyt = self.step_buffer_np, self.step_buffer_pyt
        everyone, rows = list(range(self.n_workers)), slice(None)
        for _ in range(self.batch_spec.T):
            self._wait_obs(everyone)
            self._serve_one(step_np, step_pyt, rows)
            self._release_act(everyone)
        self._wait_obs(everyone)  # final observations
        self._bootstrap(step_np, step_pyt, rows)

    def serve_actions_evaluation(self, itr: int) -> None:
        """Serve eval actions until every evaluating worker reports it has finished."""
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
    group 1's actions, and vice versa, hiding action selection behind env stepping."""

    def serve_actions(self, itr: int) -> None:
        step_np, step_pyt = self.step_buffer_np, self.step_buffer_pyt
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

    def serve_actions(self, itr: int) -> None:
        step_np, step_pyt = self.step_buffer_np, self.step_buffer_pyt
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
