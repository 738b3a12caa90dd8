"""The master's hardware rules (``MasterAffinity``), without a run: the thread counts it takes
from the affinity and the model, the cores it pins, and what it gives back. The runs that
read the counts where the work happens are in test_threads_follow_work.py."""
from __future__ import annotations

import types

import psutil
import pytest
import torch

from rlfast.runners import master_affinity
from rlfast.runners.master_affinity import MasterAffinity, model_modules, set_cuda_device
from rlfast.utils.misc import available_cpus

# A caller's thread count that none of the rules chooses by itself (1, 2 or every core).
CALLER_THREADS = len(available_cpus()) + 3


@pytest.fixture
def caller_threads():
    previous = torch.get_num_threads()
    torch.set_num_threads(CALLER_THREADS)
    yield CALLER_THREADS
    torch.set_num_threads(previous)


class _FakeAlgo:
    """Only ``optimize_agent``, recording the thread count it runs with."""

    def __init__(self):
        self.threads = []

    def optimize_agent(self, itr, samples=None, sampler_itr=None):
        self.threads.append(torch.get_num_threads())


def _pinned(affinity, algo, optimizer_only=False, agent=None):
    """Pin as a runner does, run one ``optimize_agent`` of ``algo`` under the optimizing
    count, and return the sampling count seen before it."""
    master = MasterAffinity(affinity)
    master.pin(optimizer_only=optimizer_only)
    try:
        if agent is not None:
            master.choose_optimize_threads(agent)
        sample = torch.get_num_threads()
        with master.optimizing():
            algo.optimize_agent(0, None)
        assert torch.get_num_threads() == sample  # the sampling count is back
        return sample
    finally:
        master.restore()


def _agent(*modules):
    return types.SimpleNamespace(model=torch.nn.Sequential(*modules), name="not a module")


MLP = (torch.nn.Linear(4, 8), torch.nn.ReLU())
CONV = (torch.nn.Conv2d(1, 2, 3), torch.nn.Flatten())


@pytest.mark.parametrize("affinity, modules, sample, optimize", [
    ({}, MLP, 1, 1),  # an MLP optimizes on the sampling count
    ({}, CONV, 1, len(available_cpus())),  # a convolutional model on every core
    (dict(sample_torch_threads=2), MLP, 2, 2),
    (dict(master_torch_threads=3), CONV, 1, 3),  # given: kept
    (dict(master_torch_threads=0), MLP, 1, len(available_cpus())),  # 0: every core
], ids=["mlp", "conv", "mlp_sample_2", "conv_given_3", "mlp_all_cores"])
def test_cpu_counts_follow_the_affinity_and_the_model(affinity, modules, sample, optimize,
                                                      caller_threads):
    algo = _FakeAlgo()
    assert _pinned(affinity, algo, agent=_agent(*modules)) == sample
    assert algo.threads == [optimize]
    assert torch.get_num_threads() == caller_threads


@pytest.mark.parametrize("affinity, threads", [
    ({}, 1),  # AsyncRl's optimizer on the CPU: one thread by default
    (dict(master_torch_threads=2), 2),
])
def test_optimizer_only_keeps_master_threads_all_along(affinity, threads, caller_threads):
    """``pin(optimizer_only=True)`` (AsyncRl's optimizer process): the master's thread count
    is ``master_torch_threads`` (1 by default) for sampling-free optimizing, from the start;
    the caller's count comes back on restore."""
    algo = _FakeAlgo()
    assert _pinned(affinity, algo, optimizer_only=True) == threads
    assert algo.threads == [threads]
    assert torch.get_num_threads() == caller_threads


@pytest.mark.parametrize("affinity, sample, optimize", [
    (dict(cuda_idx=0), CALLER_THREADS, CALLER_THREADS),  # left as they are
    (dict(cuda_idx=0, master_torch_threads=2), CALLER_THREADS, 2),
    (dict(cuda_idx=0, sample_torch_threads=1), 1, 1),
])
def test_on_cuda_threads_are_left_alone_unless_given(affinity, sample, optimize,
                                                     caller_threads, monkeypatch):
    """With the agent on a GPU (``cuda_idx`` set) the master's threads stay the caller's
    unless the affinity gives them. No GPU is needed: only the thread settings are taken
    (the GPU check of ``validate_affinity`` is skipped)."""
    monkeypatch.setattr(master_affinity, "validate_affinity", lambda affinity: None)
    algo = _FakeAlgo()
    assert _pinned(affinity, algo) == sample
    assert algo.threads == [optimize]
    assert torch.get_num_threads() == caller_threads


def test_hold_optimizing_makes_one_count_for_everything(caller_threads):
    """The overlapped loop: once held, sampling runs on the optimizing count too."""
    master = MasterAffinity(dict(master_torch_threads=2))
    master.pin()
    try:
        assert torch.get_num_threads() == 1
        master.hold_optimizing()
        assert torch.get_num_threads() == 2 == master.sample_threads
        with master.optimizing():
            assert torch.get_num_threads() == 2
        assert torch.get_num_threads() == 2
    finally:
        master.restore()
    assert torch.get_num_threads() == caller_threads


@pytest.mark.skipif(not hasattr(psutil.Process(), "cpu_affinity"), reason="no cpu affinity")
def test_master_cpus_pin_until_restore_and_restore_is_idempotent(caller_threads):
    before = psutil.Process().cpu_affinity()
    core = available_cpus()[0]
    master = MasterAffinity(dict(master_cpus=[core]))
    master.pin()
    assert psutil.Process().cpu_affinity() == [core]
    master.restore()
    assert psutil.Process().cpu_affinity() == before
    assert torch.get_num_threads() == caller_threads
    torch.set_num_threads(2)
    master.restore()  # a second restore gives back nothing again
    assert torch.get_num_threads() == 2
    assert psutil.Process().cpu_affinity() == before


def test_set_affinity_false_pins_nothing(monkeypatch, caller_threads):
    pinned = []
    monkeypatch.setattr(psutil.Process, "cpu_affinity",
                        lambda self, cpus=None: pinned.append(cpus) or [0])
    master = MasterAffinity(dict(master_cpus=[available_cpus()[0]], set_affinity=False))
    master.pin()
    master.restore()
    assert pinned == []


def test_invalid_affinity_is_refused_before_anything_changes(caller_threads):
    master = MasterAffinity(dict(master_cpus=[max(available_cpus()) + 1000]))
    with pytest.raises(ValueError, match="does not exist"):
        master.pin()
    assert torch.get_num_threads() == caller_threads


def test_cuda_device_only_for_a_gpu(monkeypatch):
    chosen = []
    monkeypatch.setattr(torch.cuda, "set_device", chosen.append)
    set_cuda_device(None)
    set_cuda_device(1)
    assert chosen == [1]


def test_model_modules_finds_every_module_the_agent_holds():
    agent = types.SimpleNamespace(model=torch.nn.Sequential(torch.nn.Linear(2, 2)),
                                  target=torch.nn.Conv2d(1, 1, 1), other=3)
    kinds = {type(m) for m in model_modules(agent)}
    assert kinds == {torch.nn.Sequential, torch.nn.Linear, torch.nn.Conv2d}


def _subnormal_product() -> float:
    """Half the smallest normal float32, computed by torch on this thread: 0.0 when it
    flushes subnormals, about 5.9e-39 when it does not (an independent check of
    ``flushes_denormals``)."""
    tiny = torch.tensor([torch.finfo(torch.float32).tiny])
    return float((tiny / 2)[0])


@pytest.mark.parametrize("caller_flushes", [False, True])
def test_master_flushes_subnormals_on_the_cpu_until_restore(caller_flushes):
    """On the CPU the master computes with subnormals flushed to zero and gives the caller
    its own setting back, whichever it was."""
    if not torch.set_flush_denormal(caller_flushes) and caller_flushes:
        pytest.skip("this CPU cannot flush subnormals")
    try:
        assert master_affinity.flushes_denormals() is caller_flushes
        assert (_subnormal_product() == 0.0) is caller_flushes
        master = MasterAffinity(dict(master_torch_threads=1))
        master.pin()
        assert master_affinity.flushes_denormals() is True
        assert _subnormal_product() == 0.0
        master.restore()
        assert master_affinity.flushes_denormals() is caller_flushes
        master.restore()  # idempotent
        assert master_affinity.flushes_denormals() is caller_flushes
    finally:
        torch.set_flush_denormal(False)


def test_master_on_a_gpu_leaves_subnormals_alone(monkeypatch):
    monkeypatch.setattr(master_affinity, "validate_affinity", lambda affinity: None)
    torch.set_flush_denormal(False)
    master = MasterAffinity(dict(cuda_idx=0))
    master.pin()
    try:
        assert master_affinity.flushes_denormals() is False
    finally:
        master.restore()
    assert master_affinity.flushes_denormals() is False


def test_flushing_changes_an_adam_step_only_below_the_normal_range():
    """Adam on weights whose gradients are subnormal-sized: with flushing the moments and the
    step are those of float64 arithmetic wherever they are normal floats, and zero where
    float64 says they are below float32's normal range."""
    grads = torch.tensor([1e-3, 1e-19, 1e-21, 0.0])  # squares: normal, subnormal, 0, 0
    weights = torch.ones(4)

    def step(flush: bool):
        torch.set_flush_denormal(flush)
        try:
            p = torch.nn.Parameter(weights.clone())
            p.grad = grads.clone()
            opt = torch.optim.Adam([p], lr=0.1, eps=1e-8, fused=True)
            opt.step()
            return p.detach().clone(), opt.state[p]["exp_avg_sq"].clone()
        finally:
            torch.set_flush_denormal(False)

    if not torch.set_flush_denormal(True):
        pytest.skip("this CPU cannot flush subnormals")
    plain_p, plain_v = step(False)
    flushed_p, flushed_v = step(True)
    v64 = 0.001 * grads.double() ** 2  # (1 - beta2) g^2
    normal = v64 >= torch.finfo(torch.float32).tiny
    assert torch.allclose(flushed_v[normal].double(), v64[normal], rtol=1e-6)
    assert (flushed_v[~normal] == 0).all()
    assert (plain_v[1] > 0) and (plain_v[1] < torch.finfo(torch.float32).tiny)  # kept subnormal
    assert torch.allclose(flushed_p, plain_p, atol=1e-6)  # the weights step alike
