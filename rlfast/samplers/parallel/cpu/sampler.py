"""CPU-parallel sampler: each worker runs its own copy of the (shared-memory) agent."""
from __future__ import annotations

from rlfast.agents.param_sharing import sync_shared_model
from rlfast.samplers.parallel.base import ParallelSamplerBase
from rlfast.samplers.parallel.cpu.collectors import CpuEvalCollector, CpuResetCollector


class CpuSampler(ParallelSamplerBase):
    """Workers compute actions with the agent's model, whose parameters live in shared memory,
    so a CPU-trained model is visible to them at once; a GPU-trained one is copied into the
    shared model (``param_sharing.sync_shared_model``) before each batch."""

    DefaultCollectorCls = CpuResetCollector
    DefaultEvalCollectorCls = CpuEvalCollector

    def _before_batch(self) -> None:
        sync_shared_model(self.agent)
