"""Asynchronous samplers: the sampler runs in a process of its own (see ``AsyncRl``)."""
from rlfast.samplers.async_.samplers import (AsyncAlternatingSampler, AsyncCpuSampler,
                                             AsyncGpuSampler, AsyncSerialSampler)

__all__ = ["AsyncSerialSampler", "AsyncCpuSampler", "AsyncGpuSampler", "AsyncAlternatingSampler"]
