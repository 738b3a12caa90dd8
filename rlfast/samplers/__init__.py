"""Samplers and collectors: where environments are stepped and batches are written."""
from rlfast.samplers.collections import BatchSpec, Samples, TrajInfo
from rlfast.samplers.collectors import BaseCollector, BaseEvalCollector, DecorrelatingStartCollector
from rlfast.samplers.parallel.base import ParallelSamplerBase, SamplerWorkerError
from rlfast.samplers.parallel.cpu.collectors import (CpuEvalCollector, CpuResetCollector,
                                                     CpuWaitResetCollector)
from rlfast.samplers.parallel.cpu.sampler import CpuSampler
from rlfast.samplers.parallel.gpu.collectors import (GpuEvalCollector, GpuResetCollector,
                                                     GpuWaitResetCollector)
from rlfast.samplers.parallel.gpu.sampler import (AlternatingSampler, GpuSampler,
                                                  NoOverlapAlternatingSampler)
from rlfast.samplers.serial.collectors import SerialEvalCollector
from rlfast.samplers.serial.sampler import SerialSampler

__all__ = [
    "BatchSpec", "Samples", "TrajInfo", "BaseCollector", "BaseEvalCollector",
    "DecorrelatingStartCollector", "ParallelSamplerBase", "SamplerWorkerError", "CpuSampler",
    "CpuResetCollector", "CpuWaitResetCollector", "CpuEvalCollector", "SerialEvalCollector",
    "SerialSampler", "GpuSampler", "AlternatingSampler", "NoOverlapAlternatingSampler",
    "GpuResetCollector", "GpuWaitResetCollector", "GpuEvalCollector",
]
