"""CPU-parallel sampler: each worker runs its own copy of the (shared-memory) agent."""
from __future__ import annotations

from rlfast.samplers.parallel.base import ParallelSamplerBase
from rlfast.samplers.parallel.cpu.collectors import CpuEvalCollector, CpuResetCollector


class CpuSampler(ParallelSamplerBase):
    """Workers compute actions with the agent's model, whose parameters live in shared memory,
    so a CPU-trained model is visible to them at once; a GPU-trained one is copied into the
    shared model (``agent.sync_shared_memory``) before each batch."""

    def __init__(self, *args, CollectorCls=CpuResetCollector, eval_CollectorCls=CpuEvalCollector,
                 **kwargs):
        super().__init__(*args, CollectorCls=CollectorCls, eval_CollectorCls=eval_CollectorCls,
                         **kwargs)

    def obtain_samples(self, itr: int):
        self.agent.sync_shared_memory()
        return super().obtain_samples(itr)

    def evaluate_agent(self, itr: int) -> list:
        self.agent.sync_shared_memory()
        return super().evaluate_agent(itr)
