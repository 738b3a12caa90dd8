"""The policy-gradient learners read host values at most twice per ``optimize_agent`` call.

On a GPU each read of a tensor's value on the host (``.item()``, ``float()``, ``bool()``,
``.cpu()``, ...) stalls the host until the device drains, so a learner that reads inside its
epoch loop leaves the GPU idle between kernels. :class:`HostSyncCounter` counts those reads on
the CPU, where the same code makes the same calls. Before this bound PPO made 483 per call on
the Atari preset (30 per gradient step: the loss and gradient norm for the finite check, four
diagnostics, and two ``.item()`` per parameter inside the multi-tensor Adam).
"""
from __future__ import annotations

import pytest
import torch

from rlfast.algos import A2C, PPO
from rlfast.utils.host_sync import HostSyncCounter

from tests.algos import _pg_batch

MAX_SYNCS = 2  # issue 37: "at most 2 host synchronisations per optimize_agent call"


def _count(algo, kind: str, T: int = 16, B: int = 4) -> HostSyncCounter:
    agent, samples = _pg_batch.setup(algo, kind, T=T, B=B)
    algo.optimize_agent(0, samples)  # the first call builds the optimizer state
    with HostSyncCounter() as syncs:
        info = algo.optimize_agent(1, samples)
    assert all(len(values) > 0 for values in info)
    return syncs


@pytest.mark.parametrize("kind", _pg_batch.KINDS)
@pytest.mark.parametrize("make_algo", [lambda: PPO(), lambda: PPO(minibatches=8, epochs=3),
                                       lambda: A2C(),
                                       lambda: A2C(OptimCls=torch.optim.RMSprop,
                                                   optim_kwargs=dict(alpha=0.99, eps=1e-5))],
                         ids=["ppo", "ppo-24-steps", "a2c", "a2c-rmsprop"])
def test_optimize_agent_reads_the_host_at_most_twice(make_algo, kind):
    syncs = _count(make_algo(), kind)
    assert syncs.count <= MAX_SYNCS, f"{syncs.count} host reads:\n{syncs.report()}"


def test_the_default_adam_is_fused_so_steps_are_refused_on_the_device():
    algo = PPO()
    _pg_batch.setup(algo, "categorical")
    assert all(group["fused"] for group in algo.optimizer.param_groups)
    assert algo.skips_on_device


def test_an_optimizer_without_a_device_skip_reads_the_host_once_per_step():
    """PPO with RMSprop (no fused kernel) must check each step on the host before it is
    taken: one read per gradient step (the first also carries the batch's explained
    variance, so the call needs no further read)."""
    algo = PPO(minibatches=4, epochs=2, OptimCls=torch.optim.RMSprop)
    syncs = _count(algo, "categorical")
    assert not algo.skips_on_device
    assert syncs.count == 4 * 2, syncs.report()


def test_the_counter_sees_what_the_old_learner_did():
    """The bound can fail: the per-step reads the learner used to make are counted."""
    algo = PPO(minibatches=4, epochs=2, optim_kwargs=dict(foreach=True))
    agent, samples = _pg_batch.setup(algo, "categorical", T=16, B=4)
    loss = agent.model.pi.model[0].weight.sum()
    with HostSyncCounter() as syncs:
        algo.optimizer.zero_grad()
        loss.backward()
        algo.optimizer.step()  # the multi-tensor Adam reads each step count: .item()
        float(loss.detach())
    assert syncs.count >= 2


@pytest.mark.parametrize("target_kl, epochs_run", [(1e-12, 1), (1e9, 4)])
def test_target_kl_stops_the_epochs_with_one_read_per_epoch(target_kl, epochs_run):
    """An epoch whose mean approximate KL passes ``target_kl`` is the iteration's last; the
    check reads one value after each epoch but the last."""
    algo = PPO(minibatches=4, epochs=4, target_kl=target_kl)
    agent, samples = _pg_batch.setup(algo, "categorical", T=16, B=4)
    with HostSyncCounter() as syncs:
        info = algo.optimize_agent(0, samples)
    assert len(info.loss) == 4 * epochs_run
    checks = min(epochs_run, 4 - 1)
    assert syncs.count == checks + 1, syncs.report()


@pytest.mark.parametrize("bad", [0, -0.1, "0.02", True])
def test_target_kl_must_be_positive(bad):
    with pytest.raises(ValueError, match="target_kl must be a positive number or None"):
        PPO(target_kl=bad)
