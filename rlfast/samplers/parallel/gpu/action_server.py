"""Action servers: the master-side loops that batch the agent over the workers' observations.

A GPU sampler *has* an action server. The server owns the shared step buffers (observations
written by the workers; actions and agent_info written by the master), one per worker group
(see ``step_buffer``), and one semaphore pair per worker. Each time step it waits for its
workers' "observations ready" semaphores, has the group's inference (``inference``) apply the
reset requests and compute the actions, and releases the workers' "actions ready" semaphores.

With the agent on CUDA each group's rows live in one page-locked block, and a served step is
one ``non_blocking`` copy of the inputs to the device, the agent's step (replayed from a CUDA
graph where it can be captured, eager otherwise), one ``non_blocking`` copy of the actions and
agent_info back, and exactly one host synchronisation (on an event recorded after that copy)
before the workers are released; nothing is allocated per step. With the agent on the CPU the
step reads and writes the shared rows directly, with ``agent.step``'s numbers.

Waits are bounded: while waiting, a dead worker is detected (through the sampler's process
supervisor) and raised instead of hanging, and so is a worker that stays silent past the batch's
deadline (the sampler's ``worker_timeout``): the error names the worker whose "observations
ready" never came and what it was doing. The alternating servers split the workers into two
groups and compute one group's actions while the other steps its environments.
"""
from __future__ import annotations

import time
from typing import Any, Callable

import numpy as np
import torch

from rlfast.samplers.collections import BatchSpec
from rlfast.samplers.parallel.gpu.device_ops import CudaOps
from rlfast.samplers.parallel.gpu.inference import (DeviceGroup, HostGroup, apply_agent_resets,
                                                    has_device_step)
from rlfast.samplers.parallel.gpu.step_buffer import GroupStepBuffer, StepBuffer
from rlfast.utils.collections import AttrDict
from rlfast.utils.logging import logger
from rlfast.utils.pinned import HostMemoryRegistration, HostRegisterError
from rlfast.utils.processes import Deadline

__all__ = ["ActionServer", "AlternatingActionServer", "NoOverlapAlternatingActionServer",
           "StepBuffer"]

_WAIT_S = 1.0
_POLL_S = 5e-5  # while a group's actions are on their way back: how often to look


def _starts(counts: list[int]) -> np.ndarray:
    return np.concatenate([[0], np.cumsum(counts)]).astype(int)


def default_ops(device: torch.device) -> CudaOps | None:
    """The device operations for an agent on ``device``: :class:`CudaOps` on CUDA, None (work
    on the shared rows directly) elsewhere."""
    return CudaOps(device) if device.type == "cuda" else None


class ActionServer:
    """Serve actions to all workers as one batch (``GpuSampler``).

    Built by the sampler once the workers' environment counts are known; ``supervisor``
    (set by the sampler before serving) reports dead workers during the bounded waits, and
    ``describe_worker(i)`` (also set by the sampler) says what a silent worker was doing.

    ``cuda_graphs`` (class attribute): capture the agent's step in a CUDA graph where it can
    be (set False to measure eager inference). ``make_ops(device)``: the device operations
    for the agent's device (:func:`default_ops`; tests substitute a CPU stand-in).
    """

    cuda_graphs = True
    make_ops: Callable[[torch.device], Any] = staticmethod(default_ops)

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
        agent_info = examples.agent_info
        state_example = (agent_info.prev_rnn_state if agent_info is not None
                         and "prev_rnn_state" in getattr(agent_info, "_fields", ()) else None)
        self._device_path = has_device_step(agent) and (
            not getattr(agent, "recurrent", False) or state_example is not None)
        self._state_example = state_example
        self._logged: set = set()
        self.groups = [self._make_group(workers, self._starts, example, rnn_group, f"group {g}")
                       for g, (workers, rnn_group) in enumerate(self._worker_groups())]
        self._group_of = {w: group for group in self.groups for w in group.workers}
        self.eval_group = self._make_group(list(range(self.n_workers)), self._eval_starts,
                                           example._replace(agent_info=None),
                                           self._eval_rnn_group(), "evaluation")
        stop = ctx.RawValue("b", False)
        self.sync = [AttrDict(obs_ready=ctx.Semaphore(0), act_ready=ctx.Semaphore(0),
                              eval_done=ctx.RawValue("b", False), stop=stop)
                     for _ in range(self.n_workers)]
        self._ops = None
        self._ops_device: torch.device | None = None
        self._registration: HostMemoryRegistration | None = None

    # ---- groups ---------------------------------------------------------------------------
    def _worker_groups(self) -> list[tuple[list[int], int | None]]:
        """``(workers, recurrent-state group)`` per group: one group of every worker here."""
        return [(list(range(self.n_workers)), None)]

    def _eval_rnn_group(self) -> int | None:
        return None

    def _make_group(self, workers: list[int], starts: np.ndarray, example: StepBuffer,
                    rnn_group: int | None, name: str):
        first, stop = int(starts[workers[0]]), int(starts[workers[-1] + 1])
        buffer = GroupStepBuffer(example, max(stop - first, 1))
        label = f"{type(self).__name__} {name} ({stop - first} envs)"
        if self._device_path:
            return DeviceGroup(self.agent, buffer, workers, slice(first, stop), rnn_group,
                               self._log_once, label, state_example=self._state_example)
        return HostGroup(self.agent, buffer, workers, slice(first, stop), rnn_group,
                         self._log_once, label)

    def _log_once(self, message: str) -> None:
        if message not in self._logged:
            self._logged.add(message)
            logger.log(message)

    # ---- what the sampler hands to the workers ---------------------------------------------
    @property
    def stop_flags(self) -> list:
        """Shared flags that release workers blocked on "actions ready" at shutdown."""
        return [self.sync[0].stop]

    def reset_sync(self) -> None:
        """After every worker was stopped mid-batch, before new ones start: no semaphore left
        raised, no evaluation marked done, the stop flag down."""
        for sync in self.sync:
            for semaphore in (sync.obs_ready, sync.act_ready):
                while semaphore.acquire(False):
                    pass
            sync.eval_done.value = False
        self.sync[0].stop.value = False

    def worker_kwargs(self, i: int) -> dict:
        """Worker ``i``'s semaphores and its rows of the step buffers."""
        group, base = self._group_of[i], self._starts[self._group_of[i].workers[0]]
        s0, s1 = self._starts[i] - base, self._starts[i + 1] - base
        e0, e1 = self._eval_starts[i], self._eval_starts[i + 1]
        return dict(sync=self.sync[i], step_buffer_np=group.buffer.rows(s0, s1),
                    eval_step_buffer_np=self.eval_group.buffer.rows(e0, e1))

    # ---- the device ---------------------------------------------------------------------
    def _begin(self, groups: list) -> None:
        """Before a batch: device operations for the agent's device (made, and the step
        buffers page-locked, when it changed), the server's stream after the caller's queued
        work (parameter updates), each group's staging and graph checked."""
        device = torch.device(self.agent.device)
        if device != self._ops_device:
            self._ops_device = device
            self._ops = self.make_ops(device) if self._device_path else None
            if device.type == "cuda" or getattr(self._ops, "pins_host_memory", False):
                self._pin()
        if self._ops is not None:
            self._ops.follow_caller()
        for group in groups:
            group.begin_batch(self._ops, self.cuda_graphs)

    def _pin(self) -> None:
        if self._registration is not None:
            return
        self._registration = HostMemoryRegistration()
        for group in self.groups + [self.eval_group]:
            try:
                self._registration.register(group.buffer.block)
            except HostRegisterError as error:
                self._log_once(f"{group.label}: step buffer not page-locked ({error}); host-"
                               "device copies stay correct but block the host")

    def close(self) -> None:
        """Unregister the page-locked step buffers and drop the device staging (the sampler's
        shutdown calls this; idempotent)."""
        for group in self.groups + [self.eval_group]:
            group.close()
        if self._registration is not None:
            self._registration.close()
            self._registration = None
        self._ops, self._ops_device = None, None

    # ---- waiting --------------------------------------------------------------------------
    def _acquire(self, w: int, pending=None):
        """Wait for worker ``w``'s "observations ready"; raise if it died or stayed silent
        past the current deadline. While ``pending`` (a group whose actions are on their way
        back) waits, look every ``_POLL_S`` whether its actions arrived, and hand them back at
        once if so. Returns the group still pending (None once handed back)."""
        semaphore, deadline = self.sync[w].obs_ready, self._deadline
        next_check = time.monotonic() + _WAIT_S
        while True:
            if pending is not None and pending.ready():
                self._hand_back(pending)
                pending = None
            wait_s = _POLL_S if pending is not None else deadline.wait_s(_WAIT_S)
            if semaphore.acquire(timeout=wait_s):
                return pending
            if pending is not None and time.monotonic() < next_check:
                continue
            next_check = time.monotonic() + _WAIT_S
            self.supervisor.check_alive()
            if deadline.expired():
                self.supervisor.fail_silent([w], "did not signal 'observations ready'",
                                            deadline, self.describe_worker)

    def _wait_obs(self, workers: list[int], pending=None):
        """Wait for every worker of ``workers``; see :meth:`_acquire` for ``pending``."""
        for w in workers:
            pending = self._acquire(w, pending)
        return pending

    def _release_act(self, workers: list[int]) -> None:
        for w in workers:
            self.sync[w].act_ready.release()

    def _hand_back(self, group) -> None:
        """Wait for ``group``'s actions (its one host synchronisation) and release its
        workers."""
        group.finish()
        self._release_act(group.workers)

    # ---- serving --------------------------------------------------------------------------
    def _apply_resets(self, step_np, rows: slice) -> None:
        """Reset the agent's per-env state where workers flagged it (indexes within ``rows``)."""
        apply_agent_resets(self.agent, step_np.reset[rows])

    def _bootstrap(self, group) -> None:
        agent_samples = self.samples_np.agent
        value_out = (agent_samples.bootstrap_value[0, group.rows]
                     if "bootstrap_value" in agent_samples else None)
        group.bootstrap(value_out)

    def serve_actions(self, itr: int, deadline: Deadline | None = None) -> None:
        """Serve one training batch: ``batch_T`` steps, then the bootstrap value. Every wait
        gives up at ``deadline`` (None: never), raising the supervisor's error."""
        self._deadline = Deadline.of(deadline)
        self._begin(self.groups)
        self._serve_batch()

    def _serve_batch(self) -> None:
        group = self.groups[0]
        for _ in range(self.batch_spec.T):
            self._wait_obs(group.workers)
            group.launch()
            self._hand_back(group)
        self._wait_obs(group.workers)  # final observations
        self._bootstrap(group)

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
        group = self.eval_group
        self._begin([group])
        active = [w for w in range(self.n_workers) if self.eval_n_envs_list[w] > 0]
        while active:
            self._wait_obs(active)
            finished = [w for w in active if self.sync[w].eval_done.value]
            active = [w for w in active if w not in finished]
            if active:
                group.launch()
                group.finish()
                self._release_act(active)


class AlternatingActionServer(ActionServer):
    """Two worker groups take turns: while one group's environments step, the agent computes
    the other group's actions, hiding action selection behind environment stepping.

    Each step of a group: wait for its observations, *launch* its inference (with the agent
    on CUDA the copies and the graph replay are only queued), then wait for the other group's
    observations; the first group's actions are handed back (its one synchronisation, then its
    workers released) as soon as they have arrived, looked for while waiting, or at the latest
    once the other group's observations are in. So the device works on one group while the
    other steps, and neither waits for the other longer than its own actions take. On the CPU
    the inference is finished at launch, and each group is released right after it.

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

    def _worker_groups(self) -> list[tuple[list[int], int | None]]:
        half = self.n_workers // 2
        return [(list(range(0, half)), 0), (list(range(half, self.n_workers)), 1)]

    def _eval_rnn_group(self) -> int | None:
        # Evaluation serves all eval envs as one batch: keep a two-state agent on state 0.
        return 0

    def _serve_batch(self) -> None:
        pending = None  # the group launched last, whose workers wait for their actions
        for _ in range(self.batch_spec.T):
            for group in self.groups:
                pending = self._wait_obs(group.workers, pending)
                if pending is not None:
                    self._hand_back(pending)
                group.launch()
                pending = group
        first, second = self.groups
        pending = self._wait_obs(first.workers, pending)  # final observations
        if pending is not None:
            self._hand_back(pending)
        self._wait_obs(second.workers)
        for group in self.groups:
            self._bootstrap(group)


class NoOverlapAlternatingActionServer(AlternatingActionServer):
    """Like the alternating server, but actions are computed only once *all* environments
    have stepped (no overlap), still in two half-batches so the same alternating agent works.
    Useful to measure what the overlap buys."""

    def _serve_batch(self) -> None:
        everyone = list(range(self.n_workers))
        for _ in range(self.batch_spec.T):
            self._wait_obs(everyone)
            for group in self.groups:
                group.launch()
            for group in self.groups:
                group.finish()
            self._release_act(everyone)
        self._wait_obs(everyone)
        for group in self.groups:
            self._bootstrap(group)
