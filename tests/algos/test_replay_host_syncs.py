"""The replay learners (DQN, C51, R2D1, SAC) read host values at most once per gradient step.

On a GPU each read of a tensor's value on the host (``.item()``, ``float()``, ``.cpu()``, ...)
stalls the host until the device has drained its queue. Before issue 38 ``optimize_agent`` made
12 such reads per gradient step for DQN, 14 for C51, 24 for R2D1 and 1.5 for SAC (14, 16, 26
and 3.5 with prioritized replay), counted as these tests count, on the same small learners:
the loss and gradient norm for the finite check, the priorities, the diagnostics, and the
multi-tensor Adam's step counts.

Now a call reads once in all when the optimizer refuses non-finite steps on the device (fused
Adam) and the priorities stay on the device (a device replay), and once per step when a host
replay needs the new priorities on the host (that read brings the step's diagnostics too).
The sampler's batch is host memory: appending it to a host replay reads nothing from a device,
so the host-replay counts cover the updates (``optimize_agent(itr, samples=None)``, as the
asynchronous runner calls it); with a device replay the append is counted too.
"""
from __future__ import annotations

import pytest
import torch

from rlfast.utils.host_sync import HostSyncCounter

from tests.algos import _replay_setups

MAX_PER_STEP = 1  # issue 38: "at most 1 host read or transfer per gradient step"


def _count(kind: str, itrs: int = 3, include_append: bool = False, **algo_kwargs):
    """Host reads and gradient steps of ``itrs`` learning iterations."""
    algo, sample = _replay_setups.setup(kind, **algo_kwargs)
    for itr in range(3):  # fill the replay, take the first steps (optimizer state exists)
        algo.optimize_agent(itr, sample(itr))
    steps_before, reads = algo.update_counter, 0
    for itr in range(3, 3 + itrs):
        samples = sample(itr)
        if include_append:
            with HostSyncCounter() as syncs:
                algo.optimize_agent(itr, samples)
        else:
            algo.replay_buffer.append_samples(algo.samples_to_buffer(samples))
            with HostSyncCounter() as syncs:
                algo.optimize_agent(itr, None)
        reads += syncs.count
    return algo, reads, algo.update_counter - steps_before, syncs


@pytest.mark.parametrize("kind", _replay_setups.KINDS)
def test_host_replay_reads_once_per_call_without_priorities(kind):
    algo, reads, steps, syncs = _count(kind, prioritized_replay=False)
    assert algo.guarded_steps.skips_on_device
    assert steps >= 3
    assert reads == 3, f"{reads} reads in 3 calls of {steps} steps:\n{syncs.report()}"


@pytest.mark.parametrize("kind", _replay_setups.KINDS)
def test_host_prioritized_replay_reads_once_per_step(kind):
    algo, reads, steps, syncs = _count(kind, prioritized_replay=True)
    assert reads <= MAX_PER_STEP * steps, f"{reads} reads for {steps} steps:\n{syncs.report()}"
    assert reads == steps  # the priorities must come back: the bound is tight


def test_an_optimizer_without_a_device_skip_reads_once_per_step():
    """RMSprop has no fused kernel: each step is checked on the host before it is taken."""
    algo, reads, steps, syncs = _count("dqn", OptimCls=torch.optim.RMSprop)
    assert not algo.guarded_steps.skips_on_device
    assert reads == steps, syncs.report()


def test_the_counter_sees_the_reads_the_old_update_made():
    """The bound can fail: a per-step finite check on the host is counted."""
    algo, sample = _replay_setups.setup("dqn")
    for itr in range(3):
        algo.optimize_agent(itr, sample(itr))
    batch = algo.replay_buffer.sample_batch(algo.replay_batch_size)
    with HostSyncCounter() as syncs:
        loss, td = algo.loss(batch)
        algo.check_finite(3, {"loss": loss.detach(), "tdAbsErr": td.mean()})
        td.cpu().numpy()
    assert syncs.count >= 3


@pytest.mark.parametrize("prioritized", [False, True], ids=["uniform", "prioritized"])
@pytest.mark.parametrize("kind", _replay_setups.KINDS)
def test_device_replay_reads_once_per_call_append_included(kind, prioritized):
    """The GPU path: replay on the learner's device (here the CPU), priorities updated there,
    the batch appended with host-to-device copies (not reads): one read per call."""
    algo, reads, steps, syncs = _count(kind, include_append=True, replay_device="device",
                                       prioritized_replay=prioritized)
    assert algo.replay_choice == "device" and algo.device_priorities
    assert type(algo.replay_buffer).__name__.startswith("Device")
    assert steps >= 3
    assert reads == 3, f"{reads} reads in 3 calls of {steps} steps:\n{syncs.report()}"


@pytest.mark.parametrize("kind", ["dqn", "sac"])
def test_prefetched_replay_reads_once_per_call_on_the_learners_thread(kind):
    """Host replay behind the prefetcher: its thread samples, gathers and applies priorities
    (reading them there); the learner's thread reads once per call."""
    algo, reads, steps, syncs = _count(kind, replay_device="prefetch", prioritized_replay=True)
    try:
        assert algo.replay_choice == "prefetch" and algo.device_priorities
        assert reads == 3, f"{reads} reads in 3 calls of {steps} steps:\n{syncs.report()}"
    finally:
        algo.replay_buffer.close()
