"""Tests for rlfast.utils.array (numpy counterparts of the tensor helpers)."""
import numpy as np
import pytest

from rlfast.utils.array import infer_leading_dims, select_at_indexes, to_onehot, valid_mean


def test_select_at_indexes_matches_loop():
    rng = np.random.default_rng(0)
    values = rng.normal(size=(4, 3, 5))
    idx = rng.integers(5, size=(4, 3))
    out = select_at_indexes(idx, values)
    assert out.shape == (4, 3)
    for t in range(4):
        for b in range(3):
            assert out[t, b] == values[t, b, idx[t, b]]
    trailing = rng.normal(size=(3, 5, 2))
    out2 = select_at_indexes(idx[0], trailing)
    assert out2.shape == (3, 2)
    assert np.array_equal(out2[1], trailing[1, idx[0, 1]])


def test_to_onehot():
    idx = np.array([[0, 2], [3, 1]])
    onehot = to_onehot(idx, 4, dtype=np.float32)
    assert onehot.shape == (2, 2, 4) and onehot.dtype == np.float32
    assert np.array_equal(onehot.argmax(-1), idx)
    assert np.array_equal(onehot.sum(-1), np.ones((2, 2)))
    assert to_onehot(idx, 4).dtype == idx.dtype


def test_valid_mean():
    x = np.array([[1.0, 2.0], [3.0, 10.0]])
    valid = np.array([[1, 1], [1, 0]])
    assert valid_mean(x) == pytest.approx(4.0)
    assert valid_mean(x, valid) == pytest.approx(2.0)
    assert np.allclose(valid_mean(x, valid, axis=0), [2.0, 2.0])
    assert valid_mean(x, np.zeros((2, 2))) == 0.0


@pytest.mark.parametrize(
    "shape, dim, expected",
    [
        ((4,), 1, (1, 1, (4,), False, False)),
        ((3, 4), 1, (1, 3, (4,), False, True)),
        ((5, 3, 4), 1, (5, 3, (4,), True, True)),
        ((5, 3), 0, (5, 3, (), True, True)),
    ],
)
def test_infer_leading_dims(shape, dim, expected):
    assert infer_leading_dims(np.zeros(shape), dim) == expected


def test_infer_leading_dims_rejects_bad_rank():
    with pytest.raises(ValueError, match="between"):
        infer_leading_dims(np.zeros((2, 2, 2, 2)), 1)
