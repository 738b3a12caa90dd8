"""GPU-agent samplers: workers step environments, the master batches the agent.

"GPU" names where the agent runs: in the master, on ``cuda:affinity["cuda_idx"]`` when given
and on the CPU otherwise. Each sampler *has* an action server (``ActionServerCls``), which
owns the shared step buffer and the per-worker semaphores and serves the actions. With the
agent on CUDA the step buffer is page-locked, each served step is one asynchronous copy in,
the agent's step replayed from a CUDA graph (eager where it cannot be captured; the server
logs which, once) and one asynchronous copy out, then one host synchronisation
(``rlfast.samplers.parallel.gpu.action_server``).
"""
from __future__ import annotations

from rlfast.samplers.parallel.base import ParallelSamplerBase
from rlfast.samplers.parallel.gpu.action_server import (ActionServer, AlternatingActionServer,
                                                        NoOverlapAlternatingActionServer)
from rlfast.samplers.parallel.gpu.collectors import GpuEvalCollector, GpuResetCollector


class GpuSampler(ParallelSamplerBase):
    """One batched agent forward per time step over all workers' environments."""

    ActionServerCls = ActionServer

    DefaultCollectorCls = GpuResetCollector
    DefaultEvalCollectorCls = GpuEvalCollector


class AlternatingSampler(ParallelSamplerBase):
    """Two worker groups take turns, so action selection for one group overlaps environment
    stepping of the other (needs at least two workers): with the agent on CUDA, one group's
    copies and graph replay are queued and run while the server waits for the other group's
    observations, and its workers are released as soon as its actions are back. Recurrent
    agents must use ``AlternatingRecurrentAgentMixin`` (two recurrent states)."""

    ActionServerCls = AlternatingActionServer

    DefaultCollectorCls = GpuResetCollector
    DefaultEvalCollectorCls = GpuEvalCollector


class NoOverlapAlternatingSampler(ParallelSamplerBase):
    """Alternating groups without overlap (actions only once all environments stepped)."""

    ActionServerCls = NoOverlapAlternatingActionServer

    DefaultCollectorCls = GpuResetCollector
    DefaultEvalCollectorCls = GpuEvalCollector
