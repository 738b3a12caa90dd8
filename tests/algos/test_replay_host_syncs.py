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

A prioritized device replay whose valid priorities are all 0 (issue 54) cannot tell at the
draw without a read: its flag rides with the call's one read, which raises
``ZeroPriorityError``; the count stays the same.
"""
from __future__ import annotations

import pytest
import torch

from rlfast.replays.draw_alarm import ZeroPriorityError
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


def _zeroed_device_learner(kind: str, **algo_kwargs):
    """A learner on a prioritized device replay whose every priority was just set to 0 (a
    batch appended, ready for ``optimize_agent(3, None)``)."""
    algo, sample = _replay_setups.setup(kind, replay_device="device", prioritized_replay=True,
                                        **algo_kwargs)
    for itr in range(3):
        algo.optimize_agent(itr, sample(itr))
    algo.replay_buffer.append_samples(algo.samples_to_buffer(sample(3)))
    tree = algo.replay_buffer.priority_tree
    n_leaves = tree.T * tree.B
    tree.update_priorities(torch.arange(n_leaves), torch.zeros(n_leaves))
    assert float(tree.total) == 0.0 and tree.n_valid_rows() > 0
    return algo, sample, tree


def _raised_in(info, function: str) -> bool:
    return any(entry.name == function and entry.path.name == "guarded_steps.py"
               for entry in info.traceback)


@pytest.mark.parametrize("kind", _replay_setups.KINDS)
def test_all_zero_device_priorities_raise_the_named_error_at_the_calls_one_read(kind):
    """The draws return (NaN weights, steps refused on the device); the call's one read, in
    ``GuardedSteps.end``, brings the flag and raises, naming the buffer. A call after the
    priorities are positive again reads once and passes (the flag is zeroed per call)."""
    algo, sample, tree = _zeroed_device_learner(kind)
    name = type(algo.replay_buffer).__name__
    with HostSyncCounter() as syncs:
        with pytest.raises(ZeroPriorityError, match=f"{name}: every valid priority is 0") as info:
            algo.optimize_agent(3, None)
    assert syncs.count == 1, syncs.report()  # the same one read as a sound call
    assert _raised_in(info, "end"), info.traceback
    n_leaves = tree.T * tree.B
    tree.update_priorities(torch.arange(n_leaves), torch.ones(n_leaves))
    with HostSyncCounter() as syncs:
        algo.optimize_agent(4, None)
    assert syncs.count == 1, syncs.report()


def test_all_zero_device_priorities_with_per_step_reads_raise_before_the_first_step():
    """RMSprop reads each step before taking it: the flag rides with the first step's read,
    which raises before the optimizer steps (the weights stay as they were)."""
    algo, sample, tree = _zeroed_device_learner("dqn", OptimCls=torch.optim.RMSprop)
    assert not algo.guarded_steps.skips_on_device
    before = [p.detach().clone() for p in algo.agent.parameters()]
    with HostSyncCounter() as syncs:
        with pytest.raises(ZeroPriorityError, match="every valid priority is 0") as info:
            algo.optimize_agent(3, None)
    assert syncs.count == 1, syncs.report()
    assert _raised_in(info, "step"), info.traceback
    assert all(torch.equal(a, b) for a, b in zip(before, algo.agent.parameters()))


def test_device_prioritized_replay_with_per_step_reads_reads_once_per_step():
    """The flag joins each step's read: no read is added."""
    algo, reads, steps, syncs = _count("dqn", include_append=True, replay_device="device",
                                       prioritized_replay=True, OptimCls=torch.optim.RMSprop)
    assert not algo.guarded_steps.skips_on_device and algo.device_priorities
    assert reads == steps, syncs.report()
