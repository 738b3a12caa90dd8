import numpy as np
import pytest

from rlfast.replays import SumTree


def full_tree(priorities, **kwargs):
    T, B = priorities.shape
    tree = SumTree(T, B, off_backward=0, off_forward=0, enable_input_priorities=True, **kwargs)
    tree.advance(T, priorities=priorities)
    return tree


def check_internal_sums(tree):
    """Every internal node equals the sum of its children; the root is the sum of leaves."""
    t = tree.tree
    L = len(t) // 2
    for node in range(1, L):
        assert t[node] == pytest.approx(t[2 * node] + t[2 * node + 1], rel=1e-12, abs=1e-12)
    assert tree.total == pytest.approx(float(np.sum(tree.leaves)), rel=1e-12)


def chi_square(counts, expected):
    return float(np.sum((counts - expected) ** 2 / expected))


def test_sampling_frequencies_proportional_to_priority():
    rng = np.random.RandomState(0)
    p = rng.rand(6, 3) * 5
    p[1, 2] = 0.0
    p[4, 0] = 0.0
    tree = full_tree(p)
    check_internal_sums(tree)
    np.random.seed(1)
    n_draws = 120_000
    counts = np.zeros((6, 3))
    for _ in range(n_draws // 400):
        T_idxs, B_idxs, pri = tree.sample(400)
        np.add.at(counts, (T_idxs, B_idxs), 1)
        np.testing.assert_array_equal(pri, p[T_idxs, B_idxs])
    assert counts[1, 2] == 0 and counts[4, 0] == 0  # zero priority: never drawn
    nz = p > 0
    expected = n_draws * p[nz] / p.sum()
    stat = chi_square(counts[nz], expected)
    df = nz.sum() - 1
    assert stat < df + 5 * np.sqrt(2 * df), (stat, df)


def test_update_batch_priorities_takes_effect():
    tree = full_tree(np.ones((8, 4)))
    np.random.seed(3)
    T_idxs, B_idxs, _ = tree.sample(5)
    new = np.arange(1, 6) * 10.0
    tree.update_batch_priorities(new)
    expected = np.ones((8, 4))
    expected[T_idxs, B_idxs] = new  # duplicates: the later value wins, as in the tree
    np.testing.assert_array_equal(tree.leaves, expected)
    check_internal_sums(tree)
    # Zero everything but one leaf: only that leaf is drawn afterwards.
    tree.sample(32, unique=True)
    tree.update_batch_priorities(np.zeros(32))  # 8 * 4 = 32 leaves: all of them
    assert tree.total == 0
    with pytest.raises(RuntimeError, match="no valid leaves"):
        tree.sample(1)


def test_update_concentrates_sampling():
    tree = full_tree(np.ones((10, 2)))
    np.random.seed(0)
    tree.sample(20, unique=True)
    leaves = tree._last_leaves
    new = np.full(20, 1e-6)
    new[leaves == 7] = 1.0
    tree.update_batch_priorities(new)
    T_idxs, B_idxs, _ = tree.sample(1000)
    assert np.mean(T_idxs * 2 + B_idxs == 7) > 0.99


def test_unique_sampling_has_no_duplicates_and_restores_tree():
    p = np.random.RandomState(2).rand(5, 4)
    p[0] = 0
    tree = full_tree(p)
    before = tree.tree.copy()
    np.random.seed(5)
    T_idxs, B_idxs, pri = tree.sample(16, unique=True)
    leaves = T_idxs * 4 + B_idxs
    assert len(np.unique(leaves)) == 16
    assert np.all(pri > 0) and np.all(T_idxs > 0)
    np.testing.assert_array_equal(tree.tree, before)
    with pytest.raises(RuntimeError, match="fewer than"):
        tree.sample(17, unique=True)
    np.testing.assert_array_equal(tree.tree, before)


def reference_leaves(history, T, B, off_backward, off_forward, default, shift):
    """Per-row loop in global time: row r holds the latest global step g = r (mod T); it is
    valid when g has off_backward newer steps and off_forward older steps still present."""
    n = len(history)  # history[g] = input priorities [B] given with step g, or None
    kept = {}
    for g in range(n):
        kept[g] = np.full(B, default, dtype=float)
    for g, p in enumerate(history):
        if p is not None and g - shift >= 0:
            kept[g - shift] = p
    out = np.zeros((T, B))
    for r in range(T):
        if r > n - 1:
            continue
        g = r + T * ((n - 1 - r) // T)
        if g + off_backward <= n - 1 and g - off_forward >= n - T:
            out[r] = kept[g]
    return out


@pytest.mark.parametrize("off_backward,off_forward,shift", [(1, 1, 0), (3, 2, 0), (2, 1, 2),
                                                            (0, 0, 1), (2, 3, 4)])
def test_advance_windows_match_reference(off_backward, off_forward, shift):
    rng = np.random.RandomState(off_backward * 10 + off_forward + shift)
    T, B = 9, 2
    tree = SumTree(T, B, off_backward, off_forward, default_value=0.5,
                   enable_input_priorities=True, input_priority_shift=shift)
    history = []
    for _ in range(25):
        T_in = int(rng.randint(0, 5))
        if rng.rand() < 0.5:
            p = rng.rand(T_in, B) + 1
            tree.advance(T_in, priorities=p)
            history.extend(list(p))
        else:
            tree.advance(T_in)
            history.extend([None] * T_in)
        expected = reference_leaves(history, T, B, off_backward, off_forward, 0.5, shift)
        np.testing.assert_allclose(tree.leaves, expected)
        check_internal_sums(tree)
        assert tree.n_valid_rows() == np.count_nonzero(expected[:, 0])


def test_default_and_broadcast_priorities():
    tree = SumTree(6, 3, off_backward=1, off_forward=1, default_value=2.0,
                   enable_input_priorities=True)
    tree.advance(3)
    np.testing.assert_array_equal(tree.leaves[:3], [[2, 2, 2], [2, 2, 2], [0, 0, 0]])
    tree.advance(2, priorities=np.array([1.0, 3.0, 5.0]))  # [B] broadcast over T
    np.testing.assert_array_equal(tree.leaves[3], [1, 3, 5])
    tree.advance(1, priorities=7.0)  # scalar; row 5 waits in the backward window
    np.testing.assert_array_equal(tree.leaves[4:], [[1, 3, 5], [0, 0, 0]])
    np.testing.assert_array_equal(tree.leaves[0], [0, 0, 0])  # cursor row: forward window
    tree.advance(1)
    np.testing.assert_array_equal(tree.leaves[5], [7, 7, 7])
    np.testing.assert_array_equal(tree.leaves[:2], np.zeros((2, 3)))
    assert tree.tree.dtype == np.float64


def test_input_checks():
    with pytest.raises(ValueError, match="off_backward \\+ off_forward"):
        SumTree(4, 1, off_backward=3, off_forward=1)
    tree = SumTree(4, 2, 1, 1)
    with pytest.raises(ValueError, match="enable_input_priorities=False"):
        tree.advance(1, priorities=np.ones(2))
    with pytest.raises(ValueError, match="more rows"):
        tree.advance(5)
    with pytest.raises(RuntimeError, match="before any sample"):
        tree.update_batch_priorities([1.0])
    tree2 = SumTree(4, 2, 0, 0, enable_input_priorities=True)
    with pytest.raises(ValueError, match=">= 0"):
        tree2.advance(1, priorities=np.array([-1.0, 1.0]))
    with pytest.raises(ValueError, match="broadcast"):
        tree2.advance(2, priorities=np.ones((3, 2)))


def test_print_tree(capsys):
    tree = full_tree(np.array([[1.0, 2.0], [3.0, 4.0]]))
    tree.print_tree()
    out = capsys.readouterr().out
    assert "level 0: [10.]" in out and "level 2: [1. 2. 3. 4.]" in out
    with pytest.raises(ValueError, match="level"):
        tree.print_tree(level=5)


def test_single_leaf_tree():
    tree = SumTree(1, 1, 0, 0, default_value=3.0)
    tree.advance(1)
    T_idxs, B_idxs, pri = tree.sample(4)
    assert list(T_idxs) == [0] * 4 and list(pri) == [3.0] * 4
