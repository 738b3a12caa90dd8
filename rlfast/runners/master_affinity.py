"""The master process's hardware rules: its cores, its torch threads and its GPU.

Threads follow the work. On the CPU the master runs ``sample_torch_threads`` torch threads
(default 1) while the sampler collects a batch (its workers need the cores) and
``master_torch_threads`` while the algorithm optimizes (0: every core of ``master_cpus``, or
of the machine when none are given). By default a convolutional model optimizes on every
core, because the synchronous samplers' workers are idle then, and other models on the
sampling count (see :meth:`MasterAffinity.choose_optimize_threads` for the measurements).
With the agent on a GPU the master's threads are left as they are unless given. A process
that only optimizes while samplers run elsewhere (the asynchronous runner's optimizer) keeps
``master_torch_threads`` (default 1 on the CPU) all along.

Every runner pins its master with :class:`MasterAffinity` at start-up and restores the
caller's cores and thread count on every exit path: a run started in-process (a notebook, a
sweep script, a test) must not leave its caller pinned to the run's cores or thread count.

On the CPU the master also flushes subnormal floats to zero (``torch.set_flush_denormal``,
x86's FTZ and DAZ; the caller's setting comes back on restore). Arithmetic on subnormals is
microcoded and 10-100x slower, and training makes them: Adam's moment estimates of weights
whose gradients are tiny or zero decay through the subnormal range. Measured on the MinAtar
Rainbow preset (Intel Xeon, one thread): its fused Adam step took 2.57 ms instead of 0.35 ms
and the whole update 7.0 ms instead of 5.5 ms. Values below 1.2e-38 change nothing a network
computes. The setting is per thread: the learner's thread has it, torch's helper threads (an
optimizer on several threads) keep theirs.
"""
from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
import torch

from rlfast.utils.affinity import validate_affinity
from rlfast.utils.misc import available_cpus

__all__ = ["MasterAffinity", "flushes_denormals", "model_modules", "set_cuda_device"]


def flushes_denormals() -> bool:
    """Whether this thread's float arithmetic flushes subnormal results to zero (half the
    smallest normal float32 comes out as 0)."""
    tiny = torch.full((1,), torch.finfo(torch.float32).tiny)
    return bool((tiny * 0.5)[0] == 0)


class MasterAffinity:
    """Pins the master to ``affinity["master_cpus"]`` and sets its torch threads for sampling
    and for optimizing (see the module docstring); :meth:`restore` gives the caller's back.

    ``affinity`` may hold ``master_cpus``, ``master_torch_threads``, ``sample_torch_threads``,
    ``cuda_idx`` and ``set_affinity`` (False: no pinning).
    """

    def __init__(self, affinity: Mapping[str, Any]):
        self.affinity = affinity
        self.sample_threads: int | None = None
        self.optimize_threads: int | None = None
        self._all_master_cores = 0
        self._previous_threads: int | None = None
        self._previous_cpus: list | None = None
        self._previous_flush: bool | None = None

    def pin(self, optimizer_only: bool = False) -> None:
        """Validate the affinity, pin the master to ``master_cpus`` and take the sampling
        thread count now; the optimizing count too, unless it depends on the model (the
        CPU default, settled by :meth:`choose_optimize_threads`). ``optimizer_only``: a
        process that only optimizes (one count, ``master_torch_threads`` or 1 on the CPU)."""
        affinity = self.affinity
        validate_affinity(affinity)
        self._previous_threads = torch.get_num_threads()
        self._previous_cpus = None
        cpus = affinity.get("master_cpus")
        if cpus and affinity.get("set_affinity", True):
            proc = psutil.Process()
            if hasattr(proc, "cpu_affinity"):
                previous = proc.cpu_affinity()
                proc.cpu_affinity(list(cpus))  # validated above: these cores exist
                self._previous_cpus = previous
        on_cpu = affinity.get("cuda_idx") is None
        if on_cpu and self._previous_flush is None:
            previous = flushes_denormals()
            if torch.set_flush_denormal(True):  # False where the CPU cannot
                self._previous_flush = previous
        sample = affinity.get("sample_torch_threads")
        if sample is None and on_cpu:
            sample = 1
        optimize = affinity.get("master_torch_threads")
        self._all_master_cores = len(cpus) if cpus else len(available_cpus())
        if optimizer_only:
            sample = optimize = optimize or (1 if on_cpu else None)
        elif optimize == 0:
            optimize = self._all_master_cores
        self.sample_threads = int(sample) if sample else torch.get_num_threads()
        # None on the CPU: decided once the model is built (choose_optimize_threads).
        self.optimize_threads = (int(optimize) if optimize
                                 else None if on_cpu else self.sample_threads)
        if self.sample_threads != torch.get_num_threads():
            torch.set_num_threads(self.sample_threads)

    def choose_optimize_threads(self, agent: Any) -> None:
        """The default optimizing thread count on the CPU (no ``master_torch_threads``):
        every core of the master's for a convolutional model, else the sampling count.

        Measured on 2 cores: a Nature CNN minibatch trains in 0.71x the one-thread time on
        two threads, and keeps most of that gain on a loaded machine (its operations are
        milliseconds long). MLPs of 64-400 units gain less on an idle machine (0.6x-0.9x)
        and lose badly on a loaded one: their operations take microseconds, and each waits
        at a barrier for a helper thread the OS may not schedule for a whole time slice (a
        PPO CartPole run took 30-50x longer with two threads while other jobs held the
        cores). Under overlap too: sampling is a small share of the work next to a
        convolutional learner (PPO on Pong on 2 cores: the overlapped learner on one thread
        kept 1.2 cores busy and ran at 0.67x the synchronous speed)."""
        if self.optimize_threads is not None:
            return
        convolutional = any(isinstance(m, torch.nn.modules.conv._ConvNd)
                            for m in model_modules(agent))
        self.optimize_threads = (self._all_master_cores if convolutional
                                 else self.sample_threads)

    @contextlib.contextmanager
    def optimizing(self) -> Iterator[None]:
        """The optimizing thread count for the block; the sampling count after it."""
        if self.optimize_threads == self.sample_threads:
            yield
            return
        torch.set_num_threads(self.optimize_threads)
        try:
            yield
        finally:
            torch.set_num_threads(self.sample_threads)

    def hold_optimizing(self) -> None:
        """One count, the optimizing one, from now on for sampling too (the overlapped
        loop: torch's count is one setting for the whole process, so the learner's holds
        while batches are collected in the background)."""
        self.sample_threads = self.optimize_threads
        torch.set_num_threads(self.optimize_threads)

    def restore(self) -> None:
        """Give the caller back its cores and thread count (idempotent)."""
        if self._previous_cpus:
            try:
                psutil.Process().cpu_affinity(self._previous_cpus)
            except (OSError, ValueError):
                pass  # e.g. the container's cpu set shrank meanwhile: keep the run's cores
            self._previous_cpus = None
        if self._previous_threads:
            torch.set_num_threads(self._previous_threads)
            self._previous_threads = None
        if self._previous_flush is not None:
            torch.set_flush_denormal(self._previous_flush)
            self._previous_flush = None


def set_cuda_device(cuda_idx: int | None) -> None:
    """Make GPU ``cuda_idx`` the process's current device (NCCL's collectives and object
    collectives use it); nothing for the CPU (None)."""
    if cuda_idx is not None:
        torch.cuda.set_device(cuda_idx)


def model_modules(agent: Any) -> list:
    """Every submodule of the agent's models (its ``model`` and any other module it holds)."""
    found = []
    for value in vars(agent).values():
        if isinstance(value, torch.nn.Module):
            found.extend(value.modules())
    return found
