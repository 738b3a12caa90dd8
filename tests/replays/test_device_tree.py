"""DeviceSumTree / DevicePrioritizedSampling against their numpy twins, on the CPU device.

Both trees are driven by one random sequence of advance / sample (same uniform draws) /
update, and must hold bit-identical nodes; the device calls must read nothing on the host,
counted with HostSyncCounter.
"""
from collections import namedtuple

import numpy as np
import pytest
import torch

from rlfast.replays.device_tree import DevicePrioritizedSampling, DeviceSumTree
from rlfast.replays.draw_alarm import (ALL_ZERO, DRAW_OK, TOO_FEW_POSITIVE, PriorityAlarm,
                                       ZeroPriorityError)
from rlfast.replays.ring import valid_rows
from rlfast.replays.sampling import PrioritizedSampling
from rlfast.replays.storage import ReplayStorage
from rlfast.replays.sum_tree import SumTree
from rlfast.utils.host_sync import HostSyncCounter

Samples = namedtuple("Samples", ["observation", "action", "reward", "done"])


def assert_same_tree(ref: SumTree, dev: DeviceSumTree) -> None:
    assert torch.equal(dev.tree, torch.from_numpy(ref.tree))
    assert torch.equal(dev._kept, torch.from_numpy(ref._kept))
    assert torch.equal(dev.total, torch.tensor(ref.total, dtype=torch.float64))
    assert torch.equal(dev.leaves, torch.from_numpy(np.array(ref.leaves)))
    assert (dev.t, dev.full, dev.n_valid_rows()) == (ref.t, ref.full, ref.n_valid_rows())
    ok = valid_rows(np.arange(ref.T), ref.t, ref.full, ref.T, ref.off_backward, ref.off_forward)
    assert torch.equal(dev._row_valid, torch.from_numpy(ok))


def as_input(values: np.ndarray, rng: np.random.RandomState):
    """The same values as a numpy array or a tensor, at random (both paths are tested)."""
    return torch.from_numpy(values.copy()) if rng.rand() < 0.5 else values.copy()


TREE_CASES = [  # T, B, off_backward, off_forward, input priorities, shift
    (8, 1, 0, 0, False, 0),
    (7, 3, 1, 1, False, 0),
    (13, 3, 3, 2, True, 2),
    (5, 2, 0, 1, True, 0),
    (10, 4, 2, 3, True, 4),
    (1, 1, 0, 0, True, 0),
]


@pytest.mark.parametrize("T,B,off_backward,off_forward,inputs,shift", TREE_CASES)
def test_device_tree_matches_sum_tree(T, B, off_backward, off_forward, inputs, shift):
    rng = np.random.RandomState(T * 100 + B * 10 + shift)
    kwargs = dict(default_value=0.75, enable_input_priorities=inputs,
                  input_priority_shift=shift)
    ref = SumTree(T, B, off_backward, off_forward, **kwargs)
    dev = DeviceSumTree(T, B, off_backward, off_forward, device="cpu", **kwargs)
    assert_same_tree(ref, dev)
    n_samples = n_updates = 0
    sampled = False
    for _ in range(150):  # many wraps of the cursor
        op = rng.randint(3)
        if op == 0:
            T_in = int(rng.randint(0, min(T, 5) + 1))
            p = None
            if inputs and rng.rand() < 0.6:
                shape = [(T_in, B), (B,), ()][rng.randint(3)]
                p = rng.rand(*shape) * 3
            ref.advance(T_in, priorities=p)
            dev.advance(T_in, priorities=None if p is None else as_input(np.asarray(p), rng))
        elif op == 1 and ref.total > 0:
            n = int(rng.randint(1, 10))
            u = rng.rand(n)
            ref_out = ref.sample(n, uniforms=u)
            dev_out = dev.sample(n, uniforms=as_input(u, rng))
            for r, d in zip(ref_out, dev_out):
                assert torch.equal(d, torch.from_numpy(r))
            assert dev_out[2].dtype == torch.float64 and dev_out[0].dtype == torch.int64
            assert torch.all(dev_out[2] > 0)
            sampled = True
            n_samples += 1
        elif op == 2 and sampled:
            n = ref._last_leaves.size
            p = rng.rand(n) * 4
            p[rng.rand(n) < 0.1] = 0.0
            ref.update_batch_priorities(p)
            dev.update_batch_priorities(as_input(p, rng))
            n_updates += 1
        assert_same_tree(ref, dev)
    if ref.n_valid_rows():
        assert n_samples > 10 and n_updates > 10


def test_duplicate_leaves_take_last_value_and_stale_rows_stay_zero():
    dev = DeviceSumTree(6, 2, 1, 1, default_value=1.0)
    ref = SumTree(6, 2, 1, 1, default_value=1.0)
    for tree in (ref, dev):
        tree.advance(5)
    u = np.array([0.01, 0.02, 0.5, 0.03, 0.99])  # the first, second and fourth: leaf 0
    ref_out = ref.sample(5, uniforms=u)
    dev_out = dev.sample(5, uniforms=u)
    assert dev_out[0].tolist() == [0, 0, 2, 0, 3] == ref_out[0].tolist()
    new = np.array([2.0, 3.0, 5.0, 7.0, 11.0])
    ref.update_batch_priorities(new)
    dev.update_batch_priorities(torch.from_numpy(new))
    assert_same_tree(ref, dev)
    assert dev.leaves[0, 0] == 7.0  # the last of the three values for leaf 0
    # The cursor moves so that row 0 is in the forward window: its leaves stay zero.
    for tree in (ref, dev):
        tree.advance(1)
    assert dev.leaves[0].tolist() == [0.0, 0.0]
    ref.update_batch_priorities(new * 2)
    dev.update_batch_priorities(torch.from_numpy(new * 2))
    assert_same_tree(ref, dev)
    assert dev.leaves[0].tolist() == [0.0, 0.0] and dev.leaves[2, 0] == 10.0


def test_bad_tensor_priorities_leave_leaves_unchanged():
    dev = DeviceSumTree(4, 2, 0, 0, default_value=1.0, enable_input_priorities=True)
    dev.advance(4, priorities=torch.tensor([[2.0, -1.0], [float("nan"), 3.0],
                                            [float("inf"), 4.0], [5.0, 6.0]]))
    assert dev.leaves.tolist() == [[2.0, 1.0], [1.0, 3.0], [1.0, 4.0], [5.0, 6.0]]
    dev.sample(4, uniforms=torch.tensor([0.0, 0.3, 0.6, 0.99]))
    leaves = dev._last_leaves.clone()
    before = dev.leaves.clone()
    dev.update_batch_priorities(torch.tensor([float("nan"), -2.0, float("-inf"), 9.0]))
    expected = before.reshape(-1).clone()
    expected[leaves[3]] = 9.0
    assert torch.equal(dev.leaves.reshape(-1), expected)
    assert dev.total == expected.sum()
    # A bad value after a good one for the same leaf: the good one is kept.
    dev.update_priorities(torch.tensor([1, 1]), torch.tensor([8.0, -1.0]))
    assert dev.leaves[0, 1] == 8.0 and dev._kept[0, 1] == 8.0
    # Host arrays are checked on the host and rejected, as in SumTree.
    with pytest.raises(ValueError, match=">= 0"):
        dev.update_batch_priorities(np.array([1.0, -1.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=">= 0"):
        dev.advance(1, priorities=np.array([np.nan, 1.0]))


def test_input_checks():
    with pytest.raises(ValueError, match="off_backward \\+ off_forward"):
        DeviceSumTree(4, 1, off_backward=3, off_forward=1)
    with pytest.raises(ValueError, match="input_priority_shift"):
        DeviceSumTree(4, 1, 0, 0, input_priority_shift=4)
    with pytest.raises(RuntimeError, match="no-such-device"):
        DeviceSumTree(4, 1, 0, 0, device="no-such-device")
    tree = DeviceSumTree(4, 2, 1, 1)
    with pytest.raises(RuntimeError, match="no valid rows"):
        tree.sample(1)
    with pytest.raises(RuntimeError, match="before any sample"):
        tree.update_batch_priorities(torch.ones(1))
    with pytest.raises(ValueError, match="enable_input_priorities=False"):
        tree.advance(1, priorities=torch.ones(2))
    with pytest.raises(ValueError, match="more rows"):
        tree.advance(5)
    tree.advance(1)
    with pytest.raises(RuntimeError, match="no valid rows"):  # the row waits off_backward
        tree.sample(1)
    tree2 = DeviceSumTree(4, 2, 0, 0, enable_input_priorities=True)
    with pytest.raises(ValueError, match="broadcast"):
        tree2.advance(2, priorities=torch.ones(3, 2))
    with pytest.raises(ValueError, match="broadcast"):
        tree2.advance(2, priorities=np.ones((2, 3)))
    tree2.advance(4)
    with pytest.raises(ValueError, match="shape \\[n\\]=\\[3\\]"):
        tree2.sample(3, uniforms=torch.rand(4))
    with pytest.raises(ValueError, match="\\[0, 1\\)"):
        tree2.sample(2, uniforms=np.array([0.5, 1.0]))
    with pytest.raises(ValueError, match="unique=False"):
        tree2.sample(2, unique=True, uniforms=torch.rand(2))
    tree2.sample(3)
    with pytest.raises(ValueError, match="expected 3 priorities"):
        tree2.update_batch_priorities(torch.ones(4))
    with pytest.raises(ValueError, match="leaves must lie in \\[0, T \\* B\\) = \\[0, 8\\)"):
        tree2.update_priorities(np.array([0, 8]), np.ones(2))
    with pytest.raises(TypeError, match="leaves must be integers"):
        tree2.update_priorities(torch.tensor([0.0, 1.0]), torch.ones(2))
    # SumTree rejects misused uniforms too.
    ref = SumTree(4, 2, 0, 0)
    ref.advance(4)
    with pytest.raises(ValueError, match="shape"):
        ref.sample(2, uniforms=np.zeros(3))
    with pytest.raises(ValueError, match="unique=False"):
        ref.sample(2, unique=True, uniforms=np.zeros(2))


def test_no_host_reads_in_advance_sample_update():
    dev = DeviceSumTree(16, 4, 2, 1, enable_input_priorities=True, input_priority_shift=1)
    dev.advance(6)
    p_in = torch.rand(3, 4)
    new = torch.rand(32)
    leaves = torch.tensor([0, 5, 5, 63])
    with HostSyncCounter() as syncs:
        for _ in range(3):
            dev.advance(3, priorities=p_in)
            dev.advance(2)
            T_idxs, B_idxs, pri = dev.sample(32)
            dev.update_batch_priorities(new)
            dev.update_priorities(leaves, new[:4])
            dev.sample(32, uniforms=torch.rand(32))
            dev.sample(4, unique=True)  # an exponential race: no rounds of reads
            dev.update_batch_priorities(new[:4])
            _ = dev.total, dev.leaves, dev.n_valid_rows(), dev.draw_fault
    assert syncs.count == 0, syncs.report()
    # The counter sees reads: .item() is one.
    with HostSyncCounter() as syncs:
        dev.total.item()
    assert syncs.count == 1


def test_unique_sampling_has_no_duplicates_and_leaves_tree_alone():
    dev = DeviceSumTree(5, 4, 0, 0, enable_input_priorities=True)
    p = np.random.RandomState(2).rand(5, 4)
    p[0] = 0
    dev.advance(5, priorities=p)
    before = dev.tree.clone()
    T_idxs, B_idxs, pri = dev.sample(16, unique=True)
    assert len(set((T_idxs * 4 + B_idxs).tolist())) == 16
    assert torch.all(pri > 0) and torch.all(T_idxs > 0)
    assert torch.equal(pri, torch.from_numpy(p[T_idxs.numpy(), B_idxs.numpy()]))
    assert torch.equal(dev.tree, before) and int(dev.draw_fault) == DRAW_OK
    # More than the valid leaves: the cursor tells on the host, so it raises at once.
    with pytest.raises(RuntimeError, match="fewer than n=21 leaves are valid"):
        dev.sample(21, unique=True)
    # 17 of 20 valid leaves, 16 of them positive: only the device knows; the flag says so.
    with HostSyncCounter() as syncs:
        dev.sample(17, unique=True)
    assert syncs.count == 0
    assert int(dev.draw_fault) == TOO_FEW_POSITIVE and torch.equal(dev.tree, before)
    with pytest.raises(ZeroPriorityError, match="Buf: a unique=True draw of n=17 found fewer"):
        PriorityAlarm(dev, "Buf").check_now()


def successive_inclusion(p: np.ndarray) -> np.ndarray:
    """P(leaf i is among 2 successive proportional draws without replacement)."""
    total = p.sum()
    first = p / total
    second = np.array([sum(p[j] / total * p[i] / (total - p[j]) for j in range(len(p)) if j != i)
                       for i in range(len(p))])
    return first + second


def test_unique_draws_are_successive_proportional_draws_and_reproducible():
    p = np.array([[1.0, 2.0], [3.0, 0.0], [0.5, 4.0]])
    torch.manual_seed(5)  # the tree's generator is seeded from torch's
    tree = DeviceSumTree(3, 2, 0, 0, enable_input_priorities=True)
    tree.advance(3, priorities=p)
    n_draws = 2000

    def draw() -> torch.Tensor:
        T_idxs, B_idxs, _ = tree.sample(2, unique=True)
        return T_idxs * 2 + B_idxs

    draws = torch.stack([draw() for _ in range(n_draws)]).numpy()
    flat = p.reshape(-1)
    assert not (draws == 3).any() and (draws[:, 0] != draws[:, 1]).all()  # leaf 3 is 0
    # The first of each pair is one proportional draw; each leaf's inclusion in the pair is
    # that of two successive draws without replacement (5-sigma binomial bounds).
    for got, want in ((np.bincount(draws[:, 0], minlength=6) / n_draws, flat / flat.sum()),
                      (np.bincount(draws.reshape(-1), minlength=6) / n_draws,
                       successive_inclusion(flat))):
        sigma = np.sqrt(want * (1 - want) / n_draws)
        assert np.all(np.abs(got - want) <= 5 * sigma + 1e-12), (got, want)
    # The tree's generator makes them: the same state, the same draws.
    state = tree.state_dict()
    a = tree.sample(4, unique=True)
    tree.load_state_dict(state)
    b = tree.sample(4, unique=True)
    assert all(torch.equal(x, y) for x, y in zip(a, b))


def test_all_zero_tree_raises_the_named_error_at_the_read_not_at_the_draw():
    """Every valid leaf at 0: the draw cannot tell without a read, so it returns (NaN
    weights) and raises the tree's flag; the alarm's read raises ZeroPriorityError."""
    storage = make_storage(32, 2, 1)
    scheme = DevicePrioritizedSampling(storage, off_backward=1, alpha=0.6, beta=0.4,
                                       default_priority=0.0)
    storage.append(random_samples(np.random.RandomState(0), 10, 2))
    scheme.advance(10)
    tree = scheme.tree
    assert tree.n_valid_rows() > 0 and float(tree.total) == 0.0
    alarm = PriorityAlarm(tree, "DevicePrioritizedReplayBuffer")
    with HostSyncCounter() as syncs:  # neither draw reads nor raises
        T_idxs, B_idxs, weights = scheme.sample(8)
        scheme.tree.sample(3, unique=True)
    assert syncs.count == 0, syncs.report()
    assert not torch.isfinite(weights).any()  # what a learner would train on
    assert alarm.flag is tree.draw_fault and int(alarm.flag) == ALL_ZERO
    alarm.check(0.0)  # a clear read does not raise
    n_valid = tree.n_valid_rows() * 2
    with pytest.raises(ZeroPriorityError, match=rf"DevicePrioritizedReplayBuffer: every valid "
                       rf"priority is 0 .* {n_valid} valid leaves.*default_priority=0") as info:
        alarm.check_now()
    assert isinstance(info.value, RuntimeError)
    # The flag is sticky: a sound draw after positive priorities does not lower it ...
    tree.update_priorities(np.arange(20), np.full(20, 0.5))
    scheme.sample(8)
    assert int(tree.draw_fault) == ALL_ZERO
    # ... until zeroed (a learner's call does that when it begins, as a checkpoint load does).
    tree.draw_fault.zero_()
    scheme.sample(8)
    alarm.check_now()
    assert int(tree.draw_fault) == DRAW_OK


def test_generator_sampling_is_proportional_and_reproducible():
    p = np.random.RandomState(0).rand(6, 3) * 5
    p[1, 2] = 0.0

    def make():
        tree = DeviceSumTree(6, 3, 0, 0, enable_input_priorities=True)
        tree.advance(6, priorities=p)
        return tree

    torch.manual_seed(123)
    a = make()
    draws_a = [a.sample(50)[0] for _ in range(3)]
    torch.manual_seed(123)
    b = make()
    draws_b = [b.sample(50)[0] for _ in range(3)]
    assert all(torch.equal(x, y) for x, y in zip(draws_a, draws_b))
    torch.manual_seed(124)
    c = make()
    assert not torch.equal(c.sample(50)[0], draws_a[0])
    # Frequencies follow the priorities (chi-square bound), zero never drawn.
    counts = np.zeros((6, 3))
    n_draws = 60_000
    T_idxs, B_idxs, pri = a.sample(n_draws)
    np.add.at(counts, (T_idxs.numpy(), B_idxs.numpy()), 1)
    assert torch.equal(pri, torch.from_numpy(p[T_idxs.numpy(), B_idxs.numpy()]))
    assert counts[1, 2] == 0
    nz = p > 0
    expected = n_draws * p[nz] / p.sum()
    stat = float(np.sum((counts[nz] - expected) ** 2 / expected))
    df = nz.sum() - 1
    assert stat < df + 5 * np.sqrt(2 * df), (stat, df)


def test_state_dict_round_trip():
    tree = DeviceSumTree(7, 2, 1, 1, enable_input_priorities=True, input_priority_shift=1)
    tree.advance(5, priorities=torch.rand(5, 2) + 0.1)
    tree.sample(8)
    tree.update_batch_priorities(torch.rand(8))
    state = tree.state_dict()
    expected = tree.sample(20)
    tree.update_batch_priorities(torch.full((20,), 50.0))
    other = DeviceSumTree(7, 2, 1, 1, enable_input_priorities=True, input_priority_shift=1)
    other.generator.manual_seed(999)
    other.load_state_dict(state)
    assert (other.t, other.full) == (5, False)
    assert torch.equal(other._row_valid, torch.tensor([1, 1, 1, 1, 0, 0, 0], dtype=torch.bool))
    got = other.sample(20)
    assert all(torch.equal(x, y) for x, y in zip(got, expected))
    with pytest.raises(ValueError, match="shape"):
        DeviceSumTree(8, 2, 1, 1).load_state_dict(state)
    with pytest.raises(ValueError, match="lacks keys"):
        other.load_state_dict({"t": 0})


# ---------------------------------------------------------------- sampling schemes
def make_storage(size: int, B: int, n_step: int) -> ReplayStorage:
    example = Samples(np.zeros(2, np.float32), np.int64(0), np.float32(0), np.bool_(False))
    return ReplayStorage(example, size=size, B=B, discount=0.9, n_step_return=n_step)


def random_samples(rng: np.random.RandomState, T_in: int, B: int) -> Samples:
    return Samples(rng.rand(T_in, B, 2).astype(np.float32), rng.randint(0, 4, (T_in, B)),
                   rng.randn(T_in, B).astype(np.float32), rng.rand(T_in, B) < 0.1)


SCHEME_CASES = [  # size, B, n_step, stride, alpha, input priorities, shift, unique
    (24, 1, 1, 1, 1.0, False, 0, False),
    (30, 3, 3, 1, 1.0, True, 1, False),
    (40, 2, 2, 4, 1.0, True, 0, False),
    (30, 3, 2, 1, 0.6, True, 2, False),
    (30, 2, 1, 1, 0.6, False, 0, True),
]


@pytest.mark.parametrize("size,B,n_step,stride,alpha,inputs,shift,unique", SCHEME_CASES)
def test_device_sampling_matches_prioritized_sampling(size, B, n_step, stride, alpha, inputs,
                                                      shift, unique):
    rng = np.random.RandomState(size + B + stride)
    kwargs = dict(off_backward=n_step, stride=stride, alpha=alpha, beta=0.4,
                  default_priority=1.5, unique=unique, input_priorities=inputs,
                  input_priority_shift=shift)
    ref_storage, dev_storage = make_storage(size, B, n_step), make_storage(size, B, n_step)
    ref = PrioritizedSampling(ref_storage, **kwargs)
    dev = DevicePrioritizedSampling(dev_storage, device="cpu", **kwargs)
    exact = alpha == 1.0  # p ** alpha in numpy and torch may differ in the last bit

    def compare_trees():
        if exact:
            assert_same_tree(ref.tree, dev.tree)
        else:
            np.testing.assert_allclose(dev.tree.tree.numpy(), ref.tree.tree, rtol=1e-13)
            assert torch.equal(dev.tree._row_valid,
                               torch.from_numpy(ref.tree.leaves[:, 0] > 0))

    n_checked = 0
    for step in range(60):
        T_in = int(rng.randint(1, 6))
        samples = random_samples(rng, T_in, B)
        p = None
        if inputs and rng.rand() < 0.7:
            p = rng.rand(B) * 2 if stride > 1 else rng.rand(T_in, B) * 2
        for storage, scheme, given in ((ref_storage, ref, p),
                                       (dev_storage, dev, None if p is None
                                        else as_input(p, rng))):
            storage.append(samples)
            scheme.advance(T_in, given)
        compare_trees()
        if dev.tree.n_valid_rows() == 0:
            continue
        dev.set_beta(ref.beta)
        n = int(rng.randint(1, 8))
        if unique:
            if n > dev.tree.n_valid_rows() * B:
                continue
            T_idxs, B_idxs, w = dev.sample(n)
            assert len(set((T_idxs // stride * B + B_idxs).tolist())) == n
            ok = valid_rows((T_idxs // stride).numpy(), dev.tree.t, dev.tree.full,
                            dev.tree.T, dev.tree.off_backward, dev.tree.off_forward)
            assert ok.all()
            ref.tree.sample(n, unique=True)  # keep the reference's last leaves in step
            ref.tree._last_leaves = dev.tree._last_leaves.numpy().copy()
        else:
            u = rng.rand(n)
            r_T, r_B, r_w = ref.sample(n, uniforms=u)
            T_idxs, B_idxs, w = dev.sample(n, uniforms=as_input(u, rng))
            assert torch.equal(T_idxs, torch.from_numpy(r_T))
            assert torch.equal(B_idxs, torch.from_numpy(r_B))
            assert w.dtype == torch.float32
            np.testing.assert_allclose(w.numpy(), r_w, rtol=1e-6)
            assert w.max() == 1.0
            n_checked += 1
        new = rng.rand(n) * 3
        ref.update_batch_priorities(new)
        dev.update_batch_priorities(as_input(new, rng))
        compare_trees()
        ref.set_beta(min(1.0, ref.beta + 0.01))
    assert unique or n_checked > 20


def test_device_sampling_no_host_reads_and_bad_priorities():
    storage = make_storage(64, 4, 3)
    scheme = DevicePrioritizedSampling(storage, off_backward=3, alpha=0.6, beta=0.4,
                                       input_priorities=True)
    rng = np.random.RandomState(0)
    batches = [random_samples(rng, 4, 4) for _ in range(6)]
    p_in = torch.rand(4, 4)
    with HostSyncCounter() as syncs:
        for samples in batches:
            storage.append(samples)
            scheme.advance(4, p_in)
            T_idxs, B_idxs, w = scheme.sample(16)
            scheme.update_batch_priorities(torch.rand(16) + 0.5)
    assert syncs.count == 0, syncs.report()
    # A raw priority that is negative or NaN leaves its leaf (alpha = 0 would make it 1).
    scheme2 = DevicePrioritizedSampling(make_storage(16, 1, 1), off_backward=1, alpha=0.0)
    scheme2.storage.append(random_samples(rng, 8, 1))
    scheme2.advance(8)
    scheme2.sample(2, uniforms=torch.tensor([0.0, 0.99]))
    scheme2.tree.update_priorities(torch.tensor([0, 6]), torch.tensor([0.25, 0.5]))
    scheme2.update_batch_priorities(torch.tensor([-1.0, float("nan")]))
    assert scheme2.tree.leaves[0, 0] == 0.25 and scheme2.tree.leaves[6, 0] == 0.5
    with pytest.raises(ValueError, match="input_priorities=False"):
        scheme2.advance(1, torch.ones(1))
    with pytest.raises(ValueError, match="beta"):
        scheme2.set_beta(1.5)
    with pytest.raises(ValueError, match="too short"):
        DevicePrioritizedSampling(make_storage(4, 1, 1), off_backward=3)
    with pytest.raises(ValueError, match="alpha"):
        DevicePrioritizedSampling(make_storage(16, 1, 1), off_backward=1, alpha=-1)
    with pytest.raises(RuntimeError, match="no valid rows"):
        DevicePrioritizedSampling(make_storage(16, 1, 1), off_backward=1).sample(2)


def test_device_sampling_state_dict_round_trip():
    rng = np.random.RandomState(1)
    storage = make_storage(32, 2, 1)
    scheme = DevicePrioritizedSampling(storage, off_backward=1, beta=0.5)
    storage.append(random_samples(rng, 10, 2))
    scheme.advance(10)
    scheme.sample(6)
    scheme.update_batch_priorities(torch.rand(6) * 3)
    state = scheme.state_dict()
    expected = scheme.sample(12)
    other = DevicePrioritizedSampling(storage, off_backward=1, beta=0.1)
    other.load_state_dict(state)
    assert other.beta == 0.5 and other._rows_started == 10
    got = other.sample(12)
    assert all(torch.equal(x, y) for x, y in zip(got, expected))
