"""GPU-agent samplers: workers step environments, the master batches the agent.

"GPU" names where the agent runs: in the master, on ``cuda:affinity["cuda_idx"]`` when given
and on the CPU otherwise. A shared step buffer carries observations (written by workers) and
actions / agent_info (written by the master); one semaphore pair per worker orders the turns.
"""
from __future__ import annotations

import numpy as np

from rlfast.samplers.parallel.base import ParallelSamplerBase, _mp_context
from rlfast.samplers.parallel.gpu.action_server import (ActionServer, AlternatingActionServer,
                                                        NoOverlapAlternatingActionServer)
from rlfast.samplers.parallel.gpu.collectors import GpuEvalCollector, GpuResetCollector
from rlfast.utils.buffer import buffer_from_example, torchify_buffer
from rlfast.utils.collections import AttrDict, namedarraytuple

StepBuffer = namedarraytuple("StepBuffer", ["observation", "action", "reward", "reset",
                                            "agent_info"])


class GpuSamplerBase(ParallelSamplerBase):
    """Allocates the step buffers and per-worker semaphores; the agent stays in the master
    (not in shared memory) and serves actions through an action-server mixin."""

    def __init__(self, *args, CollectorCls=GpuResetCollector, eval_CollectorCls=GpuEvalCollector,
                 **kwargs):
        super().__init__(*args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls,
                         **kwargs)

    def _agent_init(self, agent, env, global_B, env_ranks) -> None:
        agent.initialize(env.spaces, share_memory=False, global_B=global_B, env_ranks=env_ranks)

    def _build_step_buffers(self, examples) -> None:
        ctx = _mp_context()
        reward = np.zeros((), dtype=np.float32)
        reset = np.zeros((), dtype=bool)
        example = StepBuffer(examples.observation, examples.action, reward, reset,
                             examples.agent_info)
        self.step_buffer_np = buffer_from_example(example, self.batch_spec.B, share_memory=True)
        self.step_buffer_pyt = torchify_buffer(self.step_buffer_np)
        n_eval = max(self.eval_n_envs, 1)
        eval_example = example._replace(agent_info=None)
        self.eval_step_buffer_np = buffer_from_example(eval_example, n_eval, share_memory=True)
        self.eval_step_buffer_pyt = torchify_buffer(self.eval_step_buffer_np)
        stop = ctx.RawValue("b", False)
        self.sync = [AttrDict(obs_ready=ctx.Semaphore(0), act_ready=ctx.Semaphore(0),
                              eval_done=ctx.RawValue("b", False), stop=stop)
                     for _ in range(self.n_workers)]
        self._eval_starts = np.concatenate([[0], np.cumsum(self.eval_n_envs_list)]).astype(int)

    def _stop_flags(self) -> list:
        return [self.sync[0].stop]

    def _worker_extra_kwargs(self, i: int, start: int, n: int) -> dict:
        e0, e1 = self._eval_starts[i], self._eval_starts[i + 1]
        return dict(sync=self.sync[i], step_buffer_np=self.step_buffer_np[start:start + n],
                    eval_step_buffer_np=self.eval_step_buffer_np[e0:e1])

    def _common_kwargs(self, global_B: int, eval_split: list) -> dict:
        return dict(super()._common_kwargs(global_B, eval_split), agent=None)

    def obtain_samples(self, itr: int):
        self._send_all("sample", itr)
        self.serve_actions(itr)
        return self.samples_pyt, self._gather_traj_infos()

    def evaluate_agent(self, itr: int) -> list:
        if self.eval_n_envs == 0:
            raise ValueError("evaluate_agent() needs eval_n_envs > 0 in the sampler")
        for sync in self.sync:
            sync.eval_done.value = False
        self.agent.reset()
        self._send_all("eval", itr)
        self.serve_actions_evaluation(itr)
        return self._gather_traj_infos()


class GpuSampler(ActionServer, GpuSamplerBase):
    """One batched agent forward per time step over all workers' environments."""


class AlternatingSamplerBase(GpuSamplerBase):
    """Splits the workers into two groups that take turns (needs at least two workers).
    Recurrent agents must use ``AlternatingRecurrentAgentMixin`` (two recurrent states)."""

    def _start_workers(self, common: dict, workers_kwargs: list) -> None:
        if self.n_workers < 2:
            raise ValueError("alternating samplers need at least 2 workers "
                             f"(affinity['workers_cpus']); got {self.n_workers}")
        if getattr(self.agent, "recurrent", False) and not getattr(self.agent, "alternating", False):
            raise TypeError("recurrent agents in alternating samplers must use "
                            "AlternatingRecurrentAgentMixin (e.g. AlternatingRecurrent*Agent)")
        half = self.n_workers // 2
        starts = np.concatenate([[0], np.cumsum(self.n_envs_list)]).astype(int)
        self.worker_groups = [(list(range(0, half)), slice(0, int(starts[half]))),
                              (list(range(half, self.n_workers)),
                               slice(int(starts[half]), int(starts[-1])))]
        self.group_of_rows = {(rows.start, rows.stop): g
                              for g, (_, rows) in enumerate(self.worker_groups)}
        super()._start_workers(common, workers_kwargs)


class AlternatingSampler(AlternatingActionServer, AlternatingSamplerBase):
    """Action selection for one group overlaps environment stepping of the other."""


class NoOverlapAlternatingSampler(NoOverlapAlternatingActionServer, AlternatingSamplerBase):
    """Alternating groups without overlap (actions only once all environments stepped)."""
