"""Samplers and collectors: where environments are stepped and batches are written."""
from rlfast.samplers.async_ import (AsyncAlternatingSampler, AsyncCpuSampler, AsyncGpuSampler,
                                   AsyncSerialSampler)
from rlfast.samplers.collections import BatchSpec, Samples, TrajInfo
from rlfast.samplers.collectors import (ActionSource, AgentActions, BaseCollector,
                                        BaseEvalCollector, DecorrelatingStartCollector,
                                        TrainCollector)
from rlfast.samplers.parallel.base import ParallelSamplerBase, SamplerWorkerError
from rlfast.samplers.parallel.cpu.collectors import (CpuEvalCollector, CpuResetCollector,
                                                     CpuWaitResetCollector)
from rlfast.samplers.parallel.cpu.sampler import CpuSampler
from rlfast.samplers.parallel.gpu.collectors import (GpuEvalCollector, GpuResetCollector,
                                                     GpuWaitResetCollector, ServerActions)
from rlfast.samplers.parallel.gpu.sampler import (AlternatingSampler, GpuSampler,
                                                  NoOverlapAlternatingSampler)
from rlfast.samplers.serial.collectors import SerialEvalCollector
from rlfast.samplers.serial.sampler import SerialSampler

__all__ = [
    "BatchSpec", "Samples", "TrajInfo", "ActionSource", "AgentActions", "ServerActions",
    "BaseCollector", "TrainCollector", "BaseEvalCollector", "DecorrelatingStartCollector",
    "ParallelSamplerBase", "SamplerWorkerError", "CpuSampler", "CpuResetCollector",
    "CpuWaitResetCollector", "CpuEvalCollector", "SerialEvalCollector", "SerialSampler",
    "GpuSampler", "AlternatingSampler", "NoOverlapAlternatingSampler", "GpuResetCollector",
    "GpuWaitResetCollector", "GpuEvalCollector", "AsyncSerialSampler", "AsyncCpuSampler",
    "AsyncGpuSampler", "AsyncAlternatingSampler",
]
