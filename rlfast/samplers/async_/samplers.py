"""The samplers of the asynchronous runner: today's samplers with a double buffer.

``AsyncRl`` forks one sampler process, which runs one of these. Each is its synchronous
counterpart with two differences: ``async_initialize`` (in the master, before the fork) builds
the agent's CPU model and allocates two ``[T, B]`` batch slots in shared memory, and
``obtain_samples(itr, db_idx)`` writes slot ``db_idx`` while the runner copies the other one
into replay. Collectors, workers and action servers are the synchronous ones. The agent acts
with its own model (``param_sharing.use_own_cpu_model``), into which the runner's sampler loop
pulls the optimizer's published parameters before each batch. The GPU-agent samplers serve
actions on ``cuda:affinity["cuda_idx"]`` when the sampler's affinity gives a GPU, on the CPU
otherwise.
"""
from __future__ import annotations

from rlfast.samplers.parallel.base import ParallelSamplerBase
from rlfast.samplers.parallel.cpu.collectors import CpuEvalCollector, CpuResetCollector
from rlfast.samplers.parallel.gpu.action_server import ActionServer, AlternatingActionServer
from rlfast.samplers.parallel.gpu.collectors import GpuEvalCollector, GpuResetCollector
from rlfast.samplers.serial.sampler import SerialSampler

__all__ = ["AsyncSerialSampler", "AsyncCpuSampler", "AsyncGpuSampler", "AsyncAlternatingSampler"]


class AsyncSerialSampler(SerialSampler):
    """Environments and agent in the sampler process, no further parallelism."""

    is_async = True
    agent_in_sampler_process = True
    restores_state = False  # its environments live in the sampler process, not the master


class AsyncCpuSampler(ParallelSamplerBase):
    """Workers forked from the sampler process act with the sampler's model, which lives in
    shared memory: the parameters pulled between batches reach every worker at once."""

    is_async = True
    agent_in_sampler_process = False
    DefaultCollectorCls = CpuResetCollector
    DefaultEvalCollectorCls = CpuEvalCollector


class AsyncGpuSampler(ParallelSamplerBase):
    """Workers step environments; the sampler process batches the agent over all of them
    (on the sampler's GPU when its affinity gives one)."""

    is_async = True
    agent_in_sampler_process = True
    ActionServerCls = ActionServer
    DefaultCollectorCls = GpuResetCollector
    DefaultEvalCollectorCls = GpuEvalCollector


class AsyncAlternatingSampler(ParallelSamplerBase):
    """Two worker groups take turns, so that action selection for one overlaps environment
    stepping of the other (needs at least two workers)."""

    is_async = True
    agent_in_sampler_process = True
    ActionServerCls = AlternatingActionServer
    DefaultCollectorCls = GpuResetCollector
    DefaultEvalCollectorCls = GpuEvalCollector
